"""Checks for chapter 7's builds: head importance, first failures, a null of random subsets
(the pruning page), an exact McNemar test and an inspector's detection rate (the averaging and
triggers page)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_head_importance", "check_first_failure", "check_subset_null",
           "check_mcnemar_p", "check_detection_at_fpr"]

_ANALYSIS = ("headlab.analysis", "deviating.analysis", "headlab.stats", "deviating.exercises.by_hand")


# --------------------------------------------------------------------------- head importance


def _importance(hm, ids) -> np.ndarray:
    """Each head's mean-loss increase when it alone is zeroed, from runs by hand (float64)."""
    from deviating.exercises.by_hand import mean_loss, run_by_hand

    clean = mean_loss(run_by_hand(hm, ids), ids)
    cfg = hm.model.config
    return np.array([[mean_loss(run_by_hand(hm, ids, zero=[(l, h)]), ids) - clean for h in range(cfg.n_heads)]
                     for l in range(cfg.n_layers)])


def _importance_case(name, hm, ids, hint="", hidden=False) -> Case:
    return Case(name, args=(hm, ids), expected=_importance(hm, ids), hint=hint, hidden=hidden)


def check_head_importance(fn: Callable) -> None:
    """``fn(hm, inputs)``: ``(n_layers, n_heads)``, each head's increase of the mean next-token
    loss on ``inputs`` when it alone is zero-ablated. Expected values: runs by hand."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    g = torch.Generator().manual_seed(11)
    small, deep = tiny_gpt(seed=12), tiny_gpt(seed=13, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    wide = tiny_gpt(seed=14, n_layers=2, n_heads=3, d_model=24)
    cases = [
        _importance_case("a 2-layer model of 4 heads, three inputs", small, torch.randint(40, (3, 8), generator=g),
                         hint="for each head: the mean loss with that head zeroed, minus the mean loss of the "
                              "model as it is (positive: the head helps)."),
        _importance_case("3 layers of 2 heads with MLPs (the answer is (n_layers, n_heads) = (3, 2))", deep,
                         torch.randint(40, (2, 10), generator=g),
                         hint="remove one head at a time, and the mean is over every position of every input."),
        _importance_case("2 layers of 3 heads", wide, torch.randint(40, (2, 7), generator=g), hidden=True),
    ] + drawn(_drawn_importance_cases)
    run_cases(fn, cases, compare=lambda got, exp: compare_arrays(got, exp, atol=2e-4, rtol=1e-3),
              what="head importance", forbid=_ANALYSIS)


def _drawn_importance_cases(rng: np.random.Generator) -> list[Case]:
    """A random model of drawn size and weights, on drawn inputs."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    n_layers, n_heads = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    hm = tiny_gpt(seed=int(rng.integers(1000, 10**6)), n_layers=n_layers, n_heads=n_heads, d_model=24,
                  d_mlp=int(rng.choice([0, 32])))
    ids = torch.as_tensor(rng.integers(40, size=(2, int(rng.integers(6, 10)))))
    return [_importance_case(MARK + f": {n_layers} layers x {n_heads} heads", hm, ids)]


# --------------------------------------------------------------------------- the first failure


