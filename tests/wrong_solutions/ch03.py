"""Wrong solutions students really write for the exercises of chapter 03."""

from __future__ import annotations

import numpy as np


def punct_all_queries(pattern, is_punct):
    return float(np.mean([pattern[i, : i + 1][is_punct[: i + 1]].sum() for i in range(len(is_punct))]))


def punct_max_not_sum(pattern, is_punct):
    w = [pattern[i, : i + 1][is_punct[: i + 1]].max() for i in range(len(is_punct)) if is_punct[: i + 1].any()]
    return float(np.mean(w))


def punct_not_causal(pattern, is_punct):
    return float(np.mean([pattern[i][is_punct].sum() for i in range(len(is_punct))]))


def punct_first_key_only(pattern, is_punct):
    first = int(np.argmax(is_punct))
    return float(np.mean([pattern[i, first] for i in range(first, len(is_punct))]))


def sink_sharpest_entry(patterns):
    return int(np.unravel_index(np.argmax(patterns), patterns.shape)[-1])


def sink_last_layer(patterns):
    return int(patterns[-1].sum(axis=(0, 1)).argmax())


def sink_first_layer(patterns):
    return int(patterns[0].sum(axis=(0, 1)).argmax())


def sink_wrong_axis(patterns):
    return int(patterns.sum(axis=(0, 1, 3)).argmax())


# --------------------------------------------------------------------------- previous_token_lift


def _lift(pattern, mask, *, key=-1, base="visible", first=False, use_mask=True, per_sequence=False):
    """The previous-token lift with one mistake switched on."""
    pattern, real = np.asarray(pattern, float), np.asarray(mask, bool)
    batch, _, pos, _ = pattern.shape
    if not use_mask:
        real = np.ones_like(real)
    rows, per = [], []
    for b in range(batch):
        mine = []
        for q in range(pos):
            if not real[b, q] or (not first and (q == 0 or not real[b, q - 1])):
                continue
            u = {"visible": 1.0 / real[b, : q + 1].sum(), "none": 0.0, "pos": 1.0 / pos,
                 "length": 1.0 / real[b].sum()}[base]
            mine.append(pattern[b, :, q, q + key] - u)
        rows += mine
        if mine:
            per.append(np.mean(mine, axis=0))
    return np.mean(per if per_sequence else rows, axis=0)


def lift_no_baseline(pattern, mask):
    return _lift(pattern, mask, base="none")


def lift_one_over_n(pattern, mask):
    return _lift(pattern, mask, base="pos")


def lift_one_over_length(pattern, mask):
    return _lift(pattern, mask, base="length")


def lift_includes_first_query(pattern, mask):
    return _lift(pattern, mask, first=True)


def lift_on_the_token_itself(pattern, mask):
    return _lift(pattern, mask, key=0)


def lift_ignores_mask(pattern, mask):
    return _lift(pattern, mask, use_mask=False)


def lift_mean_of_sequence_means(pattern, mask):
    return _lift(pattern, mask, per_sequence=True)


def lift_library(pattern, mask):
    import torch

    from headlab.analysis.detect import previous_token_score

    p, m = torch.as_tensor(pattern), torch.as_tensor(mask)
    return previous_token_score(p, m).mean(0).numpy()  # the library's score, with no baseline at all


# --------------------------------------------------------------------------- offset_profile


def _profile(pattern, mask, max_offset, *, sign=-1, shift=0, zeros=False, use_mask=True):
    pattern, real = np.asarray(pattern, float), np.asarray(mask, bool)
    batch, n_heads, pos, _ = pattern.shape
    if not use_mask:
        real = np.ones_like(real)
    cols = []
    for k in range(max_offset + 1):
        total, n = np.zeros(n_heads), 0
        for b in range(batch):
            for q in range(pos):
                j = q + sign * (k + shift)
                if not real[b, q]:
                    continue
                if 0 <= j < pos and real[b, j]:
                    total, n = total + pattern[b, :, q, j], n + 1
                elif zeros:
                    n += 1
        cols.append(total / max(n, 1))
    return np.stack(cols, axis=1)


def profile_counts_missing_keys(pattern, mask, max_offset):
    return _profile(pattern, mask, max_offset, zeros=True)


def profile_forward_offsets(pattern, mask, max_offset):
    return _profile(pattern, mask, max_offset, sign=+1)


def profile_off_by_one(pattern, mask, max_offset):
    return _profile(pattern, mask, max_offset, shift=1)


def profile_ignores_mask(pattern, mask, max_offset):
    return _profile(pattern, mask, max_offset, use_mask=False)


def profile_library(pattern, mask, max_offset):
    import torch

    from headlab.analysis.detect import offset_score

    p, m = torch.as_tensor(pattern), torch.as_tensor(mask)
    return torch.stack([offset_score(p, -k, m).mean(0) for k in range(max_offset + 1)], 1).numpy()


# --------------------------------------------------------------------------- key_mass


def _mass(pattern, keys, mask, *, rows="real", reduce="sum", per_sequence=False):
    pattern, keys, real = np.asarray(pattern, float), np.asarray(keys, bool), np.asarray(mask, bool)
    on = keys & real
    if reduce == "sum":
        per_row = (pattern * on[:, None, None, :]).sum(-1)
    elif reduce == "max":
        per_row = np.where(on[:, None, None, :], pattern, -np.inf).max(-1)
    else:
        per_row = (pattern * on[:, None, None, :]).sum(-1) / on.sum(-1)[:, None, None]
    counted = real if rows == "real" else np.ones_like(real)
    if per_sequence:
        return np.mean([(per_row[b] * counted[b]).sum(-1) / counted[b].sum() for b in range(len(real))], axis=0)
    return (per_row * counted[:, None, :]).sum(axis=(0, 2)) / counted.sum()


