"""Check for the exercise on the online-softmax update (the step the fused kernel repeats per tile).

The reader writes ``online_softmax_update(m, l, acc, scores, values) -> (m, l, acc)``: one
query row's running state -- the largest score so far ``m``, ``l = sum_j exp(s_j - m)`` and
``acc = sum_j exp(s_j - m) v_j`` over the keys seen so far -- updated with one more tile
of keys, ``scores`` ``(bk,)`` and ``values`` ``(bk, d)``. The empty state, before any key,
is ``m = -inf``, ``l = 0``, ``acc = 0``; a key with score ``-inf`` (masked) weighs nothing.
After the last tile, ``acc / l`` is the row's attention output.

Every case has an answer known by construction: scores ``c + log w`` give weights
proportional to ``w`` whatever ``c``, so the exact state can be written down.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from deviating.exercises._core import Case, compare_arrays, run_cases, to_numpy

__all__ = ["check_online_softmax_update"]


def _state(m: float, l: float, acc: list[float]) -> np.ndarray:
    """The expected state written flat, ``[m, l, *acc]`` (so a failure message can print it)."""
    return np.array([m, l, *acc], dtype=float)


def _compare_state(got: Any, expected: np.ndarray) -> str | None:
    """``got`` is the reader's ``(m, l, acc)``; ``expected`` is ``[m, l, *acc]``."""
    if got is None:
        return "got None: did the function forget to `return` (m, l, acc)?"
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"expected a tuple (m, l, acc), got {type(got).__name__}"
    for name, g, e in zip(("m", "l", "acc"), got, (expected[:1], expected[1:2], expected[2:])):
        g = to_numpy(g).astype(float)
        e = np.asarray(e, dtype=float)
        if name == "m" and np.isneginf(e).all():
            if not (g.size == 1 and np.isneginf(g).all()):
                return f"m: expected -inf (no key seen yet), got {g}"
            continue
        if name != "acc":
            g = g.reshape(-1)  # a number, as a 1-element array
        problem = compare_arrays(g, e, atol=1e-9, rtol=1e-9)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def check_online_softmax_update(fn: Callable[..., Any]) -> None:
    """Check ``online_softmax_update(m, l, acc, scores, values) -> (m, l, acc)`` on known answers,
    the last of them a whole row folded tile by tile (whose ``acc / l`` is ``softmax(scores) @ values``)."""
    log = np.log
    empty = (-np.inf, 0.0, np.array([0.0]))
    cases = [
        Case("the first tile, from the empty state: scores [0, log 3], values [[1], [0]]",
             args=(*empty, np.array([0.0, log(3)]), np.array([[1.0], [0.0]])),
             expected=_state(log(3), 4 / 3, [1 / 3]),
             hint="m becomes the tile's max, log 3; l = exp(0 - log 3) + exp(0) = 4/3. The old sums are 0: "
                  "multiply them by exp(-inf - m) = 0 (no NaN: m is finite now)."),
        Case("a tile that does not raise the max: state (m=2, l=1, acc=[5]), scores [2 - log 2], values [[3]]",
             args=(2.0, 1.0, np.array([5.0]), np.array([2 - log(2)]), np.array([[3.0]])),
             expected=_state(2.0, 1.5, [6.5]),
             hint="the new max is max(old m, tile max) = 2: the old sums stay, the key adds exp(-log 2) = 1/2."),
        Case("a tile that raises the max: state (m=0, l=2, acc=[4]), scores [log 4], values [[1]]",
             args=(0.0, 2.0, np.array([4.0]), np.array([log(4)]), np.array([[1.0]])),
             expected=_state(log(4), 1.5, [2.0]),
             hint="old sums were measured against m = 0; against m' = log 4 they shrink by exp(0 - log 4) = 1/4. "
                  "Rescale l AND acc by exp(m - m'), not exp(m' - m)."),
        Case("a masked key (score -inf) beside a real one: state (m=0, l=1, acc=[1]), scores [-inf, 0]",
             args=(0.0, 1.0, np.array([1.0]), np.array([-np.inf, 0.0]), np.array([[100.0], [2.0]])),
             expected=_state(0.0, 2.0, [3.0]),
             hint="exp(-inf - m) = 0: a masked key adds nothing to l or acc."),
        Case("a fully masked tile first: the state stays empty",
             args=(*empty, np.array([-np.inf, -np.inf]), np.array([[1.0], [2.0]])),
             expected=_state(-np.inf, 0.0, [0.0]),
             hint="with no finite score the max stays -inf; exp(-inf - (-inf)) is NaN, so do not rescale "
                  "(or subtract 0 instead of -inf) while no key has been seen."),
        Case("huge scores 1000 + log [1, 3]: no overflow",
             args=(*empty, 1000 + log(np.array([1.0, 3.0])), np.array([[1.0, 0.0], [0.0, 1.0]])),
             expected=_state(1000 + log(3), 4 / 3, [1 / 3, 1.0]),
             hint="exp(1000) overflows: exponentiate scores minus the running max, never the scores themselves."),
        Case("a new max and a masked key in one tile, values of width 2",
             args=(1.0, 2.0, np.array([2.0, 4.0]), np.array([1 + log(6), -np.inf]),
                   np.array([[3.0, 0.0], [100.0, 100.0]])),
             expected=_state(1 + log(6), 4 / 3, [10 / 3, 2 / 3]), hidden=True),
    ]
    weights = np.array([1.0, 4.0, 2.0, 8.0, 1.0, 4.0])  # the row's softmax is weights / 20
    scores = 7.0 + np.log(weights)  # the max is in the second tile, then a smaller one follows
    values = np.arange(12.0).reshape(6, 2)
    cases.append(Case(
        "a row of 6 keys folded tile by tile (3 tiles of 2, the max in the middle one)",
        args=(_Row(scores, values, tile=2),),
        # the exact final state: m = the row's max, l = sum(weights) / 8, acc = weights @ values / 8
        expected=_state(7.0 + log(8.0), weights.sum() / 8, list(weights @ values / 8)),
        hint="after the last tile, acc / l must be softmax(scores) @ values: every tile's update must "
             "carry the state of the tiles before it."))
    run_cases(_reader(fn), cases, compare=_compare_state, what="online softmax", forbid=("deviating.kernels", "headlab.kernels"))


class _Row:
    """A whole query row, to be folded ``tile`` keys at a time from the empty state."""

    def __init__(self, scores: np.ndarray, values: np.ndarray, tile: int):
        self.scores, self.values, self.tile = scores, values, tile

    def __repr__(self) -> str:
        return f"scores {np.round(self.scores, 4).tolist()}, values {self.values.tolist()}, in tiles of {self.tile}"


def _reader(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The reader's function, which also folds a :class:`_Row` tile by tile (one call per tile)."""

    @functools.wraps(fn)
    def call(*args):
        if len(args) == 1 and isinstance(args[0], _Row):
            row = args[0]
            state: Any = (-np.inf, 0.0, np.zeros(row.values.shape[1]))
            for start in range(0, len(row.scores), row.tile):
                if not isinstance(state, (tuple, list)) or len(state) != 3:
                    return state  # reported by the comparison
                m, l, acc = state
                state = fn(m, l, acc, row.scores[start:start + row.tile], row.values[start:start + row.tile])
            return state
        return fn(*args)

    return call
