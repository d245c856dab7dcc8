"""Confidence intervals: over items (bootstrap), over training seeds, and for a proportion.

The unit of resampling is the **item** (a sentence, a prompt), never the token: for
per-token values pass ``items`` and whole items are resampled.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from headlab.stats.results import Estimate, check_counts

__all__ = ["bootstrap_mean", "paired_difference", "over_seeds", "proportion", "exact", "BOOTSTRAP_METHODS",
           "BCA_MIN_UNITS"]

BOOTSTRAP_METHODS = ("BCa", "percentile", "basic")


def _vector(values, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per item or token); got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty: an interval needs at least two items")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{name} has a non-finite value at index {bad[0]} ({x[bad[0]]}): "
                         "drop or fix such items before computing an interval")
    return x


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), e.g. 0.95; got {level}")


def _item_sums(x: np.ndarray, items) -> tuple[np.ndarray, np.ndarray]:
    """Per-item sums and counts of ``x``, items in order of first appearance."""
    labels = np.asarray(items)
    if labels.shape != x.shape:
        raise ValueError(f"items must give one item id per value: {labels.shape} ids for {x.shape} values")
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first)  # keep items in the order they first appear
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    group = rank[inverse.reshape(-1)]
    sums = np.bincount(group, weights=x, minlength=order.size)
    counts = np.bincount(group, minlength=order.size).astype(float)
    return sums, counts


#: Fewest units (items) a BCa interval is computed on; below it the percentile interval is used.
BCA_MIN_UNITS = 20


def _scipy_bootstrap(data: tuple[np.ndarray, ...], statistic, *, level: float, n_resamples: int, seed: int,
                     method: str) -> tuple[float, float, str]:
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {BOOTSTRAP_METHODS}; got {method!r}")
    n_units = data[0].shape[-1]
    if method == "BCa" and n_units < BCA_MIN_UNITS:
        method = "percentile"  # BCa's acceleration is estimated by the jackknife: too noisy on few units
    used = method
    for attempt in (method, "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa warns on degenerate resamples; we fall back below
            res = sps.bootstrap(data, statistic, paired=len(data) > 1, vectorized=True, axis=-1,
                                confidence_level=level, n_resamples=n_resamples, method=attempt,
                                rng=np.random.default_rng(seed))
        low, high = (float(v) for v in res.confidence_interval)
        used = attempt
        if math.isfinite(low) and math.isfinite(high):
            break
    return low, high, used


def bootstrap_mean(values, items: Sequence | None = None, *, level: float = 0.95, n_resamples: int = 9999,
                   seed: int = 0, method: str = "BCa") -> Estimate:
    """The mean of ``values`` with a bootstrap interval that resamples items.

    Args:
        values: one number per item, or one per token when ``items`` is given.
        items: optional hashable item id per value; whole items are resampled (a cluster
            bootstrap of the mean over all values).
        method: ``"BCa"``, ``"percentile"`` or ``"basic"``, as in :func:`scipy.stats.bootstrap`.
            Below ``BCA_MIN_UNITS`` (20) items, or where BCa is undefined, the percentile
            interval is used and the result's ``method`` says so.

    Returns:
        An :class:`~headlab.stats.Estimate` whose ``n`` is the number of items. All 0 (or all
        1) values give the exact Clopper–Pearson bound; otherwise equal item means give zero width.

    Raises:
        ValueError: on fewer than two items, non-finite values, or mismatched ``items``.
    """
    _check_level(level)
    x = _vector(values, "values")
    if items is None:
        sums, counts = x, np.ones_like(x)
    else:
        sums, counts = _item_sums(x, items)
    n = sums.size
    if n < 2:
        raise ValueError(f"a bootstrap interval needs at least two items; got {n}")
    value = float(sums.sum() / counts.sum())
    per_item = sums / counts
    if np.ptp(per_item) == 0 and value in (0.0, 1.0) and np.isin(x, (0.0, 1.0)).all():
        # every 0/1 outcome the same: the exact (Clopper-Pearson) bound, not a zero-width bootstrap
        ci = sps.binomtest(int(value) * n, n).proportion_ci(confidence_level=level, method="exact")
        return Estimate(value, float(ci.low), float(ci.high), n, level,
                        f"exact (Clopper-Pearson): all {n} items {int(value)}")
    if np.ptp(per_item) == 0:  # every item has the same mean: no spread to resample
        return Estimate(value, value, value, n, level, f"all {n} items have the same mean (zero width)")
    if items is None:
        data: tuple[np.ndarray, ...] = (x,)

        def statistic(a, axis):
            return np.mean(a, axis=axis)
    else:
        data = (sums, counts)

        def statistic(s, c, axis):
            return np.sum(s, axis=axis) / np.sum(c, axis=axis)
    low, high, used = _scipy_bootstrap(data, statistic, level=level, n_resamples=n_resamples, seed=seed,
                                       method=method)
    return Estimate(value, low, high, n, level, f"{used} bootstrap over {n} items")


def paired_difference(a, b, items: Sequence | None = None, *, level: float = 0.95, n_resamples: int = 9999,
                      seed: int = 0, method: str = "BCa") -> Estimate:
    """Mean of ``a - b`` over paired measurements, with an interval that resamples items.

    Both members of a pair are resampled together. ``b`` is the baseline on the same items,
    in the same order; ``items`` and ``method`` are as in :func:`bootstrap_mean`.

    Returns:
        An :class:`~headlab.stats.Estimate` of the mean difference. 0/1 outcomes that agree on
        every item get the exact bound ``±u``, ``u`` the Clopper–Pearson upper end for 0
        discordant items of ``n`` (about ``3.7 / n`` at 95%).
    """
    x = _vector(a, "a")
    y = _vector(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a and b must be paired, one value each per item: got {x.size} and {y.size} values")
    d = x - y
    binary = bool(np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all())
    if binary and not d.any() and x.size >= 2:  # an exact tie: a bootstrap would give [0, 0]
        n = x.size if items is None else len(set(map(str, items)))
        _check_level(level)
        bound = float(sps.binomtest(0, n).proportion_ci(confidence_level=level, method="exact").high)
        return Estimate(0.0, -bound, bound, n, level,
                        f"exact tie: no discordant item of {n}, Clopper-Pearson bound on the discordant share")
    est = bootstrap_mean(d, items, level=level, n_resamples=n_resamples, seed=seed, method=method)
    return Estimate(est.value, est.low, est.high, est.n, est.level, f"paired {est.method}")


def over_seeds(values, *, level: float = 0.95) -> Estimate:
    """Mean over training seeds with a Student-t interval.

    ``mean ± t(k-1) · s / sqrt(k)`` over ``k >= 2`` seeds (a bootstrap of three seeds is
    meaningless; t(2) = 4.30). The result's ``n`` is the number of seeds.
    """
    _check_level(level)
    x = _vector(values, "values")
    k = x.size
    if k < 2:
        raise ValueError(f"an interval over training seeds needs at least two seeds; got {k}. "
                         "With one seed, report the item-level interval and the seed count")
    mean = float(x.mean())
    half = float(sps.t.ppf(0.5 + level / 2, k - 1) * x.std(ddof=1) / math.sqrt(k))
    return Estimate(mean, mean - half, mean + half, k, level, f"t interval over {k} seeds")


def proportion(successes: int, n: int, *, level: float = 0.95) -> Estimate:
    """A proportion ``successes / n`` with its exact (Clopper–Pearson) interval."""
    _check_level(level)
    k, total = check_counts(successes, n)
    ci = sps.binomtest(k, total).proportion_ci(confidence_level=level, method="exact")
    return Estimate(k / total, float(ci.low), float(ci.high), total, level,
                    f"exact (Clopper-Pearson) interval, {k} of {total}")


def exact(value: float, n: int, what: str, *, level: float = 0.95) -> Estimate:
    """An exact quantity (a count, a rank, an operation count) as an :class:`~headlab.stats.Estimate`.

    The interval is the point (``low == high == value``); ``n`` is how many units it was
    counted on (at least 1), ``what`` says what was counted (kept in ``method``, which starts
    with ``"exact"``).
    """
    _check_level(level)
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"an exact quantity must be a finite number; got {value!r} for {what!r}")
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be a positive count of the units counted; got {n!r} for {what!r}")
    return Estimate(v, v, v, int(n), level, f"exact: {what}" if what else "exact")
