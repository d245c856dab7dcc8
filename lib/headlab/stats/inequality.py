"""How unevenly the work is divided: the Gini coefficient of head importance, its bootstrap
interval over items, and the references a Gini must be compared with.

Compare a Gini with a **permutation null** (equally important heads, item noise only) and
with **reference distributions** (as many heads drawn from an exponential, a lognormal, ...).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats as sps

from headlab.stats.exact import empirical_pvalue
from headlab.stats.intervals import BCA_MIN_UNITS
from headlab.stats.results import Estimate, TestResult

__all__ = ["gini", "gini_interval", "gini_permutation_null", "gini_references", "REFERENCE_GINI"]

#: Population Gini of the reference distributions of :func:`gini_references`
#: (exponential: 1/2; uniform on [0, 1]: 1/3; lognormal with σ: 2Φ(σ/√2) − 1).
REFERENCE_GINI: dict[str, float] = {
    "uniform": 1 / 3,
    "exponential": 0.5,
    "lognormal sigma=1": 2 * sps.norm.cdf(1 / math.sqrt(2)) - 1,
    "lognormal sigma=2": 2 * sps.norm.cdf(2 / math.sqrt(2)) - 1,
}


def gini(values, axis: int = -1) -> np.ndarray | float:
    """Gini coefficient of non-negative values: 0 when all are equal, (n-1)/n when one holds all.

    ``G = sum_i sum_j |x_i - x_j| / (2 n^2 mean)``, along ``axis``: a float for
    one-dimensional input. Negative or non-finite values, or all zeros, raise ``ValueError``.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0 or x.shape[axis] == 0:
        raise ValueError("gini needs at least one value")
    if not np.isfinite(x).all():
        raise ValueError("gini needs finite values")
    if (x < 0).any():
        raise ValueError(f"gini needs non-negative values; found {x[x < 0].min():.4g}. Clip at 0 "
                         "(an ablation that helps counts as no importance) or use absolute effects, and say which")
    x = np.sort(np.moveaxis(x, axis, -1), axis=-1)
    n = x.shape[-1]
    total = x.sum(axis=-1)
    if (total == 0).any():
        raise ValueError("gini is undefined when every value is zero")
    i = np.arange(1, n + 1)
    g = 2 * (x * i).sum(axis=-1) / (n * total) - (n + 1) / n
    return float(g) if np.ndim(g) == 0 else g


def _effects(effects, clip_negative: bool) -> np.ndarray:
    e = np.asarray(effects, dtype=float)
    if e.ndim != 2 or e.shape[0] < 2 or e.shape[1] < 2:
        raise ValueError(f"effects must be (n_heads, n_items) with at least two of each; got shape {e.shape}")
    if not np.isfinite(e).all():
        raise ValueError("effects must be finite")
    if (e < 0).any():
        if not clip_negative:
            raise ValueError(f"effects has negative values (min {e.min():.4g}); pass clip_negative=True to "
                             "count them as zero importance, or pass absolute effects")
        e = np.clip(e, 0, None)
    return e


def gini_interval(effects, *, clip_negative: bool = False, level: float = 0.95, n_resamples: int = 9999,
                  seed: int = 0, batch: int = 200) -> Estimate:
    """Gini of the heads' mean effects, with a BCa bootstrap interval over items (percentile below
    ``BCA_MIN_UNITS`` items).

    Args:
        effects: ``(n_heads, n_items)``, each head's ablation effect on each item.
        clip_negative: count negative effects as zero instead of refusing them.
        batch: resamples computed at once (bounds memory).
    """
    e = _effects(effects, clip_negative)
    value = gini(e.mean(axis=1))

    def statistic(x, axis):
        # x is (n_heads, [resamples,] n_items): the heads stay on axis 0
        return gini(np.mean(x, axis=axis), axis=0)

    method = "BCa" if e.shape[1] >= BCA_MIN_UNITS else "percentile"  # no BCa on a handful of items
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.bootstrap((e,), statistic, vectorized=True, axis=-1, confidence_level=level,
                            n_resamples=n_resamples, batch=batch, method=method,
                            rng=np.random.default_rng(seed))
    low, high = (float(v) for v in res.confidence_interval)
    if not (math.isfinite(low) and math.isfinite(high)):
        boot = res.bootstrap_distribution
        low, high = (float(v) for v in np.quantile(boot, [(1 - level) / 2, (1 + level) / 2]))
        method = "percentile"
    n_items = e.shape[1]
    return Estimate(value, low, high, n_items, level, f"{method} bootstrap over {n_items} items")


def gini_permutation_null(effects, *, clip_negative: bool = False, n_resamples: int = 999,
                          seed: int = 0) -> TestResult:
    """Is the Gini larger than item noise would give if every head mattered equally?

    Within each item the effects are shuffled across heads; the observed Gini is compared
    with those draws by :func:`~headlab.stats.empirical_pvalue` ("greater"). ``details``
    holds the null's mean and 95th percentile.
    """
    e = _effects(effects, clip_negative)
    observed = gini(e.mean(axis=1))
    rng = np.random.default_rng(seed)
    null = np.empty(n_resamples)
    for r in range(n_resamples):
        null[r] = gini(rng.permuted(e, axis=0).mean(axis=1))
    res = empirical_pvalue(observed, null, alternative="greater")
    details = {**res.details, "null_q95": float(np.quantile(null, 0.95))}
    return TestResult(observed, res.pvalue, res.n, "permutation null (effects shuffled across heads per item)",
                      "greater", details)


def gini_references(n_heads: int, *, n_draws: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Estimate]:
    """Gini of ``n_heads`` values drawn from reference distributions.

    The sample Gini of few heads is biased low, so compare with this, not ``REFERENCE_GINI``.
    Returns, per distribution, the mean sample Gini and the central ``level`` band of
    ``n_draws`` draws.
    """
    if n_heads < 2:
        raise ValueError(f"n_heads must be at least 2; got {n_heads}")
    rng = np.random.default_rng(seed)
    draws = {
        "uniform": rng.uniform(0, 1, (n_draws, n_heads)),
        "exponential": rng.exponential(1.0, (n_draws, n_heads)),
        "lognormal sigma=1": rng.lognormal(0.0, 1.0, (n_draws, n_heads)),
        "lognormal sigma=2": rng.lognormal(0.0, 2.0, (n_draws, n_heads)),
    }
    out = {}
    for name, x in draws.items():
        g = gini(x, axis=-1)
        lo, hi = np.quantile(g, [(1 - level) / 2, (1 + level) / 2])
        out[name] = Estimate(float(g.mean()), float(lo), float(hi), n_draws, level,
                             f"{n_draws} draws of {n_heads} values ({name})")
    return out
