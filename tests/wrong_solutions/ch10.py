"""Wrong solutions students really write for the exercises of chapter 10."""

from __future__ import annotations

import itertools

import numpy as np


# --------------------------------------------------------------------------- bootstrap_interval


def _boot(values, n_resamples, level, seed, *, size=None, replace=True, statistic=np.mean, tails=None):
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    k = len(values) if size is None else size(len(values))
    means = np.array([statistic(rng.choice(values, size=k, replace=replace)) for _ in range(n_resamples)])
    tail = (1 - level) / 2 if tails is None else tails
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(values.mean()), float(low), float(high)


def boot_values_not_means(values, n_resamples=2000, level=0.95, seed=0):
    """The interval of the values themselves, not of their mean."""
    values = np.asarray(values, dtype=float)
    tail = (1 - level) / 2
    return float(values.mean()), *(float(x) for x in np.quantile(values, [tail, 1 - tail]))


def boot_without_replacement(values, n_resamples=2000, level=0.95, seed=0):
    """Shuffles the values: every resample has the same mean."""
    return _boot(values, n_resamples, level, seed, replace=False)


def boot_fixed_90(values, n_resamples=2000, level=0.95, seed=0):
    """Always cuts 5% from each tail, whatever the level."""
    return _boot(values, n_resamples, level, seed, tails=0.05)


def boot_half_size(values, n_resamples=2000, level=0.95, seed=0):
    """Resamples half as many values as there are."""
    return _boot(values, n_resamples, level, seed, size=lambda n: n // 2)


def boot_one_tail(values, n_resamples=2000, level=0.95, seed=0):
    """Cuts the whole 1 - level from each tail."""
    return _boot(values, n_resamples, level, seed, tails=1 - level)


# --------------------------------------------------------------------------- verdict_of


def _verdict(effect, low, high, null, baseline, direction, band, *, use_band=True, sided=True, point=False,
             refuse=True, strict=True):
    if refuse and (not baseline or low == high):
        return "cannot be judged"
    sign = 1.0 if direction == "greater" else -1.0
    if not sided:
        sign = 1.0 if effect >= null else -1.0
    if point:
        low = high = effect
    near, far = sorted((sign * (low - null), sign * (high - null)))
    edge = band if use_band else 0.0
    if near > edge or (not strict and near >= edge and near > 0):
        return "holds"
    if near > 0:
        return "significant but inside the band"
    if far < 0 or (near > -band and far < band):
        return "does not hold here"
    return "inconclusive"


def verdict_no_band(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Holds as soon as the interval clears the null."""
    return _verdict(effect, low, high, null, baseline, direction, band, use_band=False)


def verdict_two_sided(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Takes the direction from the data, not from the claim."""
    return _verdict(effect, low, high, null, baseline, direction, band, sided=False)


def verdict_from_the_effect(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Judges the point estimate and ignores the interval."""
    return _verdict(effect, low, high, null, baseline, direction, band, point=True, refuse=False) \
        if baseline else "cannot be judged"


def verdict_without_baseline(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Judges a number that is compared with nothing."""
    return _verdict(effect, low, high, null, baseline, direction, band, refuse=False) if low != high \
        else "cannot be judged"


def verdict_touching_clears(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Counts an interval that touches the band's edge as clearing it."""
    return _verdict(effect, low, high, null, baseline, direction, band, strict=False)


def verdict_band_means_inconclusive(effect, low, high, null, baseline, direction="greater", band=0.0):
    """Calls an interval across the null but inside the band inconclusive."""
    got = _verdict(effect, low, high, null, baseline, direction, band)
    spans = low <= null <= high
    return "inconclusive" if got == "does not hold here" and spans else got


# --------------------------------------------------------------------------- sign_flip_pvalue


def _all_means(effects):
    effects = np.asarray(effects, dtype=float)
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(effects))))
    return effects.mean(), (signs * effects).mean(axis=1)


def flip_strictly_greater(effects):
    """Counts only assignments whose mean is strictly larger."""
    observed, means = _all_means(effects)
    return float(np.mean(means > observed + 1e-12 * abs(observed)))


def flip_two_sided(effects):
    """Counts assignments as extreme on either side."""
    observed, means = _all_means(effects)
    return float(np.mean(np.abs(means) >= abs(observed) - 1e-12 * abs(observed)))


def flip_sampled(effects):
    """Draws 9,999 random assignments instead of counting all of them."""
    effects = np.asarray(effects, dtype=float)
    signs = np.random.default_rng(0).choice([-1.0, 1.0], size=(9999, len(effects)))
    return float(np.mean((signs * effects).mean(axis=1) >= effects.mean() - 1e-12))


def flip_shuffle_values(effects):
    """Shuffles the seeds' values: the mean never changes, so p is 1."""
    effects = np.asarray(effects, dtype=float)
    rng = np.random.default_rng(0)
    means = np.array([rng.permutation(effects).mean() for _ in range(999)])
    return float(np.mean(means >= effects.mean() - 1e-12))


def flip_leaves_out_observed(effects):
    """Counts the other assignments only, out of 2**n - 1."""
    observed, means = _all_means(effects)
    return float((np.sum(means >= observed - 1e-12 * abs(observed)) - 1) / (len(means) - 1))


# --------------------------------------------------------------------------- holm


def _holm(pvalues, *, factor=lambda m, i: m - i, running=True, cap=True, unsort=True):
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p)
    adjusted = np.array([p[order][i] * factor(m, i) for i in range(m)])
    if running:
        adjusted = np.maximum.accumulate(adjusted)
    if cap:
        adjusted = np.minimum(adjusted, 1.0)
    if not unsort:
        return adjusted
    out = np.empty(m)
    out[order] = adjusted
    return out


