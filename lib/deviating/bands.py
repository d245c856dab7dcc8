"""The one table of no-effect bands, and the evidence a verdict weighs (:mod:`deviating.verdicts`).

**Bands.** Every quantity a claim row measures is of one kind (:data:`UNITS`): a loss in nats,
an accuracy or rate, a share of a whole, a cosine distance, a rank correlation, a count of heads
or features, a ratio of costs. :data:`BANDS` gives, once for the whole book, the half-width of the
band around a null inside which an effect counts as none. An interval entirely inside it is
evidence of *no effect*, so a precise null result can give *does not hold here*.

**Evidence.** A condition is tested with a one-sided p-value in the direction the claim predicts:

- over training seeds (the unit for a claim about what training produces):
  :func:`across_seeds`, a one-sample t test on the per-seed effects, or, when the seeds gave
  identical numbers (no spread to estimate), the exact sign test;
- on one network, from its item-level interval: :func:`interval_pvalue`, the normal
  approximation that makes "p < (1 - level) / 2" the same statement as "the interval excludes
  the null" (the side of the interval facing the null sets the standard error).

Those p-values are corrected across a claim's conditions with Holm's step-down
(:func:`headlab.stats.holm`).
"""

from __future__ import annotations

import math
import re

import numpy as np
from scipy import stats as sps

from headlab.stats import Estimate, TestResult, over_seeds

__all__ = ["UNITS", "BANDS", "band", "unit_of", "interval_pvalue", "across_seeds"]

#: The kinds of quantity, with what they measure.
UNITS: dict[str, str] = {
    "nats": "a loss or a divergence, nats per token",
    "accuracy": "an accuracy, an error rate, a flip rate or an AUC (a probability)",
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
    "share": 0.01,     # one percent of the whole
    "cosine": 0.01,
    "rank": 0.05,      # a twentieth of a rank correlation
    "count": 0.5,      # less than one head or feature
    "ratio": 0.01,     # one percent of the cost
}

# What a quantity or condition text says about its kind: strong rules read the quantity first (a
# Gini of losses is a share, not nats); then the condition, then the quantity, by keyword.
_STRONG = (("rank gap", "rank"), ("rank correlation", "rank"), ("gini", "share"), ("heads removed", "count"),
           ("features", "count"), ("largest rank", "count"), ("cost with", "ratio"), ("tail share", "share"),
           ("share of heads", "share"), ("share of a task", "share"), ("share of the", "share"))
_WEAK = (("score lost", "share"), ("lift", "share"), ("weight", "share"), ("pattern change", "share"),
         ("accuracy", "accuracy"), ("error rate", "accuracy"), ("distractor", "accuracy"), ("flips", "accuracy"),
         ("auc", "accuracy"), ("margin", "accuracy"),
         ("1 - cos", "cosine"), ("cosine", "cosine"), ("similarity", "cosine"),
         ("nats", "nats"), ("loss", "nats"), ("kl", "nats"), ("divergence", "nats"), ("retrieval", "nats"),
         ("share", "share"), ("proportion", "share"), ("fraction", "share"))


def _find(rules, text: str) -> str | None:
    low = text.lower()
    for word, kind in rules:
        if re.search(rf"(?<![a-z]){re.escape(word)}", low):
            return kind
    return None


def unit_of(quantity: str, condition: str = "") -> str:
    """The kind of a quantity (a key of :data:`UNITS`), read from its wording and the condition's.

    A quantity whose text joins two kinds with ``;`` (``"share of ... lost; loss rise, nats"``) is
    read condition by condition.

    Raises:
        ValueError: when neither text names a kind; pass ``unit=`` to the claim row.
    """
    strong = None if ";" in quantity else _find(_STRONG, quantity)
    kind = strong or _find(_WEAK, condition) or _find(_WEAK, quantity)
    if kind is None:
        raise ValueError(f"cannot tell the kind of quantity of {quantity!r} (condition {condition!r}); pass unit= "
                         f"one of {', '.join(UNITS)}")
    return kind


def band(unit: str, null: float) -> tuple[float, float]:
    """The no-effect band ``(null - w, null + w)`` of a kind of quantity, from :data:`BANDS`."""
    if unit not in BANDS:
        raise ValueError(f"unknown kind of quantity {unit!r}: the band table knows {', '.join(BANDS)}")
    w = BANDS[unit]
    return (null - w, null + w)


def interval_pvalue(effect: float, low: float, high: float, null: float, direction: str,
                    level: float = 0.95) -> float:
    """One-sided p-value for "the effect lies on the ``direction`` side of ``null``", from an interval.

    The standard error is read from the end of the interval that faces the null
    (``(effect - low) / z`` when testing "greater" from above), with ``z`` the interval's own
    normal quantile (two-sided, or one-sided when the other end is infinite). Then
    ``p < (1 - level) / 2`` exactly when that end excludes the null, and the p-value can be
    Holm-corrected with other conditions'.

    Raises:
        ValueError: for a zero-width interval (no standard error to read: use an exact bound).
    """
    sign = 1.0 if direction == "greater" else -1.0
    d = sign * (effect - null)  # > 0 when the effect lies on the predicted side
    toward, away = (effect - low, high - effect) if sign > 0 else (high - effect, effect - low)
    one_sided = math.isinf(low) or math.isinf(high)
    z = sps.norm.ppf(level if one_sided else 0.5 + level / 2)
    spread = toward if d >= 0 else away
    if math.isinf(spread):
        return 1.0 if d <= 0 else 0.5
    if spread <= 0:
        if math.isfinite(toward + away) and toward + away == 0:
            raise ValueError(f"a zero-width interval [{low:g}, {high:g}] has no standard error; give an exact "
                             "bound (headlab.stats.proportion) or the item-level interval")
        spread = max(toward, away)
    return float(sps.norm.sf(d / (spread / z)))


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
