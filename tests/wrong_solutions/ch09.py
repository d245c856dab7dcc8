"""Wrong solutions students really write for the exercises of chapter 08."""

from __future__ import annotations

import numpy as np

from headlab.analysis.detect import induction_score


def redundant_no_abs(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(np.mean(pair) - singles > margin * singles)


def redundant_at_least(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(np.mean(pair) - singles >= margin * abs(singles))


def redundant_per_input_any(single_a, single_b, pair, margin=0.1):
    singles = np.asarray(single_a) + np.asarray(single_b)
    return bool(np.any(np.asarray(pair) - singles > margin * np.abs(singles)))


def redundant_ratio(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(singles != 0 and np.mean(pair) / singles > 1 + margin) or (singles == 0 and np.mean(pair) > 0)


def orphans_mean(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm > 0) & (write_norm >= factor * np.mean(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_strict(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy > diffuse) & (write_norm > 0) & (write_norm > factor * np.median(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_any_write(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm >= factor * np.median(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_column_major(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm > 0) & (write_norm >= factor * np.median(write_norm))
    return [(int(a), int(b)) for b, a in zip(*np.nonzero(found.T))]


def _keep(effects, circuit_heads, backup_pairs, factor, score, bar):
    effects = np.asarray(effects, dtype=float)
    threshold = factor * bar(effects)
    keep = {(int(l), int(h)) for l, h in zip(*np.nonzero(score(effects) >= threshold))}
    keep |= {(int(l), int(h)) for l, h in circuit_heads}
    for removed, backup in backup_pairs:
        keep |= {tuple(map(int, removed)), tuple(map(int, backup))}
    return sorted(keep)


def keep_by_mean(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, backup_pairs, factor, lambda e: e.mean(-1), lambda e: e.mean(-1).max())


def keep_abs(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, backup_pairs, factor, lambda e: np.abs(e).max(-1),
                 lambda e: np.abs(e).mean(-1).max())


def keep_no_backups(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, [], factor, lambda e: e.max(-1), lambda e: e.mean(-1).max())


def keep_per_layer_mean(effects, circuit_heads, backup_pairs, factor=1.0):
    effects = np.asarray(effects, dtype=float)
    bars = effects.mean(-1).max(axis=1, keepdims=True)
    keep = {(int(l), int(h)) for l, h in zip(*np.nonzero(effects.max(-1) >= factor * bars))}
    keep |= {(int(l), int(h)) for l, h in circuit_heads}
    for removed, backup in backup_pairs:
        keep |= {tuple(map(int, removed)), tuple(map(int, backup))}
    return sorted(keep)


def _drop(hm, prev_head, induction_head, batch, mode="zero", mask=True, first_only=False):
    layer, head = induction_head
    inputs = batch if mask else batch["input_ids"]

    def score():
        _, cache = hm.run_with_cache(inputs, names=("pattern",))
        per_input = induction_score(cache.pattern(layer), batch["input_ids"],
                                    batch["attention_mask"] if mask else None)
        return float(per_input[0, head] if first_only else per_input[:, head].mean())

    clean = score()
    kwargs = {"mode": "mean", "reference": batch} if mode == "mean" else {}
    with hm.ablate([prev_head], **kwargs):
        ablated = score()
    return clean - ablated


def drop_mean_ablation(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, mode="mean")


def drop_no_mask(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, mask=False)


def drop_first_input(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, first_only=True)


def drop_absolute(hm, prev_head, induction_head, batch):
    return abs(_drop(hm, prev_head, induction_head, batch))


CATALOGUE: dict[str, list] = {
    "ex-09-redundant": [redundant_no_abs, redundant_at_least, redundant_per_input_any, redundant_ratio],
    "ex-09-orphans": [orphans_mean, orphans_strict, orphans_any_write, orphans_column_major],
    "ex-09-keep": [keep_by_mean, keep_abs, keep_no_backups, keep_per_layer_mean],
    "ex-09-circuit": [drop_mean_ablation, drop_no_mask, drop_first_input, drop_absolute],
}
