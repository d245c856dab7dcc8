"""More checks for chapter 10, "The claims ledger": corrections for many tests, and a baseline that is
the answer key.

Every case is built so that its answer is known by construction: p-values made from the adjusted
values they must give, and labels that agree with gold labels on a chosen number of items.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_holm", "check_benjamini_hochberg", "check_baseline_usable"]

_STATS = ("headlab.stats", "deviating.bands", "deviating.evidence", "deviating.verdicts", "scipy.stats")


# --------------------------------------------------------------------------- Holm's correction


def _holm_made(adjusted: np.ndarray, tie_at: int | None, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p-values made from increasing adjusted values: the i-th smallest of m is ``adjusted[i] / (m - i)``.
    With ``tie_at = j``, the j-th smallest is raised to just below what would exceed ``adjusted[j - 1]``,
    so its adjusted value is ``adjusted[j - 1]`` (the running maximum). Returned in ``order``."""
    m = len(adjusted)
    p = adjusted / (m - np.arange(m))
    want = adjusted.copy()
    if tie_at is not None:
        j = tie_at
        p[j] = (p[j - 1] + adjusted[j - 1] / (m - j)) / 2  # between the previous p and the tie
        want[j] = adjusted[j - 1]
    return p[order], want[order]


def _holm_cases() -> list[Case]:
    p, want = _holm_made(np.array([0.04, 0.06, 0.09]), None, np.array([2, 0, 1]))
    tie_p, tie_want = _holm_made(np.array([0.02, 0.05, 0.07, 0.08]), 2, np.array([3, 1, 0, 2]))
    big_p, big_want = _holm_made(np.array([0.01, 0.02, 0.3, 0.4, 0.6]), 3, np.array([4, 0, 3, 2, 1]))
    return [
        Case("one p-value", args=(np.array([0.03]),), expected=np.array([0.03]),
             hint="with one test there is nothing to correct."),
        Case("three p-values, in no order", args=(p,), expected=want,
             hint="the smallest p-value is corrected most; return the values in the order given."),
        Case("a later p-value that would come out smaller", args=(tie_p,), expected=tie_want,
             hint="an adjusted p-value is never smaller than that of a smaller p-value."),
        Case("large p-values", args=(np.array([0.5, 0.7, 0.6]),), expected=np.ones(3),
             hint="a p-value is at most 1."),
        Case("five p-values", args=(big_p,), expected=big_want, hidden=True),
    ]


def _drawn_holm_cases(rng: np.random.Generator) -> list[Case]:
    """4-7 p-values made from drawn increasing adjusted values, one of them raised so the running
    maximum decides it, in a shuffled order (never the sorted one); and 3-6 large ones (all 1)."""
    m = int(rng.integers(4, 8))
    adjusted = np.sort(rng.uniform(0.001, 0.9, m))
    order = rng.permutation(m)
    if np.array_equal(order, np.arange(m)):
        order = order[::-1].copy()
    p, want = _holm_made(adjusted, int(rng.integers(1, m)), order)
    big = rng.uniform(0.5, 1.0, int(rng.integers(3, 7)))
    return [Case(MARK + f": {m} p-values", args=(p,), expected=want),
            Case(MARK + f": {len(big)} large p-values", args=(big,), expected=np.ones(len(big)))]


def check_holm(fn: Callable) -> None:
    """Check ``holm(pvalues)``: Holm's adjusted p-values, in the order given."""
    run_cases(fn, _holm_cases() + drawn(_drawn_holm_cases),
              compare=lambda got, want: compare_arrays(got, want, atol=1e-12, rtol=1e-9),
              what="Holm's correction", forbid=_STATS)


# --------------------------------------------------------------------------- a baseline that is the answer key


def _compare_usable(got, expected) -> str | None:
    try:
        accuracy, usable = got
    except (TypeError, ValueError):
        return f"expected (accuracy, usable); got {got!r}"
    if not isinstance(usable, (bool, np.bool_)):
        return f"usable must be True or False, got {usable!r}"
    problem = compare_number(accuracy, expected[0], atol=1e-12)
    if problem:
        return "accuracy: " + problem
    return None if bool(usable) == expected[1] else f"usable should be {expected[1]}"


def _labels(rng_or_seed, n: int, right: int, unlabelled: int, abstain: int):
    """Gold labels (``None`` on ``unlabelled`` items) and a baseline right on exactly ``right`` of
    the labelled items; ``abstain`` of its wrong answers are ``None``."""
    g = np.random.default_rng(rng_or_seed) if isinstance(rng_or_seed, int) else rng_or_seed
    gold = [int(x) for x in g.integers(0, 5, n)]
    base = list(gold)
    wrong = g.choice(n, n - right, replace=False)
    for k, i in enumerate(wrong):
        base[i] = None if k < abstain else (gold[i] + 1) % 5
    blank = [i for i in range(n) if i not in set(wrong)][:unlabelled]
    for i in blank:
        gold[i] = None
    return base, gold, (right - len(blank)) / (n - len(blank))


