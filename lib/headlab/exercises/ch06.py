"""Checks for chapter 6, "What breaks when specialisation is ignored"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from headlab.exercises import Case, ExerciseFailed, call_reader, run_cases

__all__ = ["check_worst_case_order", "check_layer_mean_z", "check_flag_hijacked"]


def _same_order(got, expected) -> str | None:
    try:
        got = [tuple(int(v) for v in h) for h in got]
    except (TypeError, ValueError):
        return f"expected a list of (layer, head) pairs, got {type(got).__name__}"
    if got != list(expected):
        return "a different order (least important first)"
    return None


def check_worst_case_order(fn: Callable) -> None:
    """``fn(effects)``: ``effects`` ``(n_layers, n_heads, n_inputs)`` is the increase of the loss on
    each input when each head is removed; returns every ``(layer, head)``, least important first by
    the *worst case*: the largest effect over the inputs (ties: layer-major order)."""
    # one layer of three heads, three inputs
    e1 = np.array([[[0.1, 0.1, 0.1],      # mean 0.1, worst 0.1
                    [0.0, 0.0, 0.9],      # mean 0.3, worst 0.9: a specialist for input 2
                    [0.4, 0.4, 0.4]]])    # mean 0.4, worst 0.4
    # two layers of two heads; a tie in the worst case between 0.1 and 1.0
    e2 = np.array([[[0.2, 0.2], [0.0, 0.5]],
                   [[0.5, 0.0], [0.3, 0.3]]])
    e3 = np.array([[[-0.9, -0.2], [0.1, -0.5]]])  # worst -0.2 and 0.1; largest |effect| 0.9 and 0.5  # removing either head *helps* on some inputs
    run_cases(fn, [
        Case("a specialist with a small mean but a large worst case", args=(e1,),
             expected=[(0, 0), (0, 2), (0, 1)],
             hint="score each head by effects.max over the inputs (not the mean), then sort ascending."),
        Case("two layers, with a tie (keep layer-major order)", args=(e2,),
             expected=[(0, 0), (1, 1), (0, 1), (1, 0)],
             hint="use a stable sort on the flattened (layer, head) grid: np.argsort(..., kind='stable')."),
        Case("negative effects", args=(e3,), expected=[(0, 0), (0, 1)],
             hint="the worst case is the maximum, not the largest absolute value."),
    ], compare=_same_order, what="prune by the worst case")


def _mean_z_cases() -> list[Case]:
    z = np.zeros((1, 2, 3, 2))  # (batch, pos, head, d_head)
    z[0, 0, :, 0] = [3.0, 0.0, -6.0]   # mean -1
    z[0, 0, :, 1] = [1.0, 1.0, 1.0]    # mean 1
    z[0, 1, :, 0] = [2.0, 4.0, 6.0]    # mean 4
    expected = np.zeros_like(z)
    expected[0, 0, :, 0], expected[0, 0, :, 1], expected[0, 1, :, 0] = -1.0, 1.0, 4.0
    z2 = np.arange(2 * 1 * 2 * 1, dtype=float).reshape(2, 1, 2, 1)  # two inputs: never mix them
    exp2 = np.array([[[[0.5], [0.5]]], [[[2.5], [2.5]]]])
    return [
        Case("three heads at two positions", args=(z,), expected=expected,
             hint="average over the head axis (axis 2) only, keeping the positions apart."),
        Case("two inputs (the mean is per input and position)", args=(z2,), expected=exp2,
             hint="do not average over the batch: each input keeps its own mean."),
    ]


def check_layer_mean_z(fn: Callable) -> None:
    """``fn(z)``: ``z`` ``(batch, pos, n_heads, d_head)``; returns a new array of the same shape in
    which every head's output is the layer's mean head output at that input and position, and must
    not modify ``z``."""
    run_cases(fn, _mean_z_cases(), what="the averaging ablation")
    z = np.arange(8, dtype=float).reshape(1, 1, 4, 2)
    before = z.copy()
    out = call_reader(fn, z, case="an input that must stay unchanged")
    if not np.array_equal(z, before):
        raise ExerciseFailed("layer_mean_z modified z in place; return a new array (the clean outputs "
                             "are needed to compare with).")
    if np.shape(out) != z.shape:
        raise ExerciseFailed(f"layer_mean_z must return z's shape {z.shape}, got {np.shape(out)}")


def _rows(spec) -> np.ndarray:
    """Rows ``(n, n_layers=1, n_heads=3, pos=4)`` from {(input, head): row}; other rows uniform over 1..3."""
    rows = np.zeros((len(spec), 1, 3, 4))
    rows[..., 1:] = 1 / 3
    for i, heads in enumerate(spec):
        for h, row in heads.items():
            rows[i, 0, h] = row
    return rows


def check_flag_hijacked(fn: Callable) -> None:
    """``fn(rows, x)``: ``rows`` ``(n, n_layers, n_heads, pos)`` are every head's attention row at the
    query of each input; returns a boolean array ``(n,)``: True where some head puts *more than* ``x``
    of its attention on a single key other than position 0 (the sink, where heads park)."""
    spike = [0.0, 0.05, 0.9, 0.05]
    sink = [0.95, 0.05, 0.0, 0.0]
    rows = _rows([{}, {1: spike}, {0: sink}, {2: [0.0, 0.1, 0.1, 0.8]}])
    # in the layer mean, input 1 puts (0.9 + 2/3) / 3 = 0.52 on key 2 and would pass x = 0.6
    run_cases(fn, [
        Case("clean, hijacked, parked on the sink, exactly at the threshold", args=(rows, 0.8),
             expected=np.array([False, True, False, False]),
             hint="ignore key 0, take each head's largest weight, and compare with '>' (0.8 is not above 0.8)."),
        Case("the same inputs at x = 0.6 (the mean over heads would miss input 1)", args=(rows, 0.6),
             expected=np.array([False, True, False, True]),
             hint="inspect every head on its own; do not average the heads first."),
    ], what="per-head inspection")
