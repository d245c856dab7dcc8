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
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_online_softmax_update", "check_tiled_attention"]

_DRAWN = MARK + ": "


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
    run_cases(_reader(fn), cases + drawn(_drawn_update_cases), compare=_compare_state, what="online softmax",
              forbid=("deviating.kernels", "headlab.kernels"))


def _state_of(w: np.ndarray, values: np.ndarray, c: float) -> tuple[float, float, np.ndarray]:
    """The exact state after the keys with scores ``c + log w`` (0 weight: a masked key) and ``values``:
    ``m = c + log max w``, ``l = sum w / max w``, ``acc = (w @ values) / max w``."""
    top = w.max()
    return c + np.log(top), w.sum() / top, w @ values / top


def _drawn_update_cases(rng: np.random.Generator) -> list[Case]:
    """Random tiles on top of a random earlier tile (drawn when grading: :mod:`.drawn`): one that raises
    the max, one that does not, a masked key beside real ones, a fully masked first tile, huge scores
    from the empty state, and a whole row folded in tiles. Every state is that of the keys seen so far."""
    d = int(rng.integers(1, 4))
    cases = []
    for kind in ("raises the max", "keeps the max", "a masked key"):
        c = float(rng.uniform(-5.0, 5.0))
        old, new = rng.uniform(0.5, 2.0, int(rng.integers(1, 4))), rng.uniform(0.5, 2.0, int(rng.integers(2, 4)))
        if kind == "raises the max":
            new[int(rng.integers(len(new)))] = old.max() * rng.uniform(2.0, 4.0)
        if kind == "keeps the max":
            old[int(rng.integers(len(old)))] = new.max() * rng.uniform(2.0, 4.0)
        if kind == "a masked key":
            new[0] = 0.0
            new[1] = old.max() * rng.uniform(2.0, 4.0)  # a real key that raises the max, beside the masked one
        v_old, v_new = rng.normal(size=(len(old), d)), rng.normal(size=(len(new), d))
        m, l, acc = _state_of(old, v_old, c)
        with np.errstate(divide="ignore"):
            scores = c + np.log(new)
        cases.append(Case(_DRAWN + f"a tile that {kind}" if kind != "a masked key" else _DRAWN + kind,
                          args=(m, l, acc, scores, v_new),
                          expected=_state(*_state_of(np.concatenate([old, new]), np.vstack([v_old, v_new]), c)[:2],
                                          list(_state_of(np.concatenate([old, new]), np.vstack([v_old, v_new]), c)[2]))))
    values = rng.normal(size=(int(rng.integers(2, 4)), d))
    cases.append(Case(_DRAWN + "a fully masked first tile", args=(-np.inf, 0.0, np.zeros(d),
                                                                   np.full(len(values), -np.inf), values),
                      expected=_state(-np.inf, 0.0, [0.0] * d)))
    w, c = rng.uniform(0.5, 4.0, 3), float(rng.uniform(900.0, 1100.0))
    values = rng.normal(size=(3, d))
    m, l, acc = _state_of(w, values, c)
    cases.append(Case(_DRAWN + "huge scores from the empty state", args=(-np.inf, 0.0, np.zeros(d), c + np.log(w), values),
                      expected=_state(m, l, list(acc))))
    tile = int(rng.integers(2, 4))
    n = 3 * tile
    w, c = rng.uniform(0.5, 4.0, n), float(rng.uniform(-5.0, 5.0))
    w[int(rng.integers(tile, 2 * tile))] = 5.0 * w.max()  # the middle tile raises the max, the last keeps it
    values = rng.normal(size=(n, d))
    m, l, acc = _state_of(w, values, c)
    cases.append(Case(_DRAWN + f"a row of {n} keys folded in tiles of {tile}", args=(_Row(c + np.log(w), values, tile),),
                      expected=_state(m, l, list(acc))))
    return cases


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


# --------------------------------------------------------------------------- a whole tiled loop


def _planted_row_inputs(rng: np.random.Generator, n: int, d: int, d_v: int, shift: float, rise: int = 0) -> tuple:
    """Queries all ``e_a`` and keys holding ``sqrt(d) (log w_j + shift)`` on axis a: every query scores
    key j at ``log w_j + shift``, so query i's weights are ``w`` over the keys it may see, renormalised.
    With ``rise``, key ``rise`` outweighs all others (a later tile then raises every row's max)."""
    a = int(rng.integers(d))
    w = rng.uniform(0.2, 5.0, n)
    if rise:
        w[rise] = 5.0 * w.max()
    k = rng.normal(size=(n, d))
    k[:, a] = np.sqrt(d) * (np.log(w) + shift)
    q = np.zeros((n, d))
    q[:, a] = 1.0
    return q, k, rng.normal(size=(n, d_v)), w