def _usable_cases() -> list[Case]:
    cases = []
    for name, (n, right, blank, abstain), kwargs, hint, hidden in [
        ("the rule that made the labels", (50, 50, 0, 0), {}, "it agrees on every item: no head can beat it.", False),
        ("a fair baseline, right on 30 of 40", (40, 30, 0, 0), {}, "", False),
        ("unlabelled items do not count", (60, 52, 8, 0), {},
         "leave out the items whose gold label is None, from both counts.", False),
        ("an abstention is a wrong answer", (40, 36, 0, 4), {}, "a baseline that says None got the item wrong.",
         False),
        ("at most 0.9 allowed; right on exactly 90%", (50, 45, 0, 0), {"at_most": 0.9},
         "a baseline is the answer key only above at_most.", False),
        ("a labelling rule corrected by hand on one item", (100, 99, 0, 0), {}, "", True),
    ]:
        base, gold, acc = _labels(n + right, n, right, blank, abstain)
        cases.append(Case(name, args=(base, gold), kwargs=kwargs,
                          expected=(acc, acc <= kwargs.get("at_most", 0.98)), hint=hint, hidden=hidden))
    return cases


def _drawn_usable_cases(rng: np.random.Generator) -> list[Case]:
    """Label sets of 40-120 items: the labelling rule itself (some items unlabelled), a fair baseline
    with abstentions, one exactly at a drawn ``at_most``; and the rule wrong on one of 100-200."""
    n = int(rng.integers(40, 121))
    rule, gold, acc = _labels(rng, n, n, int(rng.integers(1, 6)), 0)
    out = [Case(MARK + ": the labelling rule", args=(rule, gold), expected=(acc, False))]
    base, gold, acc = _labels(rng, n, int(n * 0.7), int(rng.integers(1, 6)), int(rng.integers(1, 5)))
    out.append(Case(MARK + ": a fair baseline", args=(base, gold), expected=(acc, True)))
    right = int(rng.integers(n // 2, n - 2))
    base, gold, acc = _labels(rng, n, right, 0, 0)
    out.append(Case(MARK + ": at the bound", args=(base, gold), kwargs={"at_most": right / n}, expected=(acc, True)))
    big = int(rng.integers(100, 201))
    base, gold, acc = _labels(rng, big, big - 1, 0, 0)
    out.append(Case(MARK + ": the rule, corrected by hand on one item", args=(base, gold), expected=(acc, False)))
    return out


def check_baseline_usable(fn: Callable) -> None:
    """Check ``baseline_usable(baseline, gold, at_most=0.98)``: ``(accuracy, usable)``."""
    run_cases(fn, _usable_cases() + drawn(_drawn_usable_cases), compare=_compare_usable,
              what="a baseline that is not the answer key", forbid=_STATS)


# --------------------------------------------------------------------------- Benjamini and Hochberg


def _bh_made(adjusted: np.ndarray, tie_at: int | None, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p-values made from increasing adjusted values: the i-th smallest of m is
    ``adjusted[i] * (i + 1) / m``. With ``tie_at = j`` (below m - 1), the j-th smallest is raised
    past what would give ``adjusted[j + 1]``, so the minimum from above gives it ``adjusted[j + 1]``."""
    m = len(adjusted)
    rank = np.arange(1, m + 1)
    p = adjusted * rank / m
    want = adjusted.copy()
    if tie_at is not None:
        j = tie_at
        p[j] = adjusted[j + 1] * (j + 1.5) / m  # between the tie and the next p
        want[j] = adjusted[j + 1]
    return p[order], want[order]


def _bh_cases() -> list[Case]:
    p, want = _bh_made(np.array([0.01, 0.02, 0.04]), None, np.array([1, 2, 0]))
    tie_p, tie_want = _bh_made(np.array([0.01, 0.03, 0.04, 0.05]), 1, np.array([3, 0, 2, 1]))
    big_p, big_want = _bh_made(np.array([0.02, 0.1, 0.2, 0.3, 0.6]), 2, np.array([4, 1, 3, 0, 2]))
    return [
        Case("one p-value", args=(np.array([0.2]),), expected=np.array([0.2])),
        Case("three p-values, in no order", args=(p,), expected=want,
             hint="the largest p-value stays as it is; return the values in the order given."),
        Case("a p-value that would come out above a larger one's", args=(tie_p,), expected=tie_want,
             hint="an adjusted p-value is never larger than that of a larger p-value."),
        Case("five p-values", args=(big_p,), expected=big_want, hidden=True),
    ]


def _drawn_bh_cases(rng: np.random.Generator) -> list[Case]:
    """4-7 p-values made from drawn increasing adjusted values, one raised so the minimum from above
    decides it, in a shuffled order (never the sorted one)."""
    m = int(rng.integers(4, 8))
    adjusted = np.sort(rng.uniform(0.001, 1.0, m))
    order = rng.permutation(m)
    if np.array_equal(order, np.arange(m)):
        order = order[::-1].copy()
    p, want = _bh_made(adjusted, int(rng.integers(0, m - 1)), order)
    return [Case(MARK + f": {m} p-values", args=(p,), expected=want)]


def check_benjamini_hochberg(fn: Callable) -> None:
    """Check ``benjamini_hochberg(pvalues)``: the adjusted p-values, in the order given."""
    run_cases(fn, _bh_cases() + drawn(_drawn_bh_cases),
              compare=lambda got, want: compare_arrays(got, want, atol=1e-12, rtol=1e-9),
              what="the false-discovery-rate adjustment", forbid=_STATS)
