"""Checks for chapter 03, "What heads do".

Every known answer is built by hand: attention patterns whose rows are set entry by entry,
so the right score, sink or accuracy can be read off the construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from headlab.exercises import Case, compare_number, run_cases

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas")

__all__ = ["check_punctuation_score", "check_find_sink", "check_relation_vs_offset",
           "check_relation_vs_nearest_noun"]


def _rows(pos: int, targets: dict[int, dict[int, float]], causal: bool = True) -> np.ndarray:
    """A ``(pos, pos)`` pattern: row ``i`` puts ``targets[i]`` where given and spreads the rest
    of its weight evenly over the keys it may see (``j <= i`` when causal)."""
    p = np.zeros((pos, pos))
    for i in range(pos):
        keys = list(range(i + 1)) if causal else list(range(pos))
        row = targets.get(i, {})
        rest = [j for j in keys if j not in row]
        for j, w in row.items():
            p[i, j] = w
        left = 1.0 - sum(row.values())
        if rest:
            p[i, rest] = left / len(rest)
        elif abs(left) > 1e-12:
            raise ValueError("a row's weights must sum to 1")
    return p



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
    run_cases(fn, _punctuation_cases(), compare=compare_number, forbid=_DETECTORS)


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
    run_cases(fn, _sink_cases(), compare=_same_position, forbid=_DETECTORS)


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
    run_cases(fn, _relation_cases(), compare=_relation_compare, forbid=_DETECTORS)


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
    run_cases(fn, _nearest_noun_cases(), compare=_pair_compare, forbid=_DETECTORS)
