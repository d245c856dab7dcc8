"""Checks for chapter 3, continued: the sink, the mass on a set of keys, choosing a head on one half
and measuring it on the other, the decoy threshold and naming a head.

:mod:`deviating.exercises.ch03` re-exports every check here, so a notebook imports them from there.
Each known answer follows from the construction: rows are set entry by entry, and the drawn cases
(:mod:`.drawn`) place the quantity under test (a mass, a mean, a rank) before building the input.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.fixtures import hand_pattern as _rows

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas", "headlab.roles")

__all__ = ["check_find_sink", "check_key_mass", "check_choose_and_measure", "check_decoy_threshold",
           "check_name_head"]


# ------------------------------------------------------------------------------- the sink


def _sink_cases() -> list[Case]:
    pos = 6  # an encoder: every row may see every key
    cls = _rows(pos, {i: {0: 0.9} for i in range(pos)}, causal=False)
    sep = _rows(pos, {i: {5: 0.7} for i in range(pos)}, causal=False)
    diag = np.eye(pos)
    previous = _rows(pos, {i: {max(i - 1, 0): 1.0} for i in range(pos)}, causal=False)
    one_sharp = _rows(pos, {0: {3: 1.0}}, causal=False)  # one row all on key 3, the rest uniform
    key2 = _rows(pos, {i: {2: 0.9} for i in range(pos)}, causal=False)
    key4 = _rows(pos, {i: {4: 0.5} for i in range(pos)}, causal=False)
    return [
        Case("one layer, two heads, both parking 0.9 of every row on [CLS] (position 0)",
             args=(np.array([[cls, cls]]),), expected=0, hint="sum the weight each key receives."),
        Case("two layers: the first looks at itself and the previous token, the second parks 0.7 on "
             "[SEP] (position 5)", args=(np.array([[diag, previous], [sep, sep]]),), expected=5,
             hint="add up over every layer, head and query."),
        Case("one sharp row on key 3 against many mildly [SEP]-leaning rows",
             args=(np.array([[one_sharp, sep], [sep, sep]]),), expected=5,
             hint="the sink is where the total weight goes, not where one row is sharpest."),
        Case("two layers: the first parks 0.9 on key 2, the last leans 0.5 towards key 4",
             args=(np.array([[key2, key2], [key4, key4]]),), expected=2,
             hint="sum over *every* layer, not the last one only: 2 x 6 rows x 0.9 on key 2 beat "
                  "2 x 6 rows x 0.5 on key 4."),
        Case("three layers", args=(np.array([[key4, key4], [key2, key2], [key2, diag]]),), expected=2,
             hidden=True),
    ]


def _same_position(got, expected) -> str | None:
    try:
        value = int(got)
    except (TypeError, ValueError):
        return f"expected a position (an int), got {got!r}"
    return None if value == expected else f"expected position {expected}, got {value}"


def check_find_sink(fn: Callable[[np.ndarray], int]) -> None:
    """Check ``fn(patterns)``: the key position that receives the most attention, summed over
    every layer, head and query of ``patterns`` ``(n_layers, n_heads, pos, pos)``."""
    run_cases(fn, _sink_cases() + drawn(_drawn_sink_cases), compare=_same_position, forbid=_DETECTORS)


def _drawn_sink_cases(rng: np.random.Generator) -> list[Case]:
    """Three stacks of 4 or 5 layers (drawn when grading: :mod:`.drawn`): the middle layers put 0.7-0.9 of
    every row on the sink; the first layer leans 0.4-0.5 towards one decoy, the last towards another, and
    one row of a middle head sits wholly on a third. The sink gets at least 1.4 x heads x positions of
    weight, a decoy at most 0.8 x heads x positions: it is the answer by construction."""
    cases = []
    for _ in range(3):
        pos, heads, layers = int(rng.integers(6, 10)), int(rng.integers(2, 4)), int(rng.integers(4, 6))
        sink, first, last, sharp = (int(x) for x in rng.choice(np.arange(1, pos), size=4, replace=False))

        def lean(key: int, low: float, high: float) -> np.ndarray:
            return _rows(pos, {i: {key: rng.uniform(low, high)} for i in range(pos)}, causal=False)

        stack = [[lean(first, 0.4, 0.5) for _ in range(heads)]]
        stack += [[lean(sink, 0.7, 0.9) for _ in range(heads)] for _ in range(layers - 2)]
        stack += [[lean(last, 0.4, 0.5) for _ in range(heads)]]
        row = int(rng.integers(pos))
        stack[1][0][row] = np.eye(pos)[sharp]
        cases.append(Case(MARK + f": {layers} layers, {heads} heads, {pos} positions", args=(np.array(stack),),
                          expected=sink))
    return cases


# ------------------------------------------------------------------- the mass on a set of keys


def _mass_head(real: np.ndarray, keys: np.ndarray, mass: dict[int, float], split: dict[int, np.ndarray],
               rng: np.random.Generator | None = None) -> np.ndarray:
    """One encoder head's ``(pos, pos)`` rows on one sequence: real query q puts ``mass[q]`` on the real
    marked keys (evenly, or as ``split[q]`` says) and the rest on the real unmarked keys (evenly, or at
    random with ``rng``); a padding row puts everything on the first marked key (garbage to ignore)."""
    pos = len(real)
    on = np.nonzero(keys & real)[0]
    off = np.nonzero(~keys & real)[0]
    p = np.zeros((pos, pos))
    for q in range(pos):
        if not real[q]:
            p[q, np.nonzero(keys)[0][0]] = 1.0
            continue
        p[q, on] = mass[q] * split.get(q, np.full(len(on), 1 / len(on)))
        rest = np.full(len(off), 1 / len(off)) if rng is None else rng.dirichlet(np.ones(len(off)))
        p[q, off] = (1 - mass[q]) * rest
    return p


def _key_mass_cases() -> list[Case]:
    one = np.ones((1, 5), bool)
    cls = np.array([[1, 0, 0, 0, 0]], bool)
    sharp = _mass_head(one[0], cls[0], {q: 0.9 for q in range(5)}, {})
    flat = np.full((5, 5), 0.2)
    ends = np.array([[1, 0, 0, 0, 1]], bool)
    both = _mass_head(one[0], ends[0], {q: 0.6 for q in range(5)}, {q: np.array([0.5, 0.5]) for q in range(5)})
    real = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    marked = np.array([[1, 0, 0, 0, 0], [1, 0, 0, 0, 1]], bool)  # a marked padding key too
    padded = np.stack([_mass_head(r, k, {q: w for q in range(5)}, {})[None]
                       for r, k, w in zip(real, marked, (0.8, 0.2))])
    left = np.array([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], bool)
    lk = np.array([[1, 0, 1, 0, 0, 1], [0, 1, 0, 0, 0, 1]], bool)
    heads = [{2: 0.5, 3: 0.7, 4: 0.1, 5: 0.3}, {q: 0.4 for q in range(6)}]
    hidden = np.stack([np.stack([_mass_head(left[0], lk[0], heads[0], {}), _mass_head(left[0], lk[0], heads[1], {})]),
                       np.stack([_mass_head(left[1], lk[1], {q: 0.9 for q in range(6)}, {}),
                                 _mass_head(left[1], lk[1], {q: 0.05 * q for q in range(6)}, {})])])
    return [
        Case("one sentence of 5 tokens, the key [CLS] at 0: a head parking 0.9 there, a uniform head",
             args=(np.stack([sharp, flat])[None], cls, one), expected=np.array([0.9, 0.2]),
             hint="each real query's weight on the marked keys, averaged over the queries."),
        Case("two marked keys, each row putting 0.3 on each", args=(both[None, None], ends, one),
             expected=np.array([0.6]),
             hint="a row's mass is its *total* weight on every marked key, not its largest or mean one."),
        Case("a batch of two, the second right-padded to length 3; its padding rows sit on [CLS]",
             args=(padded, marked, real), expected=np.array([(5 * 0.8 + 3 * 0.2) / 8]),
             hint="padding rows mean nothing: leave them out; and pool every real query of the batch "
                  "(5 + 3 of them), rather than averaging each sentence's mean."),
        Case("two heads, left padding and marked keys at both ends", args=(hidden, lk, left),
             expected=np.array([(0.5 + 0.7 + 0.1 + 0.3 + 6 * 0.9) / 10, (4 * 0.4 + 0.05 * 15) / 10]),
             hidden=True),
    ]


def _drawn_key_mass_cases(rng: np.random.Generator) -> list[Case]:
    """Three batches (drawn when grading): three sequences of different lengths, padded on either side,
    two to four real marked keys each and one marked padding key; every real query's mass on its
    marked keys is drawn first and split at random, so the answer is the mean of the drawn masses."""
    cases = []
    for _ in range(3):
        pos, heads = int(rng.integers(8, 12)), int(rng.integers(2, 4))
        real, keys, stack, masses = [], [], [], [[] for _ in range(heads)]
        for length in rng.choice(np.arange(5, pos), size=3, replace=False):
            start = int(rng.integers(0, pos - length + 1))
            r = np.zeros(pos, bool)
            r[start:start + int(length)] = True
            k = np.zeros(pos, bool)
            k[rng.choice(np.nonzero(r)[0], size=int(rng.integers(2, 4)), replace=False)] = True
            k[rng.choice(np.nonzero(~r)[0])] = True  # a marked key that is padding
            seq = []
            for h in range(heads):
                mass = {q: float(rng.uniform(0.05, 0.95)) for q in range(pos) if r[q]}
                split = {q: rng.dirichlet(np.ones(int((k & r).sum()))) for q in mass}
                seq.append(_mass_head(r, k, mass, split, rng))
                masses[h] += list(mass.values())
            real.append(r)
            keys.append(k)
            stack.append(np.stack(seq))
        cases.append(Case(MARK + f": 3 sequences of {pos} positions, {heads} heads",
                          args=(np.stack(stack), np.array(keys), np.array(real)),
                          expected=np.array([np.mean(m) for m in masses])))
    return cases


def check_key_mass(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Check ``fn(pattern, keys, mask)``: per head, an encoder's mean weight on the marked real keys,
    over every real query of the batch. ``pattern`` ``(batch, n_heads, pos, pos)``; ``keys`` and
    ``mask`` ``(batch, pos)`` bool; the answer is ``(n_heads,)``."""
    run_cases(fn, _key_mass_cases() + drawn(_drawn_key_mass_cases), what="the mass on a set of keys",
              forbid=_DETECTORS)


