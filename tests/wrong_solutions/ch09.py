"""Wrong solutions students really write for the exercises of chapter 09."""

from __future__ import annotations

import numpy as np
import torch


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


def _weight(pattern, targets, attention_mask, *, eligible_only=True, mask=True, pooled=False, nan=True,
            reduce="sum"):
    real = attention_mask.bool() if mask else torch.ones(targets.shape[:2], dtype=torch.bool)
    eligible = (targets.any(-1) if eligible_only else torch.ones_like(real)) & real
    picked = pattern * targets[:, None].float()
    on = picked.sum(-1) if reduce == "sum" else picked.max(-1).values
    total = (on * eligible[:, None].float()).sum(-1)  # (batch, head)
    count = eligible.sum(-1, keepdim=True).float()
    if pooled:
        out = total.sum(0, keepdim=True) / count.sum().clamp(min=1)
        return out.expand_as(total).clone()
    out = total / count.clamp(min=1)
    return torch.where(count > 0, out, torch.full_like(out, float("nan"))) if nan else out


def weight_over_every_query(pattern, targets, attention_mask):
    return _weight(pattern, targets, attention_mask, eligible_only=False)


def weight_ignores_padding(pattern, targets, attention_mask):
    return _weight(pattern, targets, attention_mask, mask=False)


def weight_pooled_over_inputs(pattern, targets, attention_mask):
    return _weight(pattern, targets, attention_mask, pooled=True)


def weight_zero_for_no_target(pattern, targets, attention_mask):
    return _weight(pattern, targets, attention_mask, nan=False)


def weight_largest_target_only(pattern, targets, attention_mask):
    return _weight(pattern, targets, attention_mask, reduce="max")


# --------------------------------------------------------------------------- logit_lens


def _streams(hm, inputs, before=False):
    """The residual stream after each block (or before it: the embeddings, then each block's input)."""
    import contextlib

    import torch

    model = hm.model
    with torch.no_grad(), contextlib.ExitStack() as stack:
        seen = [stack.enter_context(hm.outputs_of(block)) for block in model.blocks]
        embed = stack.enter_context(hm.outputs_of(model.embed))
        pos = stack.enter_context(hm.outputs_of(model.pos_embed))
        hm(inputs)
    after = [s[0] for s in seen]
    return [embed[0] + pos[0]] + after[:-1] if before else after


def _read(hm, streams, norm=True, out="log-probs"):
    import torch

    model = hm.model
    with torch.no_grad():
        logits = [model.unembed(model.ln_final(x) if norm else x) for x in streams]
        if out == "log-probs":
            logits = [x.log_softmax(-1) for x in logits]
        elif out == "probs-axis":
            logits = [x.log_softmax(-2) for x in logits]
    return torch.stack(logits).numpy()


def lens_no_final_norm(hm, inputs):
    """Unembeds each stream without the final LayerNorm."""
    return _read(hm, _streams(hm, inputs), norm=False)


def lens_stream_before(hm, inputs):
    """Reads the stream before each layer: the embeddings first, the last layer's output never."""
    return _read(hm, _streams(hm, inputs, before=True))


def lens_logits(hm, inputs):
    """Returns the logits, not log-probabilities."""
    return _read(hm, _streams(hm, inputs), out="logits")


def lens_with_embeddings(hm, inputs):
    """Returns n_layers + 1 entries: the embeddings too."""
    streams = _streams(hm, inputs)
    return _read(hm, _streams(hm, inputs, before=True)[:1] + streams)


def lens_frozen_scale(hm, inputs):
    """Normalises every layer's stream with the final stream's LayerNorm scale."""
    import torch

    model = hm.model
    streams = _streams(hm, inputs)
    ln = model.ln_final
    scale = torch.sqrt(streams[-1].var(-1, unbiased=False, keepdim=True) + ln.eps)
    with torch.no_grad():
        normed = [(x - x.mean(-1, keepdim=True)) / scale * ln.weight + ln.bias for x in streams]
    return torch.stack([model.unembed(x).log_softmax(-1) for x in normed]).detach().numpy()


def lens_wrong_axis(hm, inputs):
    """Takes the log_softmax over the positions."""
    return _read(hm, _streams(hm, inputs), out="probs-axis")


CATALOGUE: dict[str, list] = {
    "ex-09-redundant": [redundant_no_abs, redundant_at_least, redundant_per_input_any, redundant_ratio],
    "ex-09-keep": [keep_by_mean, keep_abs, keep_no_backups, keep_per_layer_mean],
    "ex-09-detector": [weight_over_every_query, weight_ignores_padding, weight_pooled_over_inputs,
                       weight_zero_for_no_target, weight_largest_target_only],
    "ex-09-logit-lens": [lens_no_final_norm, lens_stream_before, lens_logits, lens_with_embeddings,
                         lens_frozen_scale, lens_wrong_axis],
}