def check_first_failure(fn: Callable) -> None:
    """``fn(values, counts, tol, higher_is_better)``: the first count at which ``values`` has
    degraded by more than ``tol`` from ``values[0]``; ``counts[-1] + 1`` if it never does."""
    counts = [0, 4, 8, 12, 16]
    cases = [
        Case("a loss that rises: 2.00, 2.01, 2.04, 2.10, 2.30; tol 0.05", args=([2.0, 2.01, 2.04, 2.10, 2.30], counts,
                                                                               0.05, False), expected=12,
             hint="the loss fails where it exceeds its first value by more than tol: 2.10 - 2.00 > 0.05."),
        Case("an accuracy that falls: 0.90, 0.88, 0.80, 0.70, 0.60; tol 0.05", args=([0.9, 0.88, 0.8, 0.7, 0.6], counts,
                                                                                    0.05, True), expected=8,
             hint="for an accuracy, higher is better: it degrades when it falls."),
        Case("exactly the tolerance is still a pass: 1.0, 1.25, 1.5, 1.5, 1.75; tol 0.5",
             args=([1.0, 1.25, 1.5, 1.5, 1.75], counts, 0.5, False), expected=16,
             hint="'by more than tol' is '>', not '>='."),
        Case("a curve that never fails returns counts[-1] + 1", args=([0.5, 0.52, 0.51, 0.53, 0.54], counts, 0.05,
                                                                      False), expected=17,
             hint="one count past the last when no value degrades by more than tol."),
        Case("a curve that fails, recovers and fails again: the first failure counts",
             args=([0.0, 0.0, 0.25, 0.0, 0.25], [0, 1, 2, 3, 5], 0.125, False), expected=2,
             hint="return the count (counts[i]), not the index i, and the first one."),
        Case("a falling accuracy from a low start", args=([0.5, 0.5, 0.375, 0.25], [0, 2, 6, 9], 0.125, True),
             expected=9, hidden=True),
    ] + drawn(_drawn_first_failure_cases)
    run_cases(fn, cases, compare=lambda got, exp: compare_number(got, exp, atol=0, rtol=0),
              what="a first failure", forbid=_ANALYSIS)


def _drawn_first_failure_cases(rng: np.random.Generator) -> list[Case]:
    """Dyadic curves (no rounding at the tolerance) with a planted first failure: before it every
    value sits within tol of the start, the value at it exactly tol + 1/8 away, one earlier value
    exactly tol away; both directions; counts in steps of drawn size; then a curve that never fails."""
    cases = []
    for higher in (False, True):
        n = int(rng.integers(6, 10))
        counts = [0, *np.cumsum(rng.integers(1, 5, size=n - 1)).tolist()]
        tol, start = float(rng.choice([0.25, 0.5])), float(rng.integers(2, 8))
        at = int(rng.integers(3, n - 1))
        worse = rng.integers(0, int(tol * 8), size=n) / 8.0  # within tol before the failure
        worse[at - 1] = tol  # exactly tol: still a pass
        worse[at] = tol + 0.125
        worse[0] = 0.0
        values = start - worse if higher else start + worse
        cases.append(Case(MARK + f": {n} counts, tol {tol}", args=(values.tolist(), counts, tol, higher),
                          expected=counts[at]))
    calm = 3.0 + rng.integers(0, 4, size=int(rng.integers(4, 8))) / 8.0  # within 0.5 - 1/8 of the start
    counts = [0, *np.cumsum(rng.integers(1, 5, size=len(calm) - 1)).tolist()]
    cases.append(Case(MARK + ": a curve that never fails", args=(calm.tolist(), counts, 0.5, bool(rng.integers(2))),
                      expected=counts[-1] + 1))
    return cases


# --------------------------------------------------------------------------- random subsets


def _hypergeom_tail(n_items: int, n_bad: int, size: int, at_least: int) -> float:
    """P(at least ``at_least`` bad items in a random subset of ``size``, drawn without replacement)."""
    return sum(math.comb(n_bad, x) * math.comb(n_items - n_bad, size - x)
               for x in range(at_least, min(n_bad, size) + 1)) / math.comb(n_items, size)


def _binom_tail(n: int, p: float, at_least: int) -> float:
    return sum(math.comb(n, x) * p ** x * (1 - p) ** (n - x) for x in range(at_least, n + 1))