def _tiled_case(rng: np.random.Generator, name: str, n: int, block: int, causal: bool, d: int = 3, d_v: int = 2,
                shift: float = 0.0, hidden: bool = False, hint: str = "", rise: int = 0) -> Case:
    """A planted input, and its output and tile count: with ``T = ceil(n / block)`` tiles per side, a
    causal loop visits the ``T (T + 1) / 2`` tiles on or below the diagonal, a full one all ``T**2``."""
    q, k, v, w = _planted_row_inputs(rng, n, d, d_v, shift, rise)
    weights = np.tril(np.tile(w, (n, 1))) if causal else np.tile(w, (n, 1))
    weights /= weights.sum(axis=1, keepdims=True)
    t = -(-n // block)
    return Case(name, args=(q, k, v, block, causal), expected=(weights @ v, t * (t + 1) // 2 if causal else t * t),
                hidden=hidden, hint=hint)


def _compare_tiled(got: Any, expected: tuple) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (output, tiles_visited), got {type(got).__name__}"
    problem = compare_arrays(got[0], expected[0], atol=1e-9, rtol=1e-9)
    if problem is not None:
        return f"output: {problem}"
    try:
        tiles = int(got[1])
    except (TypeError, ValueError):
        return f"tiles_visited must be a whole number, got {got[1]!r}"
    if tiles != expected[1]:
        return f"tiles_visited: expected {expected[1]}, got {tiles}"
    return None


def check_tiled_attention(fn: Callable[..., Any]) -> None:
    """Check ``tiled_attention(q, k, v, block, causal)`` -> ``(output, tiles_visited)``: one head's
    attention computed tile by tile (``block`` queries against ``block`` keys), never holding a whole
    row of scores; a causal loop skips the tiles above the diagonal. Planted keys give each output."""
    rng = np.random.default_rng(3)
    cases = [
        _tiled_case(rng, "8 positions in tiles of 4, no mask: 2 x 2 tiles", 8, 4, False,
                    hint="every query tile meets every key tile; fold each key tile into the rows' running state."),
        _tiled_case(rng, "8 positions in tiles of 4, causal: 3 of the 4 tiles", 8, 4, True, rise=5,
                    hint="skip a tile whose first key comes after its last query; inside a tile on the diagonal, "
                         "mask the keys after each query (-inf) before folding."),
        _tiled_case(rng, "7 positions in tiles of 3, causal: the last tile is short", 7, 3, True,
                    hint="the last tile holds the n % block positions left over: do not drop them."),
        _tiled_case(rng, "one tile holding everything: 5 positions, block 8", 5, 8, True,
                    hint="a block longer than the sequence is one tile."),
        _tiled_case(rng, "huge scores (about 1000), 6 positions in tiles of 2, causal", 6, 2, True, shift=1000.0,
                    hint="keep the running max of each row and rescale its sums when a tile raises it."),
        _tiled_case(rng, "tiles of one key: 5 positions, block 1, causal", 5, 1, True,
                    hint="with block 1 each tile is one score: the running state does all the work."),
        _tiled_case(rng, "10 positions in tiles of 3, no mask", 10, 3, False, d=4, d_v=3, hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_tiled_cases), compare=_compare_tiled, what="tiled attention",
              forbid=("deviating.kernels", "headlab.kernels"))


def _drawn_tiled_cases(rng: np.random.Generator) -> list[Case]:
    """Random lengths and blocks, each with a short last tile and a key in the second tile that raises
    every row's max (drawn when grading: :mod:`.drawn`): causal, full attention, and huge scores."""
    cases = []
    for causal, shift in ((True, 0.0), (False, 0.0), (True, float(rng.uniform(800.0, 1000.0)))):
        block = int(rng.integers(2, 5))
        n = block * int(rng.integers(2, 5)) + int(rng.integers(1, block))  # a short last tile
        cases.append(_tiled_case(rng, _DRAWN + f"{n} positions in tiles of {block}, causal={causal}", n, block,
                                 causal, d=int(rng.integers(2, 5)), d_v=int(rng.integers(1, 4)), shift=shift,
                                 rise=block + int(rng.integers(block))))
    return cases
