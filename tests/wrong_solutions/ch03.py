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


CATALOGUE: dict[str, list] = {
    "ex-03-punctuation": [punct_all_queries, punct_max_not_sum, punct_not_causal, punct_first_key_only],
    "ex-03-sink": [sink_sharpest_entry, sink_last_layer, sink_first_layer, sink_wrong_axis],
    "ex-03-previous-token-lift": [lift_no_baseline, lift_one_over_n, lift_one_over_length, lift_includes_first_query,
                                  lift_on_the_token_itself, lift_ignores_mask, lift_mean_of_sequence_means,
                                  lift_library],
    "ex-03-offset-profile": [profile_counts_missing_keys, profile_forward_offsets, profile_off_by_one,
                             profile_ignores_mask, profile_library],
}
