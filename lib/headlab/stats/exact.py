"""Tests: exact McNemar for paired accuracies, exact binomial and Fisher tests for
proportions, permutation tests, and p-values against a null computed by hand (e.g. the
effect of random triggers, or the score of heads in a shuffled model)."""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from headlab.stats.results import TestResult, check_counts

__all__ = ["ALTERNATIVES", "mcnemar", "binomial_test", "fisher", "permutation_test", "empirical_pvalue"]

ALTERNATIVES = ("two-sided", "greater", "less")


def _alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}; got {alternative!r}")
    return alternative


def _booleans(values, name: str) -> np.ndarray:
    x = np.asarray(values)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one outcome per item); got shape {x.shape}")
    if x.dtype != bool:
        if not np.isin(x, (0, 1)).all():
            raise ValueError(f"{name} must hold correct/incorrect outcomes (booleans or 0/1); "
                             f"found {x[~np.isin(x, (0, 1))][0]!r}")
        x = x.astype(bool)
    return x


def mcnemar(a_correct, b_correct, *, alternative: str = "two-sided") -> TestResult:
    """Exact McNemar test: are two methods equally accurate on the same items?

    The exact binomial test of ``a_only`` (``a`` right, ``b`` wrong) out of the discordant
    items at 0.5. ``alternative="greater"``: ``a`` is more accurate.

    Returns:
        A :class:`~headlab.stats.TestResult` whose statistic is ``(a_only - b_only) / n``;
        ``details`` holds the four counts.
    """
    _alternative(alternative)
    a = _booleans(a_correct, "a_correct")
    b = _booleans(b_correct, "b_correct")
    if a.shape != b.shape:
        raise ValueError(f"McNemar needs paired outcomes: got {a.size} and {b.size} items")
    if a.size == 0:
        raise ValueError("McNemar needs at least one item")
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else float(sps.binomtest(a_only, discordant, 0.5, alternative=alternative).pvalue)
    details = {"a_only": a_only, "b_only": b_only, "both": int(np.sum(a & b)), "neither": int(np.sum(~a & ~b))}
    return TestResult((a_only - b_only) / a.size, min(p, 1.0), int(a.size), "exact McNemar test", alternative,
                      details)


def binomial_test(successes: int, n: int, p0: float, *, alternative: str = "two-sided") -> TestResult:
    """Exact binomial test of ``successes / n`` (the statistic) against ``p0`` in [0, 1]."""
    _alternative(alternative)
    k, total = check_counts(successes, n)
    if not 0 <= p0 <= 1:
        raise ValueError(f"p0 must be a proportion in [0, 1]; got {p0}")
    res = sps.binomtest(k, total, p0, alternative=alternative)
    return TestResult(k / total, float(res.pvalue), total, f"exact binomial test against {p0:g}", alternative,
                      {"successes": k})


def fisher(successes_a: int, n_a: int, successes_b: int, n_b: int, *,
           alternative: str = "two-sided") -> TestResult:
    """Fisher's exact test: do two groups succeed at the same rate?

    The statistic is the sample odds ratio; ``details`` holds both rates.
    """
    _alternative(alternative)
    ka, na = check_counts(successes_a, n_a)
    kb, nb = check_counts(successes_b, n_b)
    res = sps.fisher_exact([[ka, na - ka], [kb, nb - kb]], alternative=alternative)
    return TestResult(float(res.statistic), float(res.pvalue), na + nb, "Fisher's exact test", alternative,
                      {"rate_a": ka / na, "rate_b": kb / nb})


def permutation_test(x, y, *, paired: bool = False, alternative: str = "two-sided", n_resamples: int = 9999,
                     seed: int = 0) -> TestResult:
    """Permutation test of a difference in means, ``mean(x) - mean(y)``.

    Unpaired: group labels are shuffled. Paired: each pair is swapped at random (signs
    flipped). Exact when every permutation fits in ``n_resamples``, as in
    :func:`scipy.stats.permutation_test`.
    """
    _alternative(alternative)
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.ndim != 1 or b.ndim != 1 or a.size == 0 or b.size == 0:
        raise ValueError(f"x and y must be non-empty one-dimensional arrays; got shapes {a.shape}, {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("x and y must be finite: drop or fix non-finite items first")
    if paired and a.shape != b.shape:
        raise ValueError(f"a paired test needs one y per x: got {a.size} and {b.size} values")

    def statistic(u, v, axis):
        return np.mean(u, axis=axis) - np.mean(v, axis=axis)

    res = sps.permutation_test((a, b), statistic, permutation_type="samples" if paired else "independent",
                               vectorized=True, n_resamples=n_resamples, alternative=alternative,
                               rng=np.random.default_rng(seed))
    kind = "paired" if paired else "two-sample"
    return TestResult(float(res.statistic), float(min(res.pvalue, 1.0)), int(a.size if paired else a.size + b.size),
                      f"{kind} permutation test of the mean difference", alternative,
                      {"n_null": int(np.size(res.null_distribution))})


def empirical_pvalue(observed: float, null, *, alternative: str = "greater") -> TestResult:
    """p-value of an observed value against a null distribution sampled by hand.

    ``(1 + #{null at least as extreme}) / (1 + len(null))`` (Phipson & Smyth, 2010), never
    zero. ``"two-sided"``: twice the smaller tail, capped at 1. ``details`` holds the null's
    mean and the share of null draws at least as large as ``observed``.
    """
    _alternative(alternative)
    z = np.asarray(null, dtype=float).ravel()
    if z.size == 0 or not np.isfinite(z).all():
        raise ValueError("null must hold at least one finite value")
    if not np.isfinite(observed):
        raise ValueError(f"observed must be finite; got {observed}")
    m = z.size
    upper = (1 + int(np.sum(z >= observed))) / (1 + m)
    lower = (1 + int(np.sum(z <= observed))) / (1 + m)
    p = {"greater": upper, "less": lower, "two-sided": min(1.0, 2 * min(upper, lower))}[alternative]
    return TestResult(float(observed), p, m, f"empirical p-value against {m} null draws", alternative,
                      {"null_mean": float(z.mean()), "share_null_at_least": float(np.mean(z >= observed))})
