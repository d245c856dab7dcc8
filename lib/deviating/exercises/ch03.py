"""Checks for chapter 3, "Positional and token heads".

Every known answer is built by hand: attention patterns whose rows are set entry by entry
(:func:`deviating.exercises.fixtures.hand_pattern`), so the right score or sink can be read off
the construction. The newer checks also compute what the common mistakes return on each input,
only to say which mistake a wrong answer makes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.ch03_more import (
    check_choose_and_measure,
    check_decoy_threshold,
    check_find_sink,
    check_key_mass,
    check_name_head,
)
from deviating.exercises.fixtures import hand_pattern as _rows

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas", "headlab.roles")

__all__ = ["check_punctuation_score", "check_find_sink", "check_previous_token_lift", "check_offset_profile",
           "check_key_mass", "check_choose_and_measure", "check_decoy_threshold", "check_name_head"]


# -------------------------------------------------------------------- a punctuation detector


def _punctuation_cases() -> list[Case]:
    #         <bos>  the   cat   sat    ,     it    slept  .
    punct = np.array([0, 0, 0, 0, 1, 0, 0, 1], dtype=bool)
    on_comma = _rows(8, {4: {4: 1.0}, 5: {4: 1.0}, 6: {4: 1.0}, 7: {4: 1.0}})
    half = _rows(8, {4: {4: 0.5}, 5: {4: 0.5}, 6: {4: 0.5}, 7: {4: 0.25, 7: 0.25}})
    previous = _rows(8, {i: {i - 1: 1.0} for i in range(1, 8)})
    uniform = _rows(8, {})
    return [
        Case("every query that can see the comma looks only at it", args=(on_comma, punct), expected=1.0,
             hint="sum the weight on punctuation keys, then average over the queries that can see one."),
        Case("half of each eligible row on punctuation", args=(half, punct), expected=0.5,
             hint="a row's score is its *total* weight on all punctuation keys it can see."),
        Case("a previous-token head: only the query after the comma looks at it",
             args=(previous, punct), expected=(0 + 1 + 0 + 0) / 4,
             hint="queries 0-3 cannot see any punctuation (a causal row sees keys j <= i): leave them out."),
        Case("uniform causal attention", args=(uniform, punct),
             expected=(1 / 5 + 1 / 6 + 1 / 7 + 2 / 8) / 4,
             hint="uniform attention is the chance level: row i puts 1/(i+1) on each key it sees."),
        Case("six tokens, punctuation at 2 and 5, rows split between them and other keys",
             args=(_rows(6, {2: {2: 0.6}, 3: {2: 0.3, 1: 0.3}, 4: {2: 0.1}, 5: {5: 0.5, 2: 0.2}}),
                   np.array([0, 0, 1, 0, 0, 1], dtype=bool)),
             expected=(0.6 + 0.3 + 0.1 + 0.7) / 4, hidden=True),
    ]


def check_punctuation_score(fn: Callable[[np.ndarray, np.ndarray], float]) -> None:
    """Check ``fn(pattern, is_punct)``: a causal head's punctuation score on one sequence.

    ``pattern`` ``(pos, pos)``, ``is_punct`` ``(pos,)`` bool; the answer is one number.
    """
    run_cases(fn, _punctuation_cases() + drawn(_drawn_punctuation_cases), compare=compare_number,
              forbid=_DETECTORS)


def _drawn_punctuation_cases(rng: np.random.Generator) -> list[Case]:
    """Three sequences (drawn when grading), two or three marks each, the first at position 2 or later:
    each query that sees a mark gets its total punctuation weight drawn first, split at random over
    the marks it sees; the answer is the mean of those weights."""
    cases = []
    for _ in range(3):
        pos = int(rng.integers(8, 12))
        marks = np.sort(rng.choice(np.arange(2, pos), size=int(rng.integers(2, 4)), replace=False))
        is_punct = np.zeros(pos, bool)
        is_punct[marks] = True
        p, weights = np.zeros((pos, pos)), []
        for i in range(pos):
            seen, other = np.nonzero(is_punct[: i + 1])[0], np.nonzero(~is_punct[: i + 1])[0]
            w = float(rng.uniform(0.2, 0.8)) if len(seen) else 0.0
            p[i, seen] = w * rng.dirichlet(np.ones(len(seen))) if len(seen) else 0.0
            p[i, other] = (1 - w) * rng.dirichlet(np.ones(len(other)))
            weights += [w] if len(seen) else []
        cases.append(Case(MARK + f": {pos} tokens, marks at {marks.tolist()}", args=(p, is_punct),
                          expected=float(np.mean(weights))))
    return cases


# ----------------------------------------------------------- a previous-token lift over uniform


def _masked_rows(pos: int, real: np.ndarray, targets: dict[int, dict[int, float]],
                 pad_rows: str = "previous") -> np.ndarray:
    """One causal head's ``(pos, pos)`` rows on a padded sequence: row ``q`` of a real query puts
    ``targets[q][k]`` on key k and spreads the rest evenly over the other real keys ``j <= q``; a
    padding query's row (what a model computes there is never used) puts everything on ``q - 1``
    (``pad_rows="previous"``) or on itself, so that a score which reads padding rows is off."""
    p = np.zeros((pos, pos))
    for q in range(pos):
        if not real[q]:
            p[q, max(q - 1, 0) if pad_rows == "previous" else q] = 1.0
            continue
        keys = [j for j in range(q + 1) if real[j]]
        row = targets.get(q, {})
        rest = [j for j in keys if j not in row]
        for j, w in row.items():
            p[q, j] = w
        if rest:
            p[q, rest] = (1.0 - sum(row.values())) / len(rest)
    return p


def _lift_mistakes(pattern: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """What the common mistakes return on an input, to name a wrong answer that matches one.

    Each entry is the score with one thing changed; it is used only to explain a failure (the
    expected values of the cases are written out from their construction)."""
    pattern, real = np.asarray(pattern, float), np.asarray(mask, bool)
    batch, n_heads, pos, _ = pattern.shape
    out: dict[str, list] = {}

    def add(name, rows):
        out[name] = np.mean(rows, axis=0) if rows else np.full(n_heads, np.nan)

    def collect(key_of, base_of, eligible):
        rows = []
        for b in range(batch):
            for q in range(pos):
                if eligible(b, q):
                    rows.append(pattern[b, :, q, key_of(q)] - base_of(b, q))
        return rows

    def visible(b, q):  # what uniform causal attention puts on each real key j <= q
        return 1.0 / real[b, : q + 1].sum()

    def ok(b, q):  # a real query whose previous position is real
        return q >= 1 and real[b, q] and real[b, q - 1]

    add("no baseline: the raw weight on q - 1, not the lift over uniform attention",
        collect(lambda q: q - 1, lambda b, q: 0.0, ok))
    add("one baseline for the whole sequence, 1/(its padded length), instead of 1/(real keys visible to q)",
        collect(lambda q: q - 1, lambda b, q: 1.0 / pos, ok))
    add("one baseline for the whole sequence, 1/(its real length), instead of 1/(real keys visible to q)",
        collect(lambda q: q - 1, lambda b, q: 1.0 / real[b].sum(), ok))
    add("a baseline of 1/(q + 1), which counts padding keys as visible",
        collect(lambda q: q - 1, lambda b, q: 1.0 / (q + 1), ok))
    add("query 0 (or the first real token) included: it has no previous token",
        collect(lambda q: q - 1, visible, lambda b, q: real[b, q]))
    add("the weight on the query itself (offset 0), not on q - 1",
        collect(lambda q: q, visible, ok))
    add("the padding mask ignored: padding queries (and keys) counted",
        collect(lambda q: q - 1, lambda b, q: 1.0 / (q + 1), lambda b, q: q >= 1))
    means = [np.mean([pattern[b, :, q, q - 1] - visible(b, q) for q in range(pos) if ok(b, q)], axis=0)
             for b in range(batch) if any(ok(b, q) for q in range(pos))]
    out["the mean of each sequence's mean: pool every eligible query of the batch instead"] = np.mean(means, axis=0)
    return out


def _compare_naming(mistakes: Callable, atol: float = 1e-9) -> Callable:
    """A comparison that, when the answer is wrong, says which common mistake it matches."""
    def compare(got, expected, args):
        problem = compare_arrays(got, expected, atol=atol, rtol=0)
        if problem is None:
            return None
        for what, answer in mistakes(*args).items():
            answer = np.asarray(answer, float)
            if answer.shape == np.shape(expected) and not np.allclose(answer, expected, atol=atol) \
                    and compare_arrays(got, answer, atol=atol, rtol=0) is None:
                return f"{problem}; this is the answer with {what}"
        return problem
    return compare


def _with_args(cases: list[Case], compare3: Callable) -> Callable:
    """``compare(got, expected)`` for run_cases, finding each case's args by its expected value."""
    by_id = {id(c.expected): c.args for c in cases}
    return lambda got, expected: compare3(got, expected, by_id[id(expected)])


