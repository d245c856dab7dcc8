"""Checks for chapter 4, "Syntactic heads against ground truth".

Every known answer is built by hand: attention patterns whose rows are set entry by entry
(:func:`deviating.exercises.fixtures.hand_pattern`) and relations whose targets are placed by
hand, so the right accuracy and baseline can be read off the construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.ch04_more import (
    check_has_attractor,
    check_mcnemar_exact,
    check_offset_shuffle_test,
    check_punctuation_vs_neighbour,
)
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.fixtures import hand_pattern as _rows

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas", "headlab.roles")

__all__ = ["check_relation_vs_offset", "check_relation_vs_nearest_noun", "check_nearest_candidate_accuracy",
           "check_mcnemar_exact", "check_punctuation_vs_neighbour", "check_has_attractor",
           "check_offset_shuffle_test"]


def _row(rng: np.random.Generator, pos: int, keys: list[int], kind: str, target: int, later: int = -1) -> np.ndarray:
    """A random row over ``keys`` whose largest weight is on ``target`` ("hit"), on another key ("miss"),
    or shared by ``target`` and the key ``later`` after it ("tie")."""
    row = np.zeros(pos)
    row[keys] = 0.4 * rng.dirichlet(np.ones(len(keys))) / 2  # every entry below 0.2
    top = {"hit": [target], "miss": [int(rng.choice([k for k in keys if k != target]))],
           "tie": [target, later]}[kind]
    row[top] = 0.0
    row[top] = (1 - row.sum()) / len(top)
    return row


# ------------------------------------------------------------- a syntactic head vs the offset


def _relation_cases() -> list[Case]:
    # Two sentences of 6 tokens; pointers: verb -> subject, -1 elsewhere. The subject is
    # right before the verb (offset -1) in sentence 0, two tokens before (offset -2) for
    # both verbs of sentence 1.
    targets = np.array([[-1, -1, -1, 2, -1, -1],
                        [-1, -1, -1, 1, -1, 3]])
    n = 3  # annotated queries: (0, 3), (1, 3), (1, 5)
    perfect = np.stack([_rows(6, {3: {2: 1.0}}), _rows(6, {3: {1: 1.0}, 5: {3: 1.0}})])
    previous = np.stack([_rows(6, {i: {i - 1: 1.0} for i in range(1, 6)})] * 2)
    tie = np.stack([_rows(6, {3: {2: 0.4, 1: 0.4}}), _rows(6, {3: {1: 0.9}, 5: {3: 0.5}})])
    # offsets -1, -2, -1, -1: the most common offset is -1 here
    targets_1 = np.array([[-1, -1, -1, 2, -1, -1], [-1, -1, 0, -1, 3, -1], [-1, -1, -1, -1, -1, 4]])
    perfect_1 = np.stack([_rows(6, {3: {2: 1.0}}), _rows(6, {2: {0: 1.0}, 4: {3: 1.0}}),
                          _rows(6, {5: {4: 1.0}})])
    # both verbs three tokens after their subject; the head ties the subject with a *later* key
    targets_3 = np.array([[-1, -1, -1, -1, 1, 2]])
    tie_after = np.stack([_rows(6, {4: {1: 0.4, 2: 0.4}, 5: {2: 0.45, 4: 0.45}})])
    # offsets -2, -1, -1, -2 (in reading order): a tie between -1 and -2
    targets_tie = np.array([[-1, -1, 0, 2, -1, -1], [-1, -1, -1, -1, 3, 3]])
    prev_tie = np.stack([_rows(6, {i: {i - 1: 1.0} for i in range(1, 6)})] * 2)
    # an encoder: offsets +1, -1, +1, -1, +3: a tie between +1 and -1
    targets_enc = np.array([[3, 2, -1, 2, 5, 4]])
    next_token = np.stack([_rows(6, {i: {min(i + 1, 5): 1.0} for i in range(6)}, causal=False)])
    return [
        Case("a head that always points at the subject", args=(perfect, targets),
             expected=(1.0, -2, 2 / n),
             hint="return (head accuracy, best offset, offset accuracy); count, for each offset k, "
                  "the annotated queries whose target is query + k."),
        Case("a previous-token head", args=(previous, targets), expected=(1 / n, -2, 2 / n),
             hint="the head's argmax must be the target; here it is only for the first sentence."),
        Case("a head whose largest weight is shared by the subject and an earlier key", args=(tie, targets),
             expected=(2 / n, -2, 2 / n),
             hint="a tie is a miss: the weight on the target must be strictly larger than on any other key."),
        Case("three sentences whose subjects sit at offsets -1, -2, -1, -1", args=(perfect_1, targets_1),
             expected=(1.0, -1, 3 / 4),
             hint="compute the best offset from the targets of each input; it is not the same everywhere."),
        Case("subjects three tokens back; the head ties each subject with a *later* key",
             args=(tie_after, targets_3), expected=(0.0, -3, 1.0),
             hint="a tie is a miss wherever the other key sits: argmax returns the first maximum, so "
                  "`argmax == target` counts a tie after the target as a hit."),
        Case("offsets -2, -1, -1, -2: two offsets equally common", args=(prev_tie, targets_tie),
             expected=(2 / 4, -1, 2 / 4),
             hint="break ties between offsets by the smaller |k|, then the negative one; not by which "
                  "offset was seen first."),
        Case("an encoder, offsets +1, -1, +1, -1, +3", args=(next_token, targets_enc),
             expected=(2 / 5, -1, 2 / 5), hidden=True),
    ]


def _relation_compare(got, expected) -> str | None:
    try:
        accuracy, offset, offset_accuracy = got
        accuracy, offset_accuracy, offset = float(accuracy), float(offset_accuracy), int(offset)
    except (TypeError, ValueError):
        return f"expected a tuple (head accuracy, best offset, offset accuracy), got {got!r}"
    if not math.isclose(accuracy, expected[0], abs_tol=1e-9):
        return f"head accuracy: expected {expected[0]:.4f}, got {accuracy:.4f}"
    if offset != expected[1]:
        return f"best offset: expected {expected[1]}, got {offset}"
    if not math.isclose(offset_accuracy, expected[2], abs_tol=1e-9):
        return f"offset accuracy: expected {expected[2]:.4f}, got {offset_accuracy:.4f}"
    return None


def check_relation_vs_offset(fn: Callable[[np.ndarray, np.ndarray], tuple[float, int, float]]) -> None:
    """Check ``fn(patterns, targets)``: a head's relation accuracy beside the best fixed offset.

    ``patterns`` ``(batch, pos, pos)``: one head on ``batch`` sequences; ``targets``
    ``(batch, pos)``: the target position of each annotated query, -1 elsewhere.
    """
    run_cases(fn, _relation_cases() + drawn(_drawn_relation_cases), compare=_relation_compare,
              forbid=_DETECTORS)


def _drawn_relation_cases(rng: np.random.Generator) -> list[Case]:
    """Three batches of an encoder head (drawn when grading): the targets sit at offsets +1 and -1 equally
    often (more often than any other), the first annotated query at +1, so the tie rule decides; each
    annotated row hits, misses or ties its target with a later key, as drawn."""
    cases = []
    for _ in range(3):
        batch, pos, m = int(rng.integers(3, 5)), int(rng.integers(8, 11)), int(rng.integers(2, 4))
        others = [int(k) for k in rng.choice([-3, -2, 2, 3], size=int(rng.integers(1, 3)), replace=False)]
        targets = np.full((batch, pos), -1)
        targets[0, 1] = 2  # the first annotated query, at offset +1
        for k in [1] * (m - 1) + [-1] * m + others:
            free = [(b, q) for b in range(1, batch) for q in range(pos) if targets[b, q] < 0 and 0 <= q + k < pos]
            b, q = free[int(rng.integers(len(free)))]
            targets[b, q] = q + k
        patterns, hits, n = rng.dirichlet(np.ones(pos), size=(batch, pos)), 0, 0
        kinds = ["tie"] + [str(rng.choice(["hit", "miss"])) for _ in range(2 * m + len(others))]
        for (b, q), kind in zip(sorted(zip(*np.nonzero(targets >= 0)), key=lambda bq: targets[bq] >= pos - 1), kinds):
            t = int(targets[b, q])
            kind = kind if kind != "tie" or t < pos - 1 else "miss"
            patterns[b, q] = _row(rng, pos, list(range(pos)), kind, t, t + 1 if kind == "tie" else -1)
            hits, n = hits + (kind == "hit"), n + 1
        cases.append(Case(MARK + f": {batch} sequences of {pos}, {n} annotated queries", args=(patterns, targets),
                          expected=(hits / n, -1, m / n)))
    return cases


# --------------------------------------------- a subject head against the nearest noun


def _nearest_noun_cases() -> list[Case]:
    # Three sequences of 7 tokens, the query at the token *before* each verb (where a causal
    # model predicts the verb's form), pointing at the verb's subject:
    #   0: <bos> the cat | sleeps . dogs | bark   queries 2 -> 2 and 5 -> 5 (the query itself)
    #   1: <bos> the keys to the cabinet | are    query 5 -> 2 (an attractor, 'cabinet', at 5)
    #   2: <bos> he | sleeps . the cat            query 1 -> 1 (a pronoun: no noun before it)
    targets = np.array([[-1, -1, 2, -1, -1, 5, -1],
                        [-1, -1, -1, -1, -1, 2, -1],
                        [-1, 1, -1, -1, -1, -1, -1]])
    is_noun = np.array([[0, 0, 1, 0, 0, 1, 0],
                        [0, 0, 1, 0, 0, 1, 0],
                        [0, 0, 0, 0, 0, 1, 0]], dtype=bool)
    n, nearest = 4, 2 / 4  # the nearest noun is right for the two queries of sequence 0 only
    subject = np.stack([_rows(7, {2: {2: 1.0}, 5: {5: 1.0}}), _rows(7, {5: {2: 0.8}}),
                        _rows(7, {1: {1: 0.9}})])
    itself = np.stack([_rows(7, {i: {i: 1.0} for i in range(7)})] * 3)
    previous = np.stack([_rows(7, {i: {i - 1: 1.0} for i in range(1, 7)})] * 3)
    tie = subject.copy()
    tie[1, 5] = _rows(7, {5: {2: 0.5, 5: 0.5}})[5]
    targets_after = np.array([[-1, -1, -1, 1, -1, -1, 4]])
    nouns_after = np.array([[0, 1, 0, 0, 1, 0, 0]], dtype=bool)
    after = np.stack([_rows(7, {3: {1: 0.5, 3: 0.5}, 6: {1: 0.45, 4: 0.45}})])
    # sentence 0: queries 2 -> 1 and 5 -> 5; sentence 1: query 4 -> 2 (nouns 2, 3 and 5)
    hidden_t = np.array([[-1, -1, 1, -1, -1, 5, -1], [-1, -1, -1, -1, 2, -1, -1]])
    hidden_n = np.array([[0, 1, 0, 1, 0, 1, 0], [0, 0, 1, 1, 0, 1, 0]], dtype=bool)
    hidden_p = np.stack([_rows(7, {2: {1: 0.3, 2: 0.3}, 5: {5: 0.9}}), _rows(7, {4: {3: 0.8}})])
    return [
        Case("a head that always points at the subject", args=(subject, targets, is_noun),
             expected=(1.0, nearest),
             hint="return (head accuracy, nearest-noun accuracy); the nearest noun at or before the "
                  "query is right for 2 of the 4 queries."),
        Case("a head that looks at the query itself", args=(itself, targets, is_noun),
             expected=(3 / n, nearest),
             hint="the query can be its own target ('the cat | sleeps'): a head on the query itself "
                  "is right there. For sequence 2 there is no noun at or before the query: a miss."),
        Case("a previous-token head", args=(previous, targets, is_noun), expected=(0.0, nearest),
             hint="the previous token is never the subject in these sequences."),
        Case("a head whose weight is shared by the subject and the attractor", args=(tie, targets, is_noun),
             expected=(3 / n, nearest),
             hint="a tie is a miss: the weight on the target must be strictly larger than on any other key."),
        Case("nouns at 1 and 4; a query at 3 whose subject is 1, and one at 6 whose subject is 4",
             args=(after, targets_after, nouns_after), expected=(0.0, 1.0),
             hint="the baseline looks at or *before* the query only (a noun after it is the future), and "
                  "takes the nearest such noun, not the first noun of the sentence. The head ties each "
                  "subject with another key: a miss, whichever side the other key is on."),
        Case("two sentences with nouns before and after the queries",
             args=(hidden_p, hidden_t, hidden_n), expected=(1 / 3, 2 / 3), hidden=True),
    ]


def _pair_compare(got, expected) -> str | None:
    try:
        head, noun = got
        head, noun = float(head), float(noun)
    except (TypeError, ValueError):
        return f"expected a tuple (head accuracy, nearest-noun accuracy), got {got!r}"
    if not math.isclose(head, expected[0], abs_tol=1e-9):
        return f"head accuracy: expected {expected[0]:.4f}, got {head:.4f}"
    if not math.isclose(noun, expected[1], abs_tol=1e-9):
        return f"nearest-noun accuracy: expected {expected[1]:.4f}, got {noun:.4f}"
    return None


def check_relation_vs_nearest_noun(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[float, float]]) -> None:
    """Check ``fn(patterns, targets, is_noun)``: a head's relation accuracy beside the accuracy of
    pointing at the nearest noun at or before each query.

    ``patterns`` ``(batch, pos, pos)``: one causal head; ``targets`` ``(batch, pos)``: the target
    of each annotated query, -1 elsewhere; ``is_noun`` ``(batch, pos)`` bools.
    """
    run_cases(fn, _nearest_noun_cases() + drawn(_drawn_noun_cases), compare=_pair_compare, forbid=_DETECTORS)


def _drawn_noun_cases(rng: np.random.Generator) -> list[Case]:
    """Three batches of five sequences (drawn when grading), one annotated query each, in random order:
    the query is the subject; two nouns before it, the nearer one the subject; a later noun nearer than
    the subject; a plain one whose head row ties the subject with a later key; no noun before the query."""
    cases = []
    for _ in range(3):
        pos = int(rng.integers(9, 13))
        targets, nouns = np.full((5, pos), -1), np.zeros((5, pos), bool)
        patterns, head, noun = rng.dirichlet(np.ones(pos), size=(5, pos)), 0, 0
        for b, kind in enumerate(rng.permutation(["itself", "two", "later", "tie", "none"])):
            q = int(rng.integers(5, pos - 2))
            if kind == "itself":
                nouns[b, [int(rng.integers(1, q - 1)), q]], t = True, q
            elif kind == "two":
                t = int(rng.integers(2, q))
                nouns[b, [int(rng.integers(1, t)), t]] = True
            elif kind == "later":
                t = int(rng.integers(1, q - 2))
                nouns[b, [t, q + 1]] = True
            elif kind == "tie":
                t = int(rng.integers(1, q))
                nouns[b, t] = True
            else:
                t = int(rng.integers(1, q))  # a pronoun subject: no noun at or before the query
                nouns[b, q + 1:] = True
            targets[b, q] = t
            tied = kind == "tie"
            row_kind = "tie" if tied else str(rng.choice(["hit", "miss"]))
            patterns[b] = np.tril(patterns[b]) / np.tril(patterns[b]).sum(-1, keepdims=True)
            later = int(rng.integers(t + 1, q + 1)) if tied else -1
            patterns[b, q] = _row(rng, pos, list(range(q + 1)), row_kind, t, later)
            head, noun = head + (row_kind == "hit"), noun + (kind != "none")
        cases.append(Case(MARK + f": 5 sequences of {pos} positions", args=(patterns, targets, nouns),
                          expected=(head / 5, noun / 5)))
    return cases


# ------------------------------------------------------------- the nearest-candidate baseline


def _nearest_mistakes(queries, candidates, gold) -> dict[str, float]:
    """What the common mistakes return on an input (only to name a wrong answer)."""
    items = list(zip(queries, candidates, gold))

    def acc(pick, skip_empty=False, per_candidate=False):
        picks = [(pick(q, list(c)), g) for q, c, g in items]
        hits = sum(p is not None and p == g for p, g in picks)
        if per_candidate:
            return hits / max(sum(len(c) for c in candidates), 1)
        n = sum(p is not None for p, _ in picks) if skip_empty else len(picks)
        return hits / n if n else 0.0

    def earlier(q, c):
        return [x for x in c if x < q]
    return {
        "the nearest candidate in either direction (a later word too); the baseline looks back only":
            acc(lambda q, c: min((x for x in c if x != q), key=lambda x: (abs(x - q), x), default=None)),
        "the nearest candidate in either direction, ties going to the later one":
            acc(lambda q, c: min((x for x in c if x != q), key=lambda x: (abs(x - q), -x), default=None)),
        "the query's own position counted as a candidate (a word never points at itself)":
            acc(lambda q, c: max((x for x in c if x <= q), default=None)),
        "the farthest earlier candidate (the first in the text), not the nearest":
            acc(lambda q, c: min(earlier(q, c), default=None)),
        "the last earlier candidate in list order: the lists are not sorted":
            acc(lambda q, c: earlier(q, c)[-1] if earlier(q, c) else None),
        "queries with no earlier candidate left out; they count, as misses":
            acc(lambda q, c: max(earlier(q, c), default=None), skip_empty=True),
        "hits divided by the number of candidates, not by the number of queries":
            acc(lambda q, c: max(earlier(q, c), default=None), per_candidate=True),
    }


def _nearest_cases() -> list[Case]:
    cases = [
        Case("two verbs, each with two earlier nouns: the nearer one is the subject",
             args=([4, 6], [[1, 3], [2, 5]], [3, 5]), expected=1.0,
             hint="the baseline predicts the candidate with the largest position before the query."),
        Case("a noun right after each verb is nearer than the subject, but the baseline looks back only",
             args=([3, 4, 5], [[0, 4], [1, 5, 7], [2, 6]], [0, 1, 2]), expected=1.0,
             hint="only candidates at positions < query count: a word cannot point to a later word in a "
                  "causal model."),
        Case("the query's own position is among the candidates",
             args=([2, 5], [[0, 2], [1, 3, 5]], [0, 3]), expected=1.0,
             hint="strictly before the query: a candidate at the query's own position is skipped."),
        Case("unsorted candidate lists, and a query with no earlier candidate",
             args=([1, 6, 4, 5, 7], [[3, 4], [5, 1, 3], [0, 2, 1], [2], [1, 3, 5]], [0, 5, 2, 2, 5]), expected=0.8,
             hint="the lists come in any order; a query with no earlier candidate is a miss for the baseline "
                  "(it predicts nothing) and still counts in the denominator: 4 hits of 5 queries."),
        Case("a noun as far after the verb as the subject is before it",
             args=([3, 7], [[1, 5], [4, 6, 8]], [1, 4]), expected=0.5,
             hint="verb 3: candidates 1 and 5 are 2 away each; only 1 is before it."),
        Case("six verbs", args=([5, 2, 8, 3, 6, 4], [[4, 1, 6], [0, 2], [7, 9, 2], [], [5, 7], [3, 0]],
                                [4, 0, 2, 1, 5, 0]),
             expected=3 / 6, hidden=True),
    ]
    # a distinct object per expected value, so that compare can find each case's input by it
    return [replace(c, expected=np.float64(c.expected)) for c in cases]


def check_nearest_candidate_accuracy(fn: Callable) -> None:
    """Check ``fn(queries, candidates, gold)``: the share of queries whose nearest candidate strictly
    before them (the largest candidate position < the query) is the gold position; a query with no
    earlier candidate is a miss. ``candidates[i]`` lists query i's candidate positions in any order."""
    cases = _nearest_cases()
    by_id = {id(c.expected): c.args for c in cases}  # each expected value is its own np.float64

    def compare(got, expected):
        problem = compare_number(got, expected, atol=1e-12, rtol=0)
        if problem is None:
            return None
        for what, answer in _nearest_mistakes(*by_id[id(expected)]).items():
            if abs(answer - expected) > 1e-12 and compare_number(got, answer, atol=1e-12, rtol=0) is None:
                return f"{problem}; this is the answer with {what}"
        return problem

    cases += drawn(_drawn_candidate_cases)
    by_id.update({id(c.expected): c.args for c in cases})
    run_cases(fn, cases, compare=compare, what="the nearest-candidate baseline", forbid=_DETECTORS)