def holm_bonferroni(pvalues):
    """Multiplies every p-value by m."""
    return _holm(pvalues, factor=lambda m, i: m)


def holm_no_running_max(pvalues):
    """Forgets that an adjusted p-value never falls below a smaller one's."""
    return _holm(pvalues, running=False)


def holm_sorted(pvalues):
    """Returns the adjusted values sorted, not in the order given."""
    return _holm(pvalues, unsort=False)


def holm_no_cap(pvalues):
    """Lets an adjusted p-value exceed 1."""
    return _holm(pvalues, cap=False)


def holm_off_by_one(pvalues):
    """Multiplies the i-th smallest by m - i + 1, counting i from 0."""
    return _holm(pvalues, factor=lambda m, i: m - i + 1)


# --------------------------------------------------------------------------- benjamini_hochberg


def _bh(pvalues, *, scale=lambda m, r: m / r, running=True, unsort=True, from_below=False):
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p)
    scaled = p[order] * scale(m, np.arange(1, m + 1))
    if running:
        scaled = np.maximum.accumulate(scaled) if from_below else np.minimum.accumulate(scaled[::-1])[::-1]
    adjusted = np.minimum(scaled, 1.0)
    if not unsort:
        return adjusted
    out = np.empty(m)
    out[order] = adjusted
    return out


def bh_no_running_min(pvalues):
    """Forgets that an adjusted p-value never exceeds a larger one's."""
    return _bh(pvalues, running=False)


def bh_running_max(pvalues):
    """Takes the running maximum from below, as Holm does."""
    return _bh(pvalues, from_below=True)


def bh_sorted(pvalues):
    """Returns the adjusted values sorted."""
    return _bh(pvalues, unsort=False)


def bh_rank_from_zero(pvalues):
    """Divides by the rank counted from 0 (the smallest then becomes infinite, capped at 1)."""
    return _bh(pvalues, scale=lambda m, r: m / np.maximum(r - 1, 1e-300))


def bh_bonferroni(pvalues):
    """Multiplies every p-value by m."""
    return _bh(pvalues, scale=lambda m, r: m + 0 * r)


# --------------------------------------------------------------------------- baseline_usable


def usable_counts_unlabelled(baseline, gold, at_most=0.98):
    """Divides by every item, labelled or not."""
    right = sum(b == g for b, g in zip(baseline, gold) if g is not None)
    accuracy = right / len(gold)
    return accuracy, accuracy <= at_most


def usable_skips_abstentions(baseline, gold, at_most=0.98):
    """Leaves out the items where the baseline says None."""
    scored = [(b, g) for b, g in zip(baseline, gold) if g is not None and b is not None]
    accuracy = sum(b == g for b, g in scored) / len(scored)
    return accuracy, accuracy <= at_most


def usable_strict_bound(baseline, gold, at_most=0.98):
    """Refuses a baseline exactly at the bound."""
    scored = [(b, g) for b, g in zip(baseline, gold) if g is not None]
    accuracy = sum(b == g for b, g in scored) / len(scored)
    return accuracy, accuracy < at_most


def usable_only_perfect_refused(baseline, gold, at_most=0.98):
    """Refuses only a baseline that is right on every item."""
    scored = [(b, g) for b, g in zip(baseline, gold) if g is not None]
    accuracy = sum(b == g for b, g in scored) / len(scored)
    return accuracy, accuracy < 1.0


CATALOGUE: dict[str, list] = {
    "ex-10-bootstrap": [boot_values_not_means, boot_without_replacement, boot_fixed_90, boot_half_size,
                        boot_one_tail],
    "ex-10-verdict": [verdict_no_band, verdict_two_sided, verdict_from_the_effect, verdict_without_baseline,
                      verdict_touching_clears, verdict_band_means_inconclusive],
    "ex-10-sign-flip": [flip_strictly_greater, flip_two_sided, flip_sampled, flip_shuffle_values,
                        flip_leaves_out_observed],
    "ex-10-holm": [holm_bonferroni, holm_no_running_max, holm_sorted, holm_no_cap, holm_off_by_one],
    "ex-10-fdr": [bh_no_running_min, bh_running_max, bh_sorted, bh_rank_from_zero, bh_bonferroni],
    "ex-10-answer-key": [usable_counts_unlabelled, usable_skips_abstentions, usable_strict_bound,
                         usable_only_perfect_refused],
}
