"""Checks for chapter 3, "Positional and token heads".

Every known answer is built by hand: attention patterns whose rows are set entry by entry
(:func:`deviating.exercises.fixtures.hand_pattern`), so the right score or sink can be read off
the construction.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.fixtures import hand_pattern as _rows

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas", "deviating.roles")

__all__ = ["check_punctuation_score", "check_find_sink"]


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
