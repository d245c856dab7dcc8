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


# --------------------------------------------------------------------------- selection_check


def _select(effects, select, measure, top_k, *, score=None, measure_on=None, choose_on=None, order=-1,
            per_layer=False):
    effects = np.asarray(effects, dtype=float)
    select, measure = np.asarray(select), np.asarray(measure)
    every = np.arange(effects.shape[-1])
    pick = select if choose_on is None else {"measure": measure, "all": every}[choose_on]
    held = measure if measure_on is None else every
    ranking = (effects[..., pick].mean(-1) if score is None else score(effects[..., pick])).ravel()
    if per_layer:
        heads = effects.shape[1]
        chosen = np.concatenate([l * heads + np.argsort(-ranking[l * heads:(l + 1) * heads])[:top_k]
                                 for l in range(effects.shape[0])])
    else:
        chosen = np.argsort(order * ranking, kind="stable")[:top_k]
    on_select = effects[..., pick].mean(-1).ravel()
    on_measure = effects[..., held].mean(-1).ravel()
    other = np.argsort(-effects[..., measure].mean(-1).ravel(), kind="stable")[:top_k]
    return {"in_sample": float(on_select[chosen].mean()), "held_out": float(on_measure[chosen].mean()),
            "agreement": len(set(chosen.tolist()) & set(other.tolist()))}


def selection_held_out_on_all(effects, select, measure, top_k):
    """Measures the chosen heads on every text, the choosing ones included."""
    return _select(effects, select, measure, top_k, measure_on="all")


def selection_by_worst_case(effects, select, measure, top_k):
    """Chooses the heads by their largest single effect, not their mean."""
    return _select(effects, select, measure, top_k, score=lambda e: e.max(-1))


def selection_chosen_on_measure(effects, select, measure, top_k):
    """Chooses the heads on the texts it then measures them on."""
    return _select(effects, select, measure, top_k, choose_on="measure")


def selection_smallest(effects, select, measure, top_k):
    """Sorts ascending: the top_k smallest effects."""
    return _select(effects, select, measure, top_k, order=1)


def selection_top_per_layer(effects, select, measure, top_k):
    """Chooses top_k heads in every layer."""
    return _select(effects, select, measure, top_k, per_layer=True)


# --------------------------------------------------------------------------- hidden_in_tail


def _tail(effects, mean_below, worst_above, *, mean=np.mean, strict_mean=True, strict_worst=True, absolute=False):
    effects = np.asarray(effects, dtype=float)
    if absolute:
        effects = np.abs(effects)
    m, w = mean(effects, axis=-1), effects.max(-1)
    small = m < mean_below if strict_mean else m <= mean_below
    large = w > worst_above if strict_worst else w >= worst_above
    return [(int(l), int(h)) for l, h in zip(*np.nonzero(small & large))]


def tail_mean_at_most(effects, mean_below, worst_above):
    """Keeps a head whose mean is exactly the bar."""
    return _tail(effects, mean_below, worst_above, strict_mean=False)


def tail_worst_at_least(effects, mean_below, worst_above):
    """Keeps a head whose worst case is exactly the bar."""
    return _tail(effects, mean_below, worst_above, strict_worst=False)


def tail_absolute(effects, mean_below, worst_above):
    """Takes absolute effects: a head whose removal helps looks like it matters."""
    return _tail(effects, mean_below, worst_above, absolute=True)


def tail_median(effects, mean_below, worst_above):
    """Uses the median for the typical effect."""
    return _tail(effects, mean_below, worst_above, mean=np.median)


CATALOGUE: dict[str, list] = {
    "ex-09-redundant": [redundant_no_abs, redundant_at_least, redundant_per_input_any, redundant_ratio],
    "ex-09-keep": [keep_by_mean, keep_abs, keep_no_backups, keep_per_layer_mean],
    "ex-09-detector": [weight_over_every_query, weight_ignores_padding, weight_pooled_over_inputs,
                       weight_zero_for_no_target, weight_largest_target_only],
    "ex-09-logit-lens": [lens_no_final_norm, lens_stream_before, lens_logits, lens_with_embeddings,
                         lens_frozen_scale, lens_wrong_axis],
    "ex-09-selection": [selection_held_out_on_all, selection_by_worst_case, selection_chosen_on_measure,
                        selection_smallest, selection_top_per_layer],
    "ex-09-tail": [tail_mean_at_most, tail_worst_at_least, tail_absolute, tail_median],
}