def _subset_case(name, n_items, n_bad, size, tol, offset, n_counts, n_draws, seed, hidden=False, hint=""):
    """``per_item``: a bad item steps by 1 at counts[1], a good one only at the last count (so every
    subset fails by then); all start at ``offset``. A subset's mean curve rises by bad / size at
    counts[1]: it fails there iff bad / size > tol, so the share is a hypergeometric tail."""
    per = np.full((n_items, n_counts), float(offset))
    per[:n_bad, 1:] += 1.0
    per[:, -1] += 1.0
    per = per[np.random.default_rng(seed).permutation(n_items)]
    counts = list(range(0, 2 * n_counts, 2))
    need = math.floor(tol * size) + 1  # bad items for bad / size > tol
    expected = _hypergeom_tail(n_items, n_bad, size, need)
    args = (per, size, counts, tol, counts[1], n_draws, np.random.default_rng(seed + 1))
    return Case(name, args=args, expected=expected, hidden=hidden, hint=hint)


def _share_compare(got, expected, args) -> str | None:
    """Within 4 standard errors of the exact share (plus 0.005), for ``n_draws`` draws."""
    n_draws = args[5]
    problem = compare_number(got, expected, atol=4 * math.sqrt(expected * (1 - expected) / n_draws) + 0.005, rtol=0)
    return problem and f"{problem} (the share of {n_draws} random draws, so only close to the exact value)"


def check_subset_null(fn: Callable) -> None:
    """``fn(per_item, size, counts, tol, own, n_draws, rng)``: the share of ``n_draws`` random subsets
    of ``size`` items (without replacement) whose mean curve fails (rises by more than ``tol``
    above its value at ``counts[0]``) at a count no later than ``own``."""
    cases = [
        _subset_case("10 items, 5 of them fail early; subsets of 8, tol exactly 0.5", 10, 5, 8, 0.5, 0.0, 5, 800, 2,
                     hint="draw each subset without replacement (rng.choice(n, size, replace=False)): with "
                          "replacement the share is a binomial tail; and a subset fails where its mean rises by "
                          "more than tol: 4 of 8 is not more than 0.5 ('>', not '>=')."),
        _subset_case("curves that start at 0.25, not 0", 12, 6, 6, 0.4, 0.25, 4, 800, 3,
                     hint="measure the rise from the subset's own value at counts[0], not from 0."),
        _subset_case("20 items, 6 fail early; subsets of 5", 20, 6, 5, 0.3, 0.125, 6, 800, 4, hidden=True),
    ]
    last = _subset_case("", 10, 5, 8, 0.55, 0.0, 5, 200, 5).args
    cases.insert(1, Case("own is the last count: every subset fails by then",
                         args=(*last[:4], last[2][-1], *last[5:]), expected=1.0,
                         hint="'no later than own' includes own itself: '<=', not '<'."))
    cases += drawn(_drawn_subset_cases)
    by_id = {id(c.expected): c.args for c in cases}
    run_cases(fn, cases, compare=lambda got, exp: _share_compare(got, exp, by_id[id(exp)]),
              what="a null of random subsets", forbid=_ANALYSIS)


def _drawn_subset_cases(rng: np.random.Generator) -> list[Case]:
    """Drawn sizes where the usual mistakes (with replacement, '>=' for '>', the rise from 0, a
    share of strictly earlier failures) are each at least 0.15 away from the exact share: with
    1,000 draws, more than 4 standard errors of both answers."""
    cases = []
    while not cases:
        size = int(rng.choice([4, 8]))  # dyadic means: no rounding at the tolerance
        n_items = int(rng.integers(size + 2, 17))
        n_bad = int(rng.integers(2, n_items - 1))
        tol = float(rng.integers(1, size)) / size  # tol * size whole: '>' and '>=' differ
        offset = 0.25
        need = math.floor(tol * size) + 1
        exact = _hypergeom_tail(n_items, n_bad, size, need)
        rivals = [_binom_tail(size, n_bad / n_items, need), _hypergeom_tail(n_items, n_bad, size, need - 1),
                  _hypergeom_tail(n_items, n_bad, size, max(math.floor((tol - offset) * size) + 1, 0)), 0.0]
        if not 0.15 <= exact <= 0.85 or min(abs(exact - r) for r in rivals) < 0.15:
            continue
        cases.append(_subset_case(MARK + f": {n_items} items, subsets of {size}", n_items, n_bad, size, tol, offset,
                                  int(rng.integers(4, 7)), 1000, int(rng.integers(10**6))))
    return cases


