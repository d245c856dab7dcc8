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

from collections.abc import Callable
from typing import Any

import numpy as np

from headlab.exercises._core import Case, ExerciseFailed, call_reader, compare_arrays, run_cases, to_numpy

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
    then that folding a row in tiles gives ``softmax(scores) @ values``."""
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
    run_cases(fn, cases, compare=_compare_state, what="online softmax", forbid=("headlab.kernels",))
    _check_whole_row(fn)


def _check_whole_row(fn: Callable[..., Any]) -> None:
    """Folding a row tile by tile gives softmax(scores) @ values (weights known by construction)."""
    weights = np.array([1.0, 4.0, 2.0, 8.0, 1.0, 4.0])  # the row's softmax is weights / 20
    scores = 7.0 + np.log(weights)  # the max is in the second tile, then a smaller one follows
    values = np.arange(12.0).reshape(6, 2)
    m, l, acc = -np.inf, 0.0, np.zeros(2)
    for start in (0, 2, 4):
        state = call_reader(fn, m, l, acc.copy(), scores[start:start + 2], values[start:start + 2],
                            case=f"the tile of keys {start}-{start + 1} of a 6-key row")
        if not isinstance(state, (tuple, list)) or len(state) != 3:
            raise ExerciseFailed(f"expected a tuple (m, l, acc) from each tile, got {type(state).__name__}")
        m, l, acc = float(to_numpy(state[0])), float(to_numpy(state[1])), to_numpy(state[2]).astype(float)
    out = acc / l
    expected = weights / weights.sum() @ values
    problem = compare_arrays(out, expected, atol=1e-9, rtol=1e-9)
    if problem is not None:
        raise ExerciseFailed(f"one tile at a time, the row of 6 keys (3 tiles) ends with acc / l = {out}, "
                             f"but softmax(scores) @ values = {expected}: {problem}")
    print(f"✓ and three tiles in a row give softmax(scores) @ values = {np.round(expected, 4)}.")