# ------------------------------------------------------- choose on one half, measure on the other


def _choose_compare(got, expected) -> str | None:
    try:
        head, on_select, on_measure = got
        head = tuple(int(x) for x in head)
        on_select, on_measure = float(on_select), float(on_measure)
    except (TypeError, ValueError):
        return f"expected a tuple ((layer, head), select mean, measure mean), got {got!r}"
    if head != expected[0]:
        return f"chosen head: expected {expected[0]}, got {head}"
    for what, value, want in (("select", on_select, expected[1]), ("measure", on_measure, expected[2])):
        if not math.isclose(value, want, abs_tol=1e-9):
            return f"its mean on the {what} items: expected {want:.4f}, got {value:.4f}"
    return None


def _choose_cases() -> list[Case]:
    simple = np.array([[0.1, 0.6, 0.2], [0.3, 0.8, 0.1], [0.2, 0.3, 0.9], [0.1, 0.5, 0.7]])[:, None]
    spike = np.array([[0.1, 0.4, 0.95], [0.2, 0.5, 0.0], [0.3, 0.45, 0.05], [0.1, 0.2, 0.3]])[:, None]
    tie = np.array([[[0.2, 0.1, 0.7], [0.7, 0.0, 0.1]], [[0.1, 0.3, 0.5], [0.5, 0.2, 0.3]],
                    [[0.0, 0.0, 0.2], [0.9, 0.0, 0.0]]])
    hidden = np.zeros((6, 2, 3))
    hidden[[0, 3, 4], 1, 2] = [0.6, 0.5, 0.7]
    hidden[[1, 2, 5], 1, 2] = [0.1, 0.3, 0.2]
    hidden[[1, 2, 5], 0, 0] = [0.9, 0.8, 0.95]
    hidden[0, 0, 1] = 0.99
    return [
        Case("one layer of three heads, items 0-1 to select, 2-3 to measure",
             args=(simple, np.array([0, 1]), np.array([2, 3])), expected=((0, 1), 0.7, 0.4),
             hint="the head is chosen on the select items only; return its mean there and on the measure "
                  "items."),
        Case("head 0.2 has the largest single score, head 0.1 the largest mean",
             args=(spike, np.array([0, 1, 2]), np.array([3])), expected=((0, 1), 0.45, 0.2),
             hint="choose by the mean over the select items, not by one item."),
        Case("heads 0.2 and 1.0 tie on the select items",
             args=(tie, np.array([0, 1]), np.array([2])), expected=((0, 2), 0.6, 0.2),
             hint="a tie goes to the head that comes first in (layer, head) order."),
        Case("two layers, items in no order", args=(hidden, np.array([0, 3, 4]), np.array([1, 2, 5])),
             expected=((1, 2), 0.6, 0.2), hidden=True),
    ]