def _lift_cases() -> list[Case]:
    ones5 = np.ones(5, bool)
    prev5 = _masked_rows(5, ones5, {q: {q - 1: 1.0} for q in range(1, 5)})
    flat5 = _masked_rows(5, ones5, {})
    self5 = np.eye(5)
    perfect = np.mean([1 - 1 / (q + 1) for q in range(1, 5)])  # 1 - 1/2, 1 - 1/3, 1 - 1/4, 1 - 1/5
    # right padding: lengths 5 and 3 in a batch of pos 5
    right = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    half = [{q: {q - 1: 0.5}} for q in range(1, 5)]
    right_p = np.stack([np.stack([_masked_rows(5, m, {q: {q - 1: 1.0} for q in range(1, 5)}),
                                  _masked_rows(5, m, {k: v for d in half for k, v in d.items()})]) for m in right])
    # eligible queries: 1-4 of the first sequence, 1-2 of the second (visible keys q + 1 both)
    right_exp = np.array([np.mean([1 - 1 / 2, 1 - 1 / 3, 1 - 1 / 4, 1 - 1 / 5, 1 - 1 / 2, 1 - 1 / 3]),
                          np.mean([0.5 - 1 / 2, 0.5 - 1 / 3, 0.5 - 1 / 4, 0.5 - 1 / 5, 0.5 - 1 / 2, 0.5 - 1 / 3])])
    # left padding: two padding positions, then four real tokens at 2..5
    left = np.array([[0, 0, 1, 1, 1, 1]], bool)
    left_p = np.stack([_masked_rows(6, left[0], {q: {q - 1: 1.0} for q in range(3, 6)}, pad_rows="self")])[None]
    left_exp = np.array([np.mean([1 - 1 / 2, 1 - 1 / 3, 1 - 1 / 4])])  # queries 3, 4, 5 see 2, 3, 4 keys
    # the hidden case: three heads, two sequences of length 6 and 4 (right padding)
    mixed = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    spec = [{q: {q - 1: 0.8} for q in range(1, 6)}, {q: {0: 0.9} for q in range(1, 6)},
            {1: {0: 0.3}, 2: {1: 0.6}, 3: {2: 0.2}, 4: {3: 1.0}, 5: {4: 0.4}}]
    mixed_p = np.stack([np.stack([_masked_rows(6, m, s) for s in spec]) for m in mixed])
    qs = [(0, q) for q in range(1, 6)] + [(1, q) for q in range(1, 4)]
    on_prev = [[0.8] * 8, [0.9 if q == 1 else (1 - 0.9) / q for _, q in qs],
               [{1: 0.3, 2: 0.6, 3: 0.2, 4: 1.0, 5: 0.4}[q] for _, q in qs]]
    mixed_exp = np.array([np.mean([w - 1 / (q + 1) for w, (_, q) in zip(ws, qs)]) for ws in on_prev])
    return [
        Case("one sequence of 5 tokens: a perfect previous-token head, a uniform head, a head on itself",
             args=(np.stack([prev5, flat5, self5])[None], np.ones((1, 5), bool)),
             expected=np.array([perfect, 0.0, -np.mean([1 / (q + 1) for q in range(1, 5)])]),
             hint="uniform causal attention gives query q the weight 1/(q + 1) on every key it sees, so "
                  "its lift must be exactly 0: subtract that from the weight on q - 1, for q >= 1 only."),
        Case("a batch of two, the second right-padded to length 3; padding rows hold garbage",
             args=(right_p, right), expected=right_exp,
             hint="only real queries q whose previous position is real count, and every eligible query of "
                  "the batch counts once (pool them, do not average per sequence first)."),
        Case("left padding: two padding positions, then four real tokens",
             args=(left_p, left), expected=left_exp,
             hint="the first real token has no real previous token; and a real query sees only the real "
                  "keys at or before it, so uniform attention gives 1/(that count), not 1/(q + 1)."),
        Case("three heads on two sequences of lengths 6 and 4", args=(mixed_p, mixed),
             expected=mixed_exp, hidden=True),
    ]