# --------------------------------------------------------------------------- an exact McNemar test


def _paired(a_only: int, b_only: int, both: int, neither: int, rng) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([True] * a_only + [False] * b_only + [True] * both + [False] * neither)
    b = np.array([False] * a_only + [True] * b_only + [True] * both + [False] * neither)
    order = rng.permutation(len(a))
    return a[order], b[order]


def _mcnemar_p(a_only: int, b_only: int) -> float:
    """By construction: the two-sided exact binomial p of the discordant pairs at one half."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, x) for x in range(min(a_only, b_only) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _mcnemar_case(name, counts, seed, hint="", hidden=False) -> Case:
    return Case(name, args=_paired(*counts, np.random.default_rng(seed)), expected=_mcnemar_p(*counts[:2]),
                hint=hint, hidden=hidden)


def check_mcnemar_p(fn: Callable) -> None:
    """``fn(a, b)``: ``a`` and ``b`` boolean ``(n,)`` outcomes of two methods on the same items; the
    two-sided p-value of the exact McNemar test (1.0 when no item is discordant)."""
    cases = [
        _mcnemar_case("9 discordant items, 8 of them for a; 20 concordant", (8, 1, 12, 8), 0,
                      hint="only the items where a and b differ count; under the null each goes either way with "
                           "probability one half. Two-sided: both tails."),
        _mcnemar_case("as many items for a as for b: p is 1, never more", (5, 5, 3, 3), 1,
                      hint="a two-sided p-value is at most 1: clip it."),
        _mcnemar_case("no discordant item at all", (0, 0, 6, 4), 2,
                      hint="with no discordant item there is no evidence either way: p = 1."),
        _mcnemar_case("12 for b, 2 for a, among 40 items", (2, 12, 16, 10), 3,
                      hint="the concordant items (both right, both wrong) do not enter the test."),
        _mcnemar_case("a small sample: 4 for a, 0 for b", (4, 0, 2, 1), 4,
                      hint="exact, not the chi-squared approximation: small counts are where they differ."),
        _mcnemar_case("30 items", (9, 3, 10, 8), 5, hidden=True),
    ] + drawn(_drawn_mcnemar_cases)
    run_cases(fn, cases, compare=lambda got, exp: compare_number(got, exp, atol=1e-9, rtol=1e-7),
              what="an exact McNemar test", forbid=("headlab.stats", "scipy.stats", "statsmodels"))


def _drawn_mcnemar_cases(rng: np.random.Generator) -> list[Case]:
    """One balanced case (p = 1 by construction) and two lopsided ones (p far below 1/2)."""
    k = int(rng.integers(3, 9))
    cases = [_mcnemar_case(MARK + ": balanced", (k, k, int(rng.integers(5, 15)), int(rng.integers(5, 15))),
                           int(rng.integers(10**6)))]
    for _ in range(2):
        small = int(rng.integers(1, 4))
        big = small + int(rng.integers(6, 12))
        counts = (big, small) if rng.integers(2) else (small, big)
        cases.append(_mcnemar_case(MARK + ": lopsided", (*counts, int(rng.integers(5, 20)), int(rng.integers(5, 20))),
                                   int(rng.integers(10**6))))
    return cases


# --------------------------------------------------------------------------- detection at a false-positive rate


def _detection(pos, neg, fpr) -> tuple[float, float]:
    """By construction: the AUC from every pair (ties one half), and the positives above the
    (allowed + 1)-th largest negative, allowed = floor(fpr * n_neg): the lowest threshold that
    flags at most ``allowed`` negatives."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    allowed = math.floor(fpr * len(neg) + 1e-9)
    threshold = np.sort(neg)[::-1][allowed]
    return float(above / (len(pos) * len(neg))), float((pos > threshold).mean())


