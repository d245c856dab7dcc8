"""Wrong solutions students really write for the exercises of chapter 05."""

from __future__ import annotations

import numpy as np


def mean_ablation_in_place(z, reference, head):
    z[:, :, head, :] = reference[:, head, :].mean(axis=0)
    return z


def mean_ablation_over_heads(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = reference.mean(axis=(0, 1))
    return out


def mean_ablation_of_z(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = z[:, :, head, :].mean(axis=(0, 1))
    return out


def mean_ablation_zero(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = 0.0
    return out


def pair_largest_effect(singles, pairs):
    return max(pairs, key=pairs.get)


def pair_largest_abs(singles, pairs):
    return max(pairs, key=lambda ab: abs(pairs[ab] - singles[ab[0]] - singles[ab[1]]))


def pair_smallest(singles, pairs):
    return min(pairs, key=lambda ab: pairs[ab] - singles[ab[0]] - singles[ab[1]])


def pair_one_single(singles, pairs):
    return max(pairs, key=lambda ab: pairs[ab] - singles[ab[0]])


def gini_no_abs(effects):
    x = np.clip(np.asarray(effects, dtype=float), 0, None)
    return float((x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean()))


def gini_no_clip(effects):
    x = np.asarray(effects, dtype=float)
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean()))


def gini_n_n_minus_1(effects):
    x = np.clip(np.asarray(effects, dtype=float), 0, None)
    n = x.size
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * n * (n - 1) * x.mean()))


def gini_library(effects):
    from headlab.stats import gini

    return gini(np.clip(np.asarray(effects, dtype=float), 0, None))


CATALOGUE: dict[str, list] = {
    "ex-06-mean-ablation": [mean_ablation_in_place, mean_ablation_over_heads, mean_ablation_of_z, mean_ablation_zero],
    "ex-06-redundant-pair": [pair_largest_effect, pair_largest_abs, pair_smallest, pair_one_single],
    "ex-06-gini": [gini_no_abs, gini_no_clip, gini_n_n_minus_1, gini_library],
}
