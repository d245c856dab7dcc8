"""The one table of no-effect bands, and the tests a verdict weighs (:mod:`deviating.verdicts`).

**Bands.** Every condition a claim row measures declares its kind of quantity (:data:`UNITS`): a
loss in nats, an accuracy or rate, an AUC, a share of a whole, a cosine distance, a rank
correlation, a count of heads or features, a ratio of costs. The kind is declared by the row
(``ClaimRow(unit=..., units={condition: kind})``); it is never guessed from the wording.
:data:`BANDS` gives, once for the whole book, the half-width of the band around a null inside
which an effect counts as none.

**Tests.** A condition is tested with a one-sided p-value in the direction the claim predicts:

- over training seeds (the unit for a claim about what training produces):
  :func:`across_seeds`, a one-sample t test on the per-seed effects (the same t as the
  interval :func:`headlab.stats.over_seeds` forms), or, when the seeds gave identical numbers
  (no spread to estimate), the exact sign test;
- on one network, from its interval: :func:`interval_pvalue`, which reads the standard error
  off the side of the interval that faces the null, with the interval's own quantile: Student
  t with the measurement's degrees of freedom when it was a t interval, the normal otherwise;
- "no effect" (an equivalence condition): :func:`equivalence_pvalue`, the two one-sided tests
  (TOST) against the band's two edges; its p-value is the larger of the two.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from headlab.stats import Estimate, TestResult, over_seeds

__all__ = ["UNITS", "BANDS", "MIN_SEEDS", "MIN_ITEMS", "band", "interval_pvalue", "across_seeds",
           "equivalence_pvalue"]

#: The kinds of quantity, with what they measure.
UNITS: dict[str, str] = {
    "nats": "a loss or a divergence, nats per token",
    "accuracy": "an accuracy, an error rate or a flip rate (a probability)",
    "auc": "an area under the ROC curve, or its distance from chance (0.5)",
    "share": "a share of a whole (of the heads, of a margin, of attention), or a Gini coefficient",
    "cosine": "a cosine similarity or distance (1 - cos)",
    "rank": "a rank correlation or a difference of two",
    "count": "a count of heads, features or matrix ranks",
    "ratio": "a ratio of two costs",
}

#: The one band table of the book, the half-width of the no-effect band around the null per kind.
BANDS: dict[str, float] = {
    "nats": 0.01,      # a hundredth of a nat per token
    "accuracy": 0.01,  # one answer in a hundred
    "auc": 0.05,       # an inspector that ranks a positive above a negative at most 55 times in 100
    "share": 0.01,     # one percent of the whole
    "cosine": 0.01,
    "rank": 0.05,      # a twentieth of a rank correlation
    "count": 0.5,      # less than one head or feature
    "ratio": 0.01,     # one percent of the cost
}

#: A claim about what training produces is judged over at least this many training seeds.
MIN_SEEDS = 3
#: Fewer items than this, with no degrees of freedom given, are too few for a normal or bootstrap
#: interval to be read as evidence (the same guard as ``headlab.stats.BCA_MIN_UNITS``).
MIN_ITEMS = 20


def band(unit: str, null: float) -> tuple[float, float]:
    """The no-effect band ``(null - w, null + w)`` of a kind of quantity, from :data:`BANDS`."""
    if unit not in BANDS:
        raise ValueError(f"unknown kind of quantity {unit!r}: the band table knows {', '.join(BANDS)}")
    w = BANDS[unit]
    return (null - w, null + w)


def _quantile(level: float, one_sided: bool, df: float | None) -> float:
    q = level if one_sided else 0.5 + level / 2
    return float(sps.norm.ppf(q) if df is None else sps.t.ppf(q, df))


def _sf(x: float, df: float | None) -> float:
    return float(sps.norm.sf(x) if df is None else sps.t.sf(x, df))


def interval_pvalue(effect: float, low: float, high: float, null: float, direction: str,
                    level: float = 0.95, df: float | None = None) -> float:
    """One-sided p-value for "the effect lies on the ``direction`` side of ``null``", from an interval.

    The standard error is read from the end of the interval that faces the null
    (``(effect - low) / q`` when testing "greater" from above), with ``q`` the interval's own
    quantile: Student t with ``df`` degrees of freedom for a t interval (``df = n - 1`` for a mean
    over n seeds), the normal when ``df`` is None (a bootstrap or normal interval over many
    items). Then ``p < (1 - level) / 2`` exactly when that end excludes the null.

    Raises:
        ValueError: for a zero-width interval (no standard error to read: use an exact bound),
            or ``df`` that is not positive.
    """
    if df is not None and not df > 0:
        raise ValueError(f"degrees of freedom must be positive; got {df!r}")
    sign = 1.0 if direction == "greater" else -1.0
    d = sign * (effect - null)  # > 0 when the effect lies on the predicted side
    toward, away = (effect - low, high - effect) if sign > 0 else (high - effect, effect - low)
    one_sided = math.isinf(low) or math.isinf(high)
    q = _quantile(level, one_sided, df)
    spread = toward if d >= 0 else away
    if math.isinf(spread):
        return 1.0 if d <= 0 else 0.5
    if spread <= 0:
        if math.isfinite(toward + away) and toward + away == 0:
            raise ValueError(f"a zero-width interval [{low:g}, {high:g}] has no standard error; give an exact "
                             "bound (headlab.stats.proportion) or the item-level interval")
        spread = max(toward, away)
    return _sf(d / (spread / q), df)


def across_seeds(values, null: float, direction: str, level: float = 0.95) -> tuple[Estimate, TestResult]:
    """The across-seed interval (Student t) and a one-sided test over the per-seed effects.

    The test is the one-sample t test (:func:`scipy.stats.ttest_1samp`) when the seeds differ,
    and the exact sign test (:func:`scipy.stats.binomtest`) when they gave the same number:
    three identical seeds on identical windows are one measurement, not three, and three positive
    seeds out of three give a sign-test p of 0.125.

    Raises:
        ValueError: with fewer than two seeds.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"a claim about training needs at least two seeds; got {x.size}")
    est = over_seeds(x, level=level)
    if np.ptp(x) == 0:
        hits = int(((x > null) if direction == "greater" else (x < null)).sum())
        res = sps.binomtest(hits, x.size, 0.5, alternative="greater")
        return est, TestResult(hits, float(res.pvalue), int(x.size), f"exact sign test, {hits} of {x.size} seeds",
                               direction)
    res = sps.ttest_1samp(x, null, alternative=direction)
    return est, TestResult(float(res.statistic), float(res.pvalue), int(x.size), f"t test over {x.size} seeds",
                           direction)


def equivalence_pvalue(edges: tuple[float, float], *, values=None, interval=None, level: float = 0.95,
                       df: float | None = None) -> float:
    """The TOST p-value for "the effect lies inside ``edges``" (two one-sided tests, the larger p).

    Give either ``values`` (per-seed effects: two one-sample t tests, :func:`scipy.stats.ttest_1samp`)
    or ``interval`` = ``(effect, low, high)`` (the p-values read from the interval, as
    :func:`interval_pvalue` reads them). ``p < (1 - level) / 2`` exactly when the interval lies
    inside the edges: a blind inspector (AUC 0.5 with a narrow interval) passes.
    """
    lo, hi = edges
    if values is not None:
        x = np.asarray(values, dtype=float)
        if np.ptp(x) == 0:  # identical seeds: no spread, no test (one measurement)
            return 1.0
        p_lo = sps.ttest_1samp(x, lo, alternative="greater").pvalue
        p_hi = sps.ttest_1samp(x, hi, alternative="less").pvalue
        return float(max(p_lo, p_hi))
    effect, low, high = interval
    return max(interval_pvalue(effect, low, high, lo, "greater", level, df),
               interval_pvalue(effect, low, high, hi, "less", level, df))
