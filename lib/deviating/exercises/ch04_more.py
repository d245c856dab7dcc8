"""Checks for chapter 4, continued: McNemar's exact test, a control for a punctuation head, the
attractor rule and a permutation null that shuffles the offsets of a relation. :mod:`deviating.exercises.ch04` re-exports every check here.

Each known answer follows from the construction: the discordant pairs are placed before the
outcomes are shuffled, a row's weight on the marks and on their neighbours is drawn before the row
is filled in, and an attractor is put between subject and verb (or left out) on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, run_cases
from deviating.exercises.drawn import MARK, drawn

_FORBID = ("headlab.analysis.detect", "headlab.roles", "headlab.stats", "scipy.stats")

__all__ = ["check_mcnemar_exact", "check_punctuation_vs_neighbour", "check_has_attractor", "check_offset_shuffle_test"]


# ------------------------------------------------------------------------ McNemar's exact test


def _outcomes(b: int, c: int, both: int, neither: int, rng: np.random.Generator | None = None):
    """Paired outcomes with ``b`` items only the head gets right, ``c`` only the baseline, ``both`` and
    ``neither``; shuffled with ``rng`` (a fixed order without)."""
    head = np.array([1] * b + [0] * c + [1] * both + [0] * neither, bool)
    base = np.array([0] * b + [1] * c + [1] * both + [0] * neither, bool)
    order = np.arange(len(head)) if rng is None else rng.permutation(len(head))
    return head[order], base[order]


def _exact_p(b: int, c: int) -> float:
    """The exact two-sided p-value, summed over every split of the ``b + c`` discordant pairs that is at
    most as likely as the one observed under a fair coin (the definition of the two-sided test)."""
    n = b + c
    if n == 0:
        return 1.0
    prob = [math.comb(n, k) / 2**n for k in range(n + 1)]
    return min(1.0, sum(p for p in prob if p <= prob[b] * (1 + 1e-12)))


def _mcnemar_compare(got, expected) -> str | None:
    try:
        b, c, p = got
        b, c, p = int(b), int(c), float(p)
    except (TypeError, ValueError):
        return f"expected a tuple (b, c, p-value), got {got!r}"
    if (b, c) != expected[:2]:
        return f"discordant counts: expected (b, c) = {expected[:2]}, got {(b, c)}"
    if not math.isclose(p, expected[2], rel_tol=1e-9, abs_tol=1e-12):
        return f"p-value: expected {expected[2]:.6g}, got {p:.6g}"
    return None


def _mcnemar_cases() -> list[Case]:
    return [
        Case("ten verbs: the head alone right on 6, the baseline alone on 1", args=_outcomes(6, 1, 2, 1),
             expected=(6, 1, 2 * (1 + 7) / 2**7),
             hint="b counts the items only the head gets right, c those only the baseline gets right; "
                  "the items where both agree say nothing about which is better."),
        Case("as many discordant pairs each way", args=_outcomes(3, 3, 4, 0), expected=(3, 3, 1.0),
             hint="a p-value is a probability: it cannot exceed 1."),
        Case("the head and the baseline agree on every item", args=_outcomes(0, 0, 5, 3), expected=(0, 0, 1.0),
             hint="with no discordant pair there is no evidence either way: p = 1."),
        Case("the baseline better", args=_outcomes(2, 9, 6, 3), expected=(2, 9, 2 * (1 + 11 + 55) / 2**11),
             hidden=True),
    ]


def _drawn_mcnemar_cases(rng: np.random.Generator) -> list[Case]:
    """Three shuffled sets of paired outcomes (drawn when grading): two whose discordant counts differ by
    two or more, one with equal counts; the p-value follows from the counts placed."""
    cases = []
    for equal in (False, True, False):
        b = int(rng.integers(1, 9))
        c = b if equal else int(rng.choice([k for k in range(0, 12) if abs(k - b) >= 2]))
        both, neither = int(rng.integers(3, 15)), int(rng.integers(1, 8))
        cases.append(Case(MARK + f": {b + c + both + neither} paired outcomes",
                          args=_outcomes(b, c, both, neither, rng), expected=(b, c, _exact_p(b, c))))
    return cases


def check_mcnemar_exact(fn: Callable) -> None:
    """Check ``fn(head_hits, base_hits)``: ``(b, c, p)``, the items only the head gets right, those only
    the baseline gets right, and the exact two-sided McNemar p-value."""
    run_cases(fn, _mcnemar_cases() + drawn(_drawn_mcnemar_cases), compare=_mcnemar_compare,
              what="McNemar's exact test", forbid=_FORBID)


# ------------------------------------------------------------- a control for a punctuation head


def _control_rows(real: np.ndarray, marks: np.ndarray, rng: np.random.Generator | None = None,
                  spec: dict | None = None) -> tuple[np.ndarray, list[float]]:
    """One causal head on one sequence, and the contrast of each counted query. A real query that sees
    a real mark puts ``w_p`` on the marks it sees and ``w_n`` on their real, unmarked left neighbours
    (``spec[q] = (w_p, w_n)``, or drawn), the rest on its other real keys; other real rows spread over
    their real keys; a padding row sits on the first mark at or before it (garbage to ignore)."""
    pos = len(real)
    marks = marks & real
    neighbour = np.zeros(pos, bool)
    for j in np.nonzero(marks)[0]:
        if j >= 1 and real[j - 1] and not marks[j - 1]:
            neighbour[j - 1] = True
    p, contrast = np.zeros((pos, pos)), []
    for q in range(pos):
        seen = np.arange(q + 1)
        if not real[q]:
            on = seen[marks[: q + 1]]
            p[q, on[0] if len(on) else q] = 1.0
            continue
        m, n = seen[marks[: q + 1]], seen[neighbour[: q + 1]]
        other = seen[real[: q + 1] & ~marks[: q + 1] & ~neighbour[: q + 1]]
        if not len(m):
            p[q, seen[real[: q + 1]]] = rng.dirichlet(np.ones(int(real[: q + 1].sum()))) if rng is not None \
                else 1 / real[: q + 1].sum()
            continue
        w_p, w_n = spec[q] if spec else (float(rng.uniform(0.1, 0.7)), 0.0)
        if not spec:
            w_n = float(rng.uniform(0.05, 0.9 * (1 - w_p))) if len(n) else 0.0
        if not len(other):  # nothing else to take the rest: the marks and neighbours share it
            w_n = 1 - w_p if len(n) else 0.0
            w_p = w_p if len(n) else 1.0
        split = (lambda k: rng.dirichlet(np.ones(k))) if rng is not None else (lambda k: np.full(k, 1 / k))
        p[q, m] = w_p * split(len(m))
        if len(n):
            p[q, n] = w_n * split(len(n))
        if len(other):
            p[q, other] = (1 - w_p - w_n) * split(len(other))
        contrast.append(w_p - w_n)
    return p, contrast


def _control_cases() -> list[Case]:
    #                  <bos> the cat sat  .   it  slept  .
    marks = np.array([[0, 0, 0, 0, 1, 0, 0, 1]], bool)
    real = np.ones((1, 8), bool)
    on_mark, c1 = _control_rows(real[0], marks[0], spec={q: (0.8, 0.1) for q in range(4, 8)})
    on_word, c2 = _control_rows(real[0], marks[0], spec={q: (0.1, 0.6) for q in range(4, 8)})
    two = np.array([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0, 0]], bool)
    m2 = np.array([[0, 0, 1, 0, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0, 1, 0]], bool)  # a mark on padding too
    rows2 = [_control_rows(r, m, spec={q: (0.5, 0.2) if b == 0 else (0.3, 0.3) for q in range(8)})
             for b, (r, m) in enumerate(zip(two, m2))]
    left = np.array([[0, 0, 1, 1, 1, 1, 1, 1]], bool)
    m3 = np.array([[0, 0, 0, 1, 0, 1, 1, 0]], bool)  # two marks in a row: '. .'
    h3, c3 = _control_rows(left[0], m3[0], spec={3: (0.6, 0.3), 4: (0.4, 0.4), 5: (0.5, 0.1), 6: (0.7, 0.1),
                                                  7: (0.2, 0.2)})
    return [
        Case("a head on the marks", args=(on_mark[None, None], marks, real), expected=np.array([np.mean(c1)]),
             hint="for each query that sees a mark: its weight on the marks minus its weight on the word "
                  "just before each mark; the mean over those queries."),
        Case("a head on the word before each mark, and the head on the marks",
             args=(np.stack([on_word, on_mark])[None], marks, real),
             expected=np.array([np.mean(c2), np.mean(c1)]),
             hint="a head that looks next to the marks, not at them, must score below 0."),
        Case("a batch of two, the second right-padded to length 5 (a mark sits in its padding)",
             args=(np.stack([r[0] for r in rows2])[:, None], m2, two),
             expected=np.array([np.mean(rows2[0][1] + rows2[1][1])]),
             hint="only real queries and real keys count; and pool every counted query of the batch "
                  "rather than averaging each sequence's mean."),
        Case("left padding and two marks in a row", args=(h3[None, None], m3, left),
             expected=np.array([np.mean(c3)]), hidden=True),
    ]


def _drawn_control_cases(rng: np.random.Generator) -> list[Case]:
    """Three padded batches (drawn when grading): three sequences with two or three marks each, the
    first mark at least two real tokens in; every counted row's weight on the marks and on their
    neighbours is drawn before the row is filled in."""
    cases = []
    for _ in range(3):
        pos, heads = int(rng.integers(9, 13)), int(rng.integers(2, 4))
        real, marks = np.ones((3, pos), bool), np.zeros((3, pos), bool)
        real[0, : int(rng.integers(1, 3))] = False  # left padding
        real[1, pos - int(rng.integers(1, 3)):] = False  # right padding
        for b in range(3):
            where = np.nonzero(real[b])[0][2:]
            marks[b, rng.choice(where, size=int(rng.integers(2, 4)), replace=False)] = True
        marks[1, -1] = True  # a mark in the padding
        pattern, contrast = np.zeros((3, heads, pos, pos)), [[] for _ in range(heads)]
        for b, h in np.ndindex(3, heads):
            pattern[b, h], c = _control_rows(real[b], marks[b], rng)
            contrast[h] += c
        cases.append(Case(MARK + f": 3 sequences of {pos} positions, {heads} heads", args=(pattern, marks, real),
                          expected=np.array([np.mean(c) for c in contrast])))
    return cases


def check_punctuation_vs_neighbour(fn: Callable) -> None:
    """Check ``fn(pattern, is_punct, mask)``: per head of a causal model, the mean over every real query
    that sees a real mark of (its weight on the real marks it sees minus its weight on their real,
    unmarked left neighbours). ``pattern`` ``(batch, n_heads, pos, pos)``; the answer ``(n_heads,)``."""
    run_cases(fn, _control_cases() + drawn(_drawn_control_cases),
              compare=lambda got, want: compare_arrays(got, want, atol=1e-9, rtol=0),
              what="a punctuation score with its control", forbid=_FORBID)


# -------------------------------------------------------------------------------- an attractor


def _attractor_cases() -> list[Case]:
    #        the  keys to  the cabinet are
    tags = ["DET", "NOUN", "ADP", "DET", "NOUN", "VERB"]
    return [
        Case("the keys to the cabinet are", args=(tags, [None, "pl", None, None, "sg", "pl"], 1, 5),
             expected=True, hint="a noun of the other number strictly between subject and verb."),
        Case("the key to the cabinet is", args=(tags, [None, "sg", None, None, "sg", "sg"], 1, 5),
             expected=False, hint="a noun between them of the *same* number is no attractor."),
        Case("the keys are near the cabinet", args=(["DET", "NOUN", "VERB", "ADP", "DET", "NOUN"],
                                                    [None, "pl", "pl", None, None, "sg"], 1, 2),
             expected=False, hint="only what stands between subject and verb counts, not what follows."),
        Case("the key that the boys see is", args=(["DET", "NOUN", "PRON", "DET", "NOUN", "VERB", "VERB"],
                                                   [None, "sg", None, None, "pl", "pl", "sg"], 1, 6),
             expected=True, hint="any noun between them counts, not only the one next to the verb."),
        Case("a longer sentence", args=(["DET", "NOUN", "ADP", "NOUN", "ADP", "DET", "NOUN", "VERB"],
                                        [None, "pl", None, "pl", None, None, "pl", "pl"], 1, 7),
             expected=False, hidden=True),
    ]


def _drawn_attractor_cases(rng: np.random.Generator) -> list[Case]:
    """Six sentences (drawn when grading), two of each kind: an attractor placed away from the verb
    (a same-number noun right before the verb), a same-number noun only, and an other-number noun
    after the verb only."""
    cases = []
    for kind in ("attractor", "same", "after", "attractor", "same", "after"):
        n_between = int(rng.integers(3, 6))
        subject = str(rng.choice(["sg", "pl"]))
        other = "pl" if subject == "sg" else "sg"
        tags = ["DET", "NOUN"] + [str(rng.choice(["ADP", "DET", "ADJ"])) for _ in range(n_between)] + ["VERB"]
        numbers = [None, subject] + [None] * n_between + [subject]
        if kind == "attractor":
            k = int(rng.integers(2, 2 + n_between - 1))
            tags[k], numbers[k] = "NOUN", other
            tags[-2], numbers[-2] = "NOUN", subject
        elif kind == "same":
            tags[-2], numbers[-2] = "NOUN", subject
        tags += ["DET", "NOUN"]
        numbers += [None, other]
        cases.append(Case(MARK + f": {len(tags)} words", args=(tags, numbers, 1, len(tags) - 3),
                          expected=kind == "attractor"))
    return cases


def _same_flag(got, expected) -> str | None:
    if not isinstance(got, (bool, np.bool_)):
        return f"expected True or False, got {got!r}"
    return None if bool(got) == expected else f"expected {expected}, got {bool(got)}"


def check_has_attractor(fn: Callable) -> None:
    """Check ``fn(tags, numbers, subject, verb)``: whether a noun of the other number than the subject
    stands strictly between the subject and the verb."""
    run_cases(fn, _attractor_cases() + drawn(_drawn_attractor_cases), compare=_same_flag,
              what="the attractor rule", forbid=_FORBID)


# ------------------------------------------------------------- a null that shuffles the offsets


def _pair_compare(got, expected) -> str | None:
    try:
        accuracy, p = (float(x) for x in got)
    except (TypeError, ValueError):
        return f"expected a tuple (accuracy, p-value), got {got!r}"
    if not math.isclose(accuracy, expected[0], abs_tol=1e-9):
        return f"accuracy: expected {expected[0]:.4f}, got {accuracy:.4f}"
    if not math.isclose(p, expected[1], abs_tol=1e-9):
        return f"p-value: expected {expected[1]:.4f}, got {p:.4f}"
    return None


def _shuffle_cases() -> list[Case]:
    q, t = np.array([3, 5, 8]), np.array([1, 1, 1])  # three verbs, each subject at position 1
    perms = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [1, 0, 2]])
    prev = np.array([2, 7, 4, 9])  # a previous-token rule on verbs whose subjects sit 1, 2, 1, 3 back
    qp, tp = np.array([3, 9, 5, 12]), np.array([2, 7, 4, 9])
    pp = np.array([[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [3, 1, 2, 0], [0, 3, 2, 1]])
    return [
        Case("a head right on all three verbs; the identity and three other orders",
             args=(t.copy(), q, t, perms), expected=(1.0, 2 / 5),
             hint="only the identity moves every subject back where it was, so one of the four shuffles "
                  "does as well as the data; and the observed arrangement counts among the shuffles."),
        Case("the same verbs, a head that points at the verb's own position", args=(q.copy(), q, t, perms),
             expected=(0.0, 1.0),
             hint="a shuffle that does as well as the data, or better, counts against the head: "
                  "at or above, not strictly above."),
        Case("the rule 'the previous token', against subjects 1, 2, 1 and 3 back",
             args=(qp - 1, qp, tp, pp), expected=(0.5, 1.0),
             hint="each verb keeps its position and takes another verb's *offset* (target minus query), "
                  "not its target's absolute position; a positional rule then does as well in every shuffle."),
        Case("four verbs, a head right on three", args=(np.array([2, 7, 3, 9]), qp, tp, pp),
             expected=(0.75, 3 / 6), hidden=True),
    ]


def _drawn_shuffle_cases(rng: np.random.Generator) -> list[Case]:
    """Three sets (drawn when grading): verbs at distinct positions whose subjects all sit at one
    position, a head right on every verb but one (where it points nowhere, -1), and permutations that
    hold the identity exactly once. A shuffle matches the head only if it fixes every verb, so the
    p-value is (1 + 1) / (1 + number of permutations)."""
    cases = []
    for _ in range(3):
        n, n_perm = int(rng.integers(6, 11)), int(rng.integers(20, 60))
        subject = int(rng.integers(0, 3))
        queries = rng.choice(np.arange(subject + 1, subject + 40), size=n, replace=False)
        targets = np.full(n, subject)
        pointed = targets.copy()
        pointed[int(rng.integers(n))] = -1
        perms = [np.arange(n)]
        while len(perms) < n_perm:
            perm = rng.permutation(n)
            if (perm != np.arange(n)).any():
                perms.append(perm)
        perms = np.array(perms)[rng.permutation(n_perm)]
        cases.append(Case(MARK + f": {n} verbs, {n_perm} permutations", args=(pointed, queries, targets, perms),
                          expected=((n - 1) / n, 2 / (1 + n_perm))))
    return cases


def check_offset_shuffle_test(fn: Callable) -> None:
    """Check ``fn(pointed, queries, targets, perms)``: ``(accuracy, p)``, the share of queries whose
    pointed key is the target, and the permutation p-value of that accuracy when each query takes, in
    each row of ``perms``, another query's offset (target minus query); the observed arrangement counts
    among the permutations, and a permutation that does as well counts against the head."""
    run_cases(fn, _shuffle_cases() + drawn(_drawn_shuffle_cases), compare=_pair_compare,
              what="a null that shuffles the offsets", forbid=_FORBID)