def _drawn_choose_cases(rng: np.random.Generator) -> list[Case]:
    """Three tables (drawn when grading) with a head that wins on the select items, a later head that ties
    with it there, a head with the largest single select score, and a head that is best on the measure
    items; the winner's layer and head differ, so a swapped pair is wrong too."""
    cases = []
    for _ in range(3):
        n, layers, heads = int(rng.integers(8, 13)), int(rng.integers(2, 4)), int(rng.integers(3, 5))
        order = rng.permutation(n)
        select, measure = order[: n // 2], order[n // 2:]
        table = rng.uniform(0.0, 0.3, size=(n, layers, heads))
        flat = [(l, h) for l in range(layers) for h in range(heads)]
        first = int(rng.choice([i for i, (l, h) in enumerate(flat) if l != h and i < len(flat) - 3]))
        a, b, c, d = flat[first], *(flat[i] for i in rng.choice(np.arange(first + 1, len(flat)), 3, replace=False))
        table[select, a[0], a[1]] = rng.uniform(0.5, 0.7, size=len(select))
        table[select, b[0], b[1]] = table[select, a[0], a[1]]  # a tie on the select items
        table[measure, a[0], a[1]] = rng.uniform(0.3, 0.45, size=len(measure))
        table[measure, b[0], b[1]] = rng.uniform(0.05, 0.2, size=len(measure))
        table[select, c[0], c[1]] = rng.uniform(0.0, 0.1, size=len(select))
        table[select[0], c[0], c[1]] = 0.99  # the largest single score
        table[measure, d[0], d[1]] = rng.uniform(0.8, 0.95, size=len(measure))
        cases.append(Case(MARK + f": {n} items, {layers} x {heads} heads", args=(table, select, measure),
                          expected=(a, float(table[select, a[0], a[1]].mean()),
                                    float(table[measure, a[0], a[1]].mean()))))
    return cases


def check_choose_and_measure(fn: Callable) -> None:
    """Check ``fn(per_item, select, measure)``: the head with the largest mean over the select items
    (ties: the first in (layer, head) order), and its means over the select and the measure items.
    ``per_item`` ``(n_items, n_layers, n_heads)``; ``select`` and ``measure`` index its items."""
    run_cases(fn, _choose_cases() + drawn(_drawn_choose_cases), compare=_choose_compare,
              what="choosing on one half and measuring on the other", forbid=_DETECTORS)


# ------------------------------------------------------------------------- the decoy threshold


def _threshold_cases() -> list[Case]:
    hundred = np.arange(1, 101) / 1000  # 0.001 .. 0.100
    with_nan = np.concatenate([np.arange(1, 51) / 100, np.full(10, np.nan)])[np.arange(60) * 7 % 60]
    grid = np.linspace(-0.2, 0.6, 21)  # 21 lifts, 0.04 apart
    hidden = np.concatenate([grid, [np.nan] * 4])[np.r_[3:25, 0:3]].reshape(5, 5)
    return [
        Case("100 lifts from 0.001 to 0.100, a floor of 0.05", args=(hundred[::-1].copy(), 0.05, 0.99),
             expected=0.099,
             hint="the threshold is the smallest lift with at least 99% of the lifts at or below it "
                  "(here the 99th of 100), or the floor if that is larger."),
        Case("the same lifts, a floor of 0.4", args=(hundred.copy(), 0.4, 0.99), expected=0.4,
             hint="a null far below the floor leaves the floor as the threshold."),
        Case("50 lifts and 10 undefined (NaN) decoys, level 0.9", args=(with_nan, 0.1, 0.9), expected=0.45,
             hint="an undefined lift (NaN: a decoy no query could see) is not a lift: leave it out, and "
                  "count the level over the lifts that remain (45 of 50)."),
        Case("a grid of 5 x 5 decoys and heads, four undefined", args=(hidden, 0.1, 0.95), expected=0.56,
             hidden=True),
    ]


def _drawn_threshold_cases(rng: np.random.Generator) -> list[Case]:
    """Three grids of decoy lifts (drawn when grading), with undefined (NaN) entries: one whose null sits
    below the floor, two whose rank-``level`` lift (placed from the sorted draws) sits above it."""
    cases = []
    for low, high, floor in ((-0.2, 0.3, 0.4), (0.1, 0.9, 0.4), (0.2, 0.8, 0.3)):
        level = float(rng.choice([0.9, 0.99]))
        while True:
            n = int(rng.integers(60, 160))
            # interpolating must move the answer, and level * n must not sit on an integer
            if min(abs(x - round(x)) for x in (level * (n - 1), level * n)) > 1e-6:
                break
        values = np.sort(rng.uniform(low, high, size=n))
        rank = math.ceil(level * n - 1e-9)  # the rank-th smallest has >= level of the lifts at or below it
        expected = max(floor, float(values[rank - 1]))
        grid = np.concatenate([values, np.full(int(rng.integers(3, 12)), np.nan)])
        grid = rng.permutation(grid)
        cases.append(Case(MARK + f": {n} lifts, level {level}, floor {floor}", args=(grid, floor, level),
                          expected=expected))
    return cases


def check_decoy_threshold(fn: Callable) -> None:
    """Check ``fn(lifts, floor, level)``: the larger of ``floor`` and the smallest finite lift with at
    least ``level`` of the finite lifts at or below it; NaN entries (undefined decoys) left out."""
    run_cases(fn, _threshold_cases() + drawn(_drawn_threshold_cases),
              compare=lambda got, want: compare_number(got, want, atol=1e-9, rtol=0),
              what="the decoy threshold", forbid=_DETECTORS + ("headlab.stats",))


# -------------------------------------------------------------------------------- naming a head


def _name_cases() -> list[Case]:
    return [
        Case("one kind clearly above 0.4", args=({"previous_token": 0.72, "first_token": 0.1}, 0.4),
             expected="previous_token", hint="the kind with the largest lift names the head."),
        Case("no kind reaches 0.4", args=({"previous_token": 0.31, "first_token": 0.38}, 0.4),
             expected="unnamed", hint="below the threshold, the head stays unnamed."),
        Case("a lift exactly at the threshold", args=({"separator": 0.4, "punctuation": 0.2}, 0.4),
             expected="separator", hint="a lift that reaches the threshold (>=) names the head."),
        Case("an undefined lift (NaN) listed first",
             args=({"induction": float("nan"), "previous_token": 0.5, "next_token": 0.45}, 0.4),
             expected="previous_token",
             hint="NaN means the kind could not be scored here: skip it; comparisons with NaN are False."),
        Case("a large negative lift", args=({"first_token": -0.9, "separator": 0.3}, 0.25),
             expected="separator", hidden=True,
             hint="a negative lift means less weight than uniform attention: it names nothing."),
    ]


def _drawn_name_cases(rng: np.random.Generator) -> list[Case]:
    """Four dicts of lifts (drawn when grading): each holds an undefined kind first and a large negative
    lift larger in size than the best; the best lift is above, at or below the threshold by construction."""
    kinds = ["previous_token", "next_token", "first_token", "separator", "punctuation", "induction"]
    cases = []
    for where in ("above", "at", "below", "at"):
        names = [str(k) for k in rng.permutation(kinds)]
        threshold = float(rng.choice([0.3, 0.4, 0.5]))
        best = {"above": threshold + float(rng.uniform(0.05, 0.4)), "at": threshold,
                "below": threshold - float(rng.uniform(0.01, 0.1))}[where]
        lifts = {names[0]: float("nan"), names[1]: -best - float(rng.uniform(0.1, 0.3))}
        rest = names[2:]
        winner = str(rest[int(rng.integers(len(rest)))])
        for k in rest:
            lifts[k] = best if k == winner else float(rng.uniform(-0.2, best - 0.05))
        cases.append(Case(MARK + f": {len(lifts)} kinds, the best lift {where} the threshold",
                          args=(lifts, threshold), expected=winner if where != "below" else "unnamed"))
    return cases


def _same_name(got, expected) -> str | None:
    if not isinstance(got, str):
        return f"expected a kind's name (a str) or 'unnamed', got {got!r}"
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def check_name_head(fn: Callable[[dict, float], str]) -> None:
    """Check ``fn(lifts, threshold)``: the kind with the largest defined lift when it reaches
    ``threshold``, else ``"unnamed"``. ``lifts`` maps each kind to its lift (NaN: undefined)."""
    run_cases(fn, _name_cases() + drawn(_drawn_name_cases), compare=_same_name, what="naming a head",
              forbid=_DETECTORS)