def check_previous_token_lift(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Check ``fn(pattern, mask)``: per head, the mean over every eligible query of the batch (a real
    query ``q >= 1`` whose position ``q - 1`` is real) of ``pattern[b, h, q, q - 1]`` minus what
    uniform causal attention puts there, ``1 / (number of real keys j <= q)``.

    ``pattern`` ``(batch, n_heads, pos, pos)``, ``mask`` ``(batch, pos)`` bool (True: a real token);
    the answer is ``(n_heads,)``.
    """
    cases = _lift_cases() + drawn(_drawn_lift_cases)
    run_cases(fn, cases, compare=_with_args(cases, _compare_naming(_lift_mistakes)),
              what="a previous-token lift over uniform attention", forbid=_DETECTORS)


def _drawn_padded_batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """A mask of three sequences of different lengths: one left-padded, one right-padded, one full."""
    pos = int(rng.integers(7, 11))
    lengths = rng.choice(np.arange(3, pos), size=2, replace=False)
    real = np.ones((3, pos), bool)
    real[0, : pos - lengths[0]] = False  # left padding
    real[1, lengths[1]:] = False  # right padding
    return real[rng.permutation(3)], pos, int(rng.integers(2, 4))


def _drawn_lift_cases(rng: np.random.Generator) -> list[Case]:
    """Three padded batches (drawn when grading): every eligible query's weight on q - 1 is drawn first,
    the rest of its row spread at random over the other real keys it sees; padding rows sit on q - 1.
    The answer is the mean, over the eligible queries, of that weight minus 1/(real keys seen)."""
    cases = []
    for _ in range(3):
        real, pos, heads = _drawn_padded_batch(rng)
        pattern, lifts = np.zeros((3, heads, pos, pos)), [[] for _ in range(heads)]
        for b, h, q in np.ndindex(3, heads, pos):
            keys = [j for j in range(q + 1) if real[b, j]]
            if not real[b, q]:
                pattern[b, h, q, max(q - 1, 0)] = 1.0
                continue
            target = q - 1 if q >= 1 and real[b, q - 1] else None
            w = float(rng.uniform(0.1, 0.9)) if target is not None and len(keys) > 1 else 0.0
            rest = [j for j in keys if j != target] if target is not None else keys
            pattern[b, h, q, rest] = (1 - w) * rng.dirichlet(np.ones(len(rest)))
            if target is not None:
                pattern[b, h, q, target] = w if len(keys) > 1 else 1.0
                lifts[h].append(pattern[b, h, q, target] - 1 / len(keys))
        cases.append(Case(MARK + f": 3 sequences of {pos} positions, {heads} heads", args=(pattern, real),
                          expected=np.array([np.mean(x) for x in lifts])))
    return cases


# ----------------------------------------------------------------------- an offset profile


def _profile_mistakes(pattern: np.ndarray, mask: np.ndarray, max_offset: int) -> dict[str, np.ndarray]:
    """What the common mistakes return (only to name a wrong answer; see :func:`_lift_mistakes`)."""
    pattern, real = np.asarray(pattern, float), np.asarray(mask, bool)
    batch, n_heads, pos, _ = pattern.shape

    def profile(key, eligible, divide_by_all=False):
        cols = []
        for k in range(max_offset + 1):
            rows = [pattern[b, :, q, key(q, k)] if 0 <= key(q, k) < pos else np.zeros(n_heads)
                    for b in range(batch) for q in range(pos) if eligible(b, q, k)]
            n = sum(real[b, q] for b in range(batch) for q in range(pos)) if divide_by_all else len(rows)
            cols.append(np.sum(rows, axis=0) / n if rows else np.zeros(n_heads))
        return np.stack(cols, axis=1)

    def ok(b, q, k):
        return real[b, q] and q - k >= 0 and real[b, q - k]

    return {
        "every real query counted, also those with no key at q - k (they add zeros)":
            profile(lambda q, k: q - k, ok, divide_by_all=True),
        "keys after the query (q + k), which a causal head never sees":
            profile(lambda q, k: q + k, lambda b, q, k: real[b, q] and q + k < pos and real[b, q + k]),
        "the offsets shifted by one: column k holds the weight on q - k - 1":
            profile(lambda q, k: q - k - 1, lambda b, q, k: real[b, q] and q - k - 1 >= 0 and real[b, q - k - 1]),
        "the padding mask ignored":
            profile(lambda q, k: q - k, lambda b, q, k: q - k >= 0),
    }


def _profile_cases() -> list[Case]:
    ones = np.ones(5, bool)
    prev = _masked_rows(5, ones, {q: {q - 1: 1.0} for q in range(1, 5)})
    own = np.eye(5)
    two_back = _masked_rows(5, ones, {q: {q - 2: 0.5} for q in range(2, 5)})
    # two_back: q = 2, 3, 4 put 0.5 on q - 2 and 0.5 / q on each of the other q keys
    tb = np.array([np.mean([1.0, 1 / 2, 0.5 / 2, 0.5 / 3, 0.5 / 4]),  # k = 0: q = 0..4 (q = 1 is uniform)
                   np.mean([1 / 2, 0.5 / 2, 0.5 / 3, 0.5 / 4]),  # k = 1: q = 1..4
                   np.mean([0.5, 0.5, 0.5])])  # k = 2: q = 2..4
    right = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    padded = np.stack([np.stack([_masked_rows(5, m, {q: {q - 1: 1.0} for q in range(1, 5)}, pad_rows="self")])
                       for m in right])
    # head 0 on lengths 5 and 3: k = 0 -> only query 0 of each puts weight (1) on itself: 2 / 8 real queries;
    # k = 1 -> every eligible query (4 + 2) puts 1 on q - 1
    left = np.array([[0, 1, 1, 1]], bool)
    left_p = np.stack([_masked_rows(4, left[0], {2: {1: 0.25}, 3: {1: 0.5}}, pad_rows="self")])[None]
    # queries 1, 2, 3 are real; key q - k must be real: k = 0: 1, 0.75, 0.25; k = 1: q = 2 (0.25), 3 (0.25);
    # k = 2: q = 3 (0.5)
    left_exp = np.array([[np.mean([1.0, 0.75, 0.25]), np.mean([0.25, 0.25]), 0.5]])
    mixed = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    heads = [{q: {q - 1: 0.7} for q in range(1, 6)}, {q: {q: 0.6} for q in range(1, 6)}]
    mixed_p = np.stack([np.stack([_masked_rows(6, m, s) for s in heads]) for m in mixed])
    qs = [q for q in range(6)] + [q for q in range(4)]  # real queries of both sequences

    def w(h, q, k):  # the weight of head h's row q on key q - k
        if h == 0:
            return 1.0 if q == 0 else (0.7 if k == 1 else 0.3 / q)
        return 0.6 if k == 0 and q > 0 else (1.0 if q == 0 else 0.4 / q)
    mixed_exp = np.array([[np.mean([w(h, q, k) for q in qs if q - k >= 0]) for k in range(3)] for h in range(2)])
    return [
        Case("one sequence of 5: a previous-token head, a head on itself, offsets 0 and 1",
             args=(np.stack([prev, own])[None], np.ones((1, 5), bool), 1),
             expected=np.array([[0.2, 1.0], [1.0, 0.0]]),
             hint="column k is the mean weight on key q - k, over the queries that have such a key: "
                  "the previous-token head puts 1 on q - 1 at every query q >= 1 (query 0 has no q - 1), "
                  "and all its weight on key 0 at query 0, the only key it sees."),
        Case("a head that puts half of each row on the token two back, offsets 0, 1, 2",
             args=(two_back[None, None], np.ones((1, 5), bool), 2), expected=tb[None],
             hint="average column k over queries q >= k only: a query with no key at q - k has no weight "
                  "there to average, it is left out, not counted as 0."),
        Case("a batch of two, the second right-padded to length 3", args=(padded, right, 1),
             expected=np.array([[2 / 8, 1.0]]),
             hint="count only real queries whose key q - k is real, pooled over the batch."),
        Case("left padding, offsets 0 to 2", args=(left_p, left, 2), expected=left_exp,
             hint="a key at q - k that is padding does not count: leave that query out of column k."),
        Case("two heads on two sequences of lengths 6 and 4, offsets 0 to 2", args=(mixed_p, mixed, 2),
             expected=mixed_exp, hidden=True),
    ]


def check_offset_profile(fn: Callable[[np.ndarray, np.ndarray, int], np.ndarray]) -> None:
    """Check ``fn(pattern, mask, max_offset)``: ``(n_heads, max_offset + 1)``, column ``k`` the mean,
    over every real query ``q`` of the batch whose key ``q - k`` exists and is real, of the weight
    ``pattern[b, h, q, q - k]``. ``pattern`` ``(batch, n_heads, pos, pos)``, ``mask`` ``(batch, pos)``."""
    cases = _profile_cases() + drawn(_drawn_profile_cases)
    run_cases(fn, cases, compare=_with_args(cases, _compare_naming(_profile_mistakes)),
              what="an offset profile", forbid=_DETECTORS)


def _drawn_profile_cases(rng: np.random.Generator) -> list[Case]:
    """Three padded batches (drawn when grading) of random causal rows over each query's real keys
    (padding rows sit on the query itself); column k is the mean of the weights placed on real keys
    k back, collected while the rows are built."""
    cases = []
    for _ in range(3):
        real, pos, heads = _drawn_padded_batch(rng)
        max_offset = int(rng.integers(2, 4))
        pattern, placed = np.zeros((3, heads, pos, pos)), {}
        for b, h, q in np.ndindex(3, heads, pos):
            if not real[b, q]:
                pattern[b, h, q, q] = 1.0
                continue
            keys = [j for j in range(q + 1) if real[b, j]]
            for j, w in zip(keys, rng.dirichlet(np.ones(len(keys)))):
                pattern[b, h, q, j] = w
                placed.setdefault((h, q - j), []).append(w)
        expected = np.array([[np.mean(placed[h, k]) for k in range(max_offset + 1)] for h in range(heads)])
        cases.append(Case(MARK + f": 3 sequences of {pos} positions, offsets 0 to {max_offset}",
                          args=(pattern, real, max_offset), expected=expected))
    return cases