def mass_counts_padding_rows(pattern, keys, mask):
    return _mass(pattern, keys, mask, rows="all")


def mass_mean_of_sequence_means(pattern, keys, mask):
    return _mass(pattern, keys, mask, per_sequence=True)


def mass_largest_key(pattern, keys, mask):
    return _mass(pattern, keys, mask, reduce="max")


def mass_mean_over_keys(pattern, keys, mask):
    return _mass(pattern, keys, mask, reduce="mean")


def mass_library(pattern, keys, mask):
    import torch

    from headlab.analysis.detect import key_mass_score

    p, k, m = (torch.as_tensor(x) for x in (pattern, keys, mask))
    return key_mass_score(p, k, m, causal=False, queries="all").mean(0).numpy()


# --------------------------------------------------------------------------- choose_and_measure


def _choose(per_item, select, measure, *, on="select", by="mean", report="measure", ties="first", swap=False):
    per_item = np.asarray(per_item, float)
    chooser = per_item[select if on == "select" else measure]
    score = chooser.mean(0) if by == "mean" else chooser.max(0)
    flat = score.reshape(-1)
    i = int(np.argmax(flat)) if ties == "first" else len(flat) - 1 - int(np.argmax(flat[::-1]))
    layer, head = divmod(i, score.shape[1])
    rest = per_item[measure] if report == "measure" else per_item
    pair = (head, layer) if swap else (layer, head)
    return pair, float(per_item[select, layer, head].mean()), float(rest[:, layer, head].mean())


def choose_on_measure(per_item, select, measure):
    return _choose(per_item, select, measure, on="measure")


def choose_best_single_item(per_item, select, measure):
    return _choose(per_item, select, measure, by="max")


def choose_measures_on_all_items(per_item, select, measure):
    return _choose(per_item, select, measure, report="all")


def choose_last_of_ties(per_item, select, measure):
    return _choose(per_item, select, measure, ties="last")


def choose_head_layer_swapped(per_item, select, measure):
    return _choose(per_item, select, measure, swap=True)


# --------------------------------------------------------------------------- decoy_threshold


def threshold_interpolated(lifts, floor=0.4, level=0.99):
    values = np.asarray(lifts, float).ravel()
    return max(floor, float(np.quantile(values[np.isfinite(values)], level)))


def threshold_keeps_nan(lifts, floor=0.4, level=0.99):
    values = np.sort(np.asarray(lifts, float).ravel())  # NaN sorts last and counts
    return max(floor, float(values[int(np.ceil(level * values.size)) - 1]))


def threshold_no_floor(lifts, floor=0.4, level=0.99):
    values = np.asarray(lifts, float).ravel()
    return float(np.quantile(values[np.isfinite(values)], level, method="inverted_cdf"))


def threshold_min_with_floor(lifts, floor=0.4, level=0.99):
    values = np.asarray(lifts, float).ravel()
    return min(floor, float(np.quantile(values[np.isfinite(values)], level, method="inverted_cdf")))


def threshold_level_ignored(lifts, floor=0.4, level=0.99):
    values = np.asarray(lifts, float).ravel()
    return max(floor, float(np.quantile(values[np.isfinite(values)], 0.95, method="inverted_cdf")))


def threshold_library(lifts, floor=0.4, level=0.99):
    from headlab.stats.selection import null_threshold

    values = np.asarray(lifts, float).ravel()
    return max(floor, null_threshold(values[np.isfinite(values)], level=level))


# --------------------------------------------------------------------------- name_head


def name_strictly_above(lifts, threshold):
    defined = {k: v for k, v in lifts.items() if v == v}
    best = max(defined, key=defined.get)
    return best if defined[best] > threshold else "unnamed"


def name_nan_not_skipped(lifts, threshold):
    best = max(lifts, key=lifts.get)  # NaN compares False, so the order decides
    return best if lifts[best] >= threshold else "unnamed"


def name_always_best(lifts, threshold):
    defined = {k: v for k, v in lifts.items() if v == v}
    return max(defined, key=defined.get)


def name_largest_size(lifts, threshold):
    defined = {k: abs(v) for k, v in lifts.items() if v == v}
    best = max(defined, key=defined.get)
    return best if defined[best] >= threshold else "unnamed"


CATALOGUE: dict[str, list] = {
    "ex-03-punctuation": [punct_all_queries, punct_max_not_sum, punct_not_causal, punct_first_key_only],
    "ex-03-sink": [sink_sharpest_entry, sink_last_layer, sink_first_layer, sink_wrong_axis],
    "ex-03-previous-token-lift": [lift_no_baseline, lift_one_over_n, lift_one_over_length, lift_includes_first_query,
                                  lift_on_the_token_itself, lift_ignores_mask, lift_mean_of_sequence_means,
                                  lift_library],
    "ex-03-offset-profile": [profile_counts_missing_keys, profile_forward_offsets, profile_off_by_one,
                             profile_ignores_mask, profile_library],
    "ex-03-key-mass": [mass_counts_padding_rows, mass_mean_of_sequence_means, mass_largest_key,
                       mass_mean_over_keys, mass_library],
    "ex-03-choose-and-measure": [choose_on_measure, choose_best_single_item, choose_measures_on_all_items,
                                 choose_last_of_ties, choose_head_layer_swapped],
    "ex-03-decoy-threshold": [threshold_interpolated, threshold_keeps_nan, threshold_no_floor,
                              threshold_min_with_floor, threshold_level_ignored, threshold_library],
    "ex-03-name-head": [name_strictly_above, name_nan_not_skipped, name_always_best, name_largest_size],
}