def _compare_detection(got, expected) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (auc, tpr), got {type(got).__name__}"
    for name, g, e in zip(("auc", "tpr"), got, expected):
        problem = compare_number(g, e, atol=1e-9, rtol=1e-9)
        if problem:
            return f"{name}: {problem}"
    return None


def check_detection_at_fpr(fn: Callable) -> None:
    """``fn(positive, negative, fpr)``: ``(auc, tpr)``; the AUC counts ties one half; ``tpr`` is
    the share of positives strictly above the lowest threshold that flags at most ``fpr`` of the
    negatives (a negative is flagged when strictly above it)."""
    neg20 = np.arange(20, dtype=float)  # 0 .. 19
    cases = [
        Case("20 negatives 0..19, positives 18.5, 17.5, 3; fpr 0.05", args=([18.5, 17.5, 3.0], neg20, 0.05),
             expected=_detection([18.5, 17.5, 3.0], neg20, 0.05),
             hint="5% of 20 negatives is 1: the threshold is the second largest negative, 18; flag what lies "
                  "strictly above it."),
        Case("ties between a positive and negatives count one half in the AUC",
             args=([1.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0], 0.25), expected=_detection([1.0, 2.0, 2.0],
                                                                                      [0.0, 1.0, 2.0, 3.0], 0.25),
             hint="AUC: the share of (positive, negative) pairs where the positive scores higher, a tie counting "
                  "one half."),
        Case("tied negatives at the threshold: none of them may be flagged",
             args=([5.0, 4.0, 3.5], [4.0, 4.0, 4.0, 1.0, 0.0], 0.2),
             expected=_detection([5.0, 4.0, 3.5], [4.0, 4.0, 4.0, 1.0, 0.0], 0.2),
             hint="a threshold below 4 flags three negatives, more than 20% of five: it must be 4, and only "
                  "scores strictly above 4 are flagged."),
        Case("fpr 0.1 of 15 negatives is 1.5: at most one may be flagged",
             args=([14.5, 13.5, 12.8, 2.0], np.arange(15.0), 0.1),
             expected=_detection([14.5, 13.5, 12.8, 2.0], np.arange(15.0), 0.1),
             hint="'at most fpr of the negatives': round the allowed number down, and the threshold is one of the "
                  "negatives' own scores (no interpolation between them)."),
        Case("shuffled scores", args=([0.3, 0.9, 0.75, 0.1], [0.5, 0.2, 0.8, 0.35, 0.1, 0.6], 0.2),
             expected=_detection([0.3, 0.9, 0.75, 0.1], [0.5, 0.2, 0.8, 0.35, 0.1, 0.6], 0.2), hidden=True),
    ] + drawn(_drawn_detection_cases)
    run_cases(fn, cases, compare=_compare_detection, what="detection rate",
              forbid=("deviating.analysis", "headlab.stats", "sklearn"))


def _drawn_detection_cases(rng: np.random.Generator) -> list[Case]:
    """Distinct negatives on a grid of eighths; positives on it too, two of them tied with a
    negative and one exactly on the threshold; fpr * n_neg is never whole. So '>=', rounding
    and a tie-blind AUC each show."""
    cases = []
    for _ in range(2):
        n_neg = int(rng.integers(12, 25))
        neg = rng.choice(24, size=n_neg, replace=False) / 8.0  # distinct: the next threshold is lower
        allowed = int(rng.integers(1, 3))
        fpr = (allowed + 0.7) / n_neg  # not whole: rounding up or to the nearest flags one more
        threshold = np.sort(neg)[::-1][allowed]
        pos = np.concatenate([rng.integers(8, 32, size=int(rng.integers(4, 9))) / 8.0, [threshold], neg[:2]])
        pos = rng.permutation(pos)
        cases.append(Case(MARK + f": {len(pos)} positives, {n_neg} negatives, fpr {fpr:.3f}",
                          args=(pos, rng.permutation(neg), fpr), expected=_detection(pos, neg, fpr)))
    return cases