def _drawn_candidate_cases(rng: np.random.Generator) -> list[Case]:
    """Three lists of items (drawn when grading), in random order: a later candidate nearer than the gold
    one; the query's own position among the candidates; an unsorted list whose last earlier entry is not
    the nearest; no earlier candidate (a miss); and filler items the baseline gets right."""
    cases = []
    for _ in range(3):
        items = []
        for kind in ["later", "itself", "unsorted", "none"] + ["filler"] * int(rng.integers(2, 5)):
            q = int(rng.integers(6, 20))
            if kind == "none":
                items.append((q, [q + 1, q + int(rng.integers(2, 5))], q - 1))
                continue
            gold = q - int(rng.integers(2, 4))
            earlier = [gold] + [int(x) for x in rng.choice(np.arange(0, gold), size=int(rng.integers(1, 3)),
                                                            replace=False)]
            extra = {"later": [q + 1], "itself": [q], "unsorted": [], "filler": []}[kind]
            cands = [int(x) for x in rng.permutation(earlier + extra)]
            if kind == "unsorted":  # the nearest first, the others after it
                cands = [gold] + [x for x in cands if x != gold]
            items.append((q, cands, gold))
        order = rng.permutation(len(items))
        queries, cands, gold = ([items[i][j] for i in order] for j in range(3))
        cases.append(Case(MARK + f": {len(items)} queries", args=(queries, cands, gold),
                          expected=np.float64((len(items) - 1) / len(items))))
    return cases
