"""Checks for chapter 08, "Are heads the right unit?"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, run_cases

_SAE = ("deviating.analysis.sae",)

__all__ = ["check_topk_activation", "check_fraction_recovered", "check_match_features", "check_units_for_mass"]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def check_topk_activation(fn: Callable) -> None:
    """Check ``fn(pre, k)``: keep the k largest entries of the last axis, zero the rest, then ReLU."""
    run_cases(fn, [
        Case("one row of positive pre-activations, k = 2: [0.5, 3, 1, 2]",
             args=(_t([0.5, 3.0, 1.0, 2.0]), 2), expected=[0.0, 3.0, 0.0, 2.0],
             hint="keep the values at the k largest positions and set every other entry to 0."),
        Case("k = 1 keeps only the largest: [1, -2, 4, 3.5]",
             args=(_t([1.0, -2.0, 4.0, 3.5]), 1), expected=[0.0, 0.0, 4.0, 0.0]),
        Case("a negative value among the top k is zeroed: [-1, -3, 0.5, -0.2], k = 2",
             args=(_t([-1.0, -3.0, 0.5, -0.2]), 2), expected=[0.0, 0.0, 0.5, 0.0],
             hint="the top 2 are 0.5 and -0.2; a feature activation is never negative, so apply a "
                  "ReLU to the kept values (at most k features are active, sometimes fewer)."),
        Case("a batch of two rows, each with its own top k: [[1, 5, 3], [6, 2, 4]], k = 2",
             args=(_t([[1.0, 5.0, 3.0], [6.0, 2.0, 4.0]]), 2), expected=[[0.0, 5.0, 3.0], [6.0, 0.0, 4.0]],
             hint="select along the last axis (dim=-1), separately for every row."),
        Case("k equal to the number of features is a plain ReLU: [[-1, 2, -3, 4]], k = 4",
             args=(_t([[-1.0, 2.0, -3.0, 4.0]]), 4), expected=[[0.0, 2.0, 0.0, 4.0]]),
        Case("a (batch, pos, n_features) input of shape (2, 1, 3), k = 1",
             args=(_t([[[0.1, 0.3, 0.2]], [[0.9, -0.5, 0.4]]]), 1), expected=[[[0.0, 0.3, 0.0]], [[0.9, 0.0, 0.0]]],
             hint="work on the last axis whatever the number of leading axes."),
        Case("two rows of five, k = 3", args=(_t([[0.2, -1.0, 3.0, 0.1, 2.5], [-0.3, -0.1, -0.2, 0.4, -2.0]]), 3),
             expected=[[0.2, 0.0, 3.0, 0.0, 2.5], [0.0, 0.0, 0.0, 0.4, 0.0]], hidden=True),
    ], what="a top-k activation", forbid=_SAE)


def check_fraction_recovered(fn: Callable) -> None:
    """Check ``fn(clean, replaced, floor)`` = (floor - replaced) / (floor - clean)."""
    run_cases(fn, [
        Case("a perfect replacement: clean 2.0, replaced 2.0, floor 5.0", args=(2.0, 2.0, 5.0), expected=1.0,
             hint="a replacement as good as the clean model recovers all of the loss: 1."),
        Case("a replacement as bad as ablating the layer: clean 2.0, replaced 5.0, floor 5.0",
             args=(2.0, 5.0, 5.0), expected=0.0,
             hint="(floor - replaced) is 0 when the replacement is no better than the floor."),
        Case("halfway: clean 2.0, replaced 3.5, floor 5.0", args=(2.0, 3.5, 5.0), expected=0.5,
             hint="divide the loss the replacement recovers, floor - replaced, by what there is to "
                  "recover, floor - clean."),
        Case("worse than the floor: clean 2.0, replaced 6.5, floor 5.0", args=(2.0, 6.5, 5.0), expected=-0.5,
             hint="no clipping: a replacement worse than ablating the layer gets a negative fraction."),
        Case("numbers of the size this chapter measures: clean 2.04, replaced 2.10, floor 3.30",
             args=(2.04, 2.10, 3.30), expected=1.2 / 1.26),
        Case("clean 1.0, replaced 1.5, floor 3.0", args=(1.0, 1.5, 3.0), expected=0.75, hidden=True),
    ], what="loss recovered", forbid=_SAE)


def check_match_features(fn: Callable) -> None:
    """Check ``fn(dec_a, dec_b)``: for each row of dec_a, its largest cosine with a row of dec_b."""
    s = 1 / np.sqrt(2)
    run_cases(fn, [
        Case("identical dictionaries (the identity, 3 x 3)", args=(torch.eye(3), torch.eye(3)), expected=[1.0, 1.0, 1.0]),
        Case("the same directions in another order",
             args=(_t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), _t([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])),
             expected=[1.0, 1.0], hint="take the maximum over all rows of dec_b, not the row with the same index."),
        Case("rows of different lengths: a cosine ignores length",
             args=(_t([[3.0, 0.0], [0.0, 0.5]]), _t([[0.0, 2.0], [1.0, 0.0]])), expected=[1.0, 1.0],
             hint="divide each row by its norm before taking dot products."),
        Case("a direction at 45 degrees from the nearest one: [1, 0] against [1, 1] and [0, -1]",
             args=(_t([[1.0, 0.0]]), _t([[1.0, 1.0], [0.0, -1.0]])), expected=[s]),
        Case("an opposite direction is no match: [1, 0] against [-1, 0] and [0, 1]",
             args=(_t([[1.0, 0.0]]), _t([[-1.0, 0.0], [0.0, 1.0]])), expected=[0.0],
             hint="features only fire positively, so -d is a different feature from d: take the "
                  "maximum of the cosine itself, not of its absolute value."),
        Case("more features in dec_b than in dec_a: the answer has one entry per row of dec_a",
             args=(_t([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]),
                   _t([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 3.0, 4.0]])),
             expected=[s, 1.0]),
        Case("three features against two", args=(_t([[0.0, 2.0], [1.0, 1.0], [-3.0, 0.0]]),
                                                 _t([[0.0, 5.0], [-1.0, 1.0]])),
             expected=[1.0, s, s], hidden=True),
    ], what="feature matches", forbid=_SAE)


def check_units_for_mass(fn: Callable) -> None:
    """Check ``fn(contributions, mass)``: per row, the fewest units whose contributions reach
    ``mass`` of the row's total (0 for an all-zero row)."""
    run_cases(fn, [
        Case("one token, sorted contributions [5, 3, 2, 0], mass 0.5", args=(np.array([[5.0, 3.0, 2.0, 0.0]]), 0.5),
             expected=[1], hint="5 of the total 10 already is half."),
        Case("the same token, mass 0.75", args=(np.array([[5.0, 3.0, 2.0, 0.0]]), 0.75), expected=[2],
             hint="5 < 7.5, 5 + 3 = 8 >= 7.5: two units."),
        Case("unsorted contributions [2, 0, 5, 3], mass 0.75", args=(np.array([[2.0, 0.0, 5.0, 3.0]]), 0.75),
             expected=[2], hint="take the largest contributions first: sort each row in decreasing order."),
        Case("two tokens, one spread and one concentrated: [[1, 1, 1, 1], [10, 0, 0, 0]], mass 0.6",
             args=(np.array([[1.0, 1.0, 1.0, 1.0], [10.0, 0.0, 0.0, 0.0]]), 0.6), expected=[3, 1],
             hint="each row has its own total."),
        Case("a token where nothing is written: [0, 0, 0], mass 0.9", args=(np.array([[0.0, 0.0, 0.0]]), 0.9),
             expected=[0], hint="no unit is needed to carry nothing: return 0 for an all-zero row."),
        Case("three tokens, mass 0.9", args=(np.array([[1.0, 8.0, 1.0, 0.0], [3.0, 3.0, 3.0, 1.0],
                                                       [0.0, 0.0, 0.0, 0.0]]), 0.9),
             expected=[2, 3, 0], hidden=True),
    ], what="units per token", forbid=_SAE)
