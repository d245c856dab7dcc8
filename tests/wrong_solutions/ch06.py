"""Wrong solutions students really write for the exercises of chapter 06."""

from __future__ import annotations

import contextlib

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


def pair_ratio(singles, pairs):
    """The mistake issue 39 found unrejected: the pair effect over the sum of the singles, not the difference."""
    return max(pairs, key=lambda ab: pairs[ab] / max(singles[ab[0]] + singles[ab[1]], 1e-12))


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


# --------------------------------------------------------------------------- gate_importance


def _gate_grads(model, input_ids, shared=False):
    import torch
    import torch.nn.functional as F

    n_layer, n_head = model.config.n_layer, model.config.n_head
    d_head = model.config.n_embd // n_head
    batch, pos = input_ids.shape
    gate = torch.ones(1 if shared else batch, n_layer, n_head, requires_grad=True)
    handles = []
    for layer in range(n_layer):
        def scale(module, args, layer=layer):
            z = args[0].view(batch, pos, n_head, d_head) * gate[:, layer, None, :, None]
            return (z.reshape(batch, pos, n_head * d_head),)
        handles.append(model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(scale))
    try:
        logits = model(input_ids=input_ids).logits
    finally:
        for h in handles:
            h.remove()
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:], reduction="none").mean(1)
    loss.sum().backward()
    return gate.grad


def gate_hooks_left(model, input_ids):
    """Right gradients, but the hooks stay on the model (the task says to remove them)."""
    import torch
    import torch.nn.functional as F

    n_layer, n_head = model.config.n_layer, model.config.n_head
    d_head = model.config.n_embd // n_head
    gate = torch.ones(*input_ids.shape[:1], n_layer, n_head, requires_grad=True)
    for layer in range(n_layer):
        def scale(module, args, layer=layer):
            z = args[0].unflatten(-1, (n_head, d_head)) * gate[:, layer, None, :, None]
            return (z.flatten(-2),)
        model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(scale)
    with torch.enable_grad():
        logits = model(input_ids=input_ids).logits
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:], reduction="none").mean(1)
        loss.sum().backward()
    return gate.grad.abs().mean(0).numpy()


def gate_signed_mean(model, input_ids):
    """The mean of the signed gradients: a head whose gradient changes sign across inputs looks idle."""
    return _gate_grads(model, input_ids).mean(0).numpy()


def gate_abs_of_mean(model, input_ids):
    """|mean gradient| instead of the mean of |gradient|."""
    return _gate_grads(model, input_ids).mean(0).abs().numpy()


def gate_shared_over_batch(model, input_ids):
    """One gate for the whole batch: the gradient of the summed loss, not each input's."""
    return _gate_grads(model, input_ids, shared=True)[0].abs().numpy()


def gate_ablation_effect(model, input_ids):
    """The zero-ablation effect (loss with the head removed minus clean) instead of the gradient."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    n_layer, n_head = model.config.n_layer, model.config.n_head
    d = model.config.n_embd // n_head

    def loss():
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), input_ids[:, 1:], reduction="none").mean(1)

    clean = loss()
    out = np.zeros((n_layer, n_head))
    for layer in range(n_layer):
        for head in range(n_head):
            def zero(module, args, head=head):
                z = args[0].clone()
                z[..., head * d:(head + 1) * d] = 0.0
                return (z,)
            h = model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(zero)
            try:
                out[layer, head] = float((loss() - clean).abs().mean())
            finally:
                h.remove()
    return out


def _resample(z, z_other, head, donor):
    out = np.array(z, dtype=float, copy=True)
    out[:, :, head, :] = donor
    return out


def resample_mean(z, z_other, head):
    return _resample(z, z_other, head, z_other[:, :, head, :].mean(axis=0))


def resample_other_head(z, z_other, head):
    return _resample(z, z_other, head, z_other[:, :, (head + 1) % z.shape[2], :])


def resample_other_position(z, z_other, head):
    return _resample(z, z_other, head, z_other[:, ::-1, head, :])


def resample_first_position(z, z_other, head):
    return _resample(z, z_other, head, z_other[:, :1, head, :])


def resample_own_batch(z, z_other, head):
    return _resample(z, z_other, head, z[::-1, :, head, :])


def resample_in_place(z, z_other, head):
    z[:, :, head, :] = z_other[:, :, head, :]
    return z


def resample_library(z, z_other, head):
    from headlab.heads.ablation import Ablation

    Ablation("resample", reference=["a text"])  # the library's own resampling
    return z


# --------------------------------------------------------------------------- top_k_share


def share_no_clip(effects, k):
    x = np.asarray(effects, dtype=float).ravel()
    return float(np.sort(x)[::-1][:k].sum() / x.sum())


def share_k_smallest(effects, k):
    x = np.clip(np.asarray(effects, dtype=float).ravel(), 0, None)
    return float(np.sort(x)[:k].sum() / x.sum())


def share_of_heads(effects, k):
    """The share of the *heads*, k / n, not of the effect."""
    return k / np.asarray(effects).size


def share_over_abs(effects, k):
    x = np.asarray(effects, dtype=float).ravel()
    return float(np.sort(np.clip(x, 0, None))[::-1][:k].sum() / np.abs(x).sum())


# --------------------------------------------------------------------------- attention_entropy


def _entropy(pattern, with_first=False, by_pos=False, raw=False, mean_pattern=False):
    p = np.asarray(pattern, dtype=float)
    if mean_pattern:  # the entropy of the average row, not the average of the rows' entropies
        p = np.broadcast_to(p.mean(-2, keepdims=True), p.shape) * np.tril(np.ones(p.shape[-2:]))
        p = p / p.sum(-1, keepdims=True)
    pos = p.shape[-1]
    h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)
    largest = np.full(pos, np.log(pos)) if by_pos else np.log(np.arange(1, pos + 1))
    ratio = h if raw else h / np.where(largest > 0, largest, 1.0)
    return ratio.mean(-1) if with_first else ratio[..., 1:].mean(-1)


def entropy_with_query_0(pattern):
    return _entropy(pattern, with_first=True)


def entropy_over_log_pos(pattern):
    """Divides every row by log(pos), not by the row's own largest entropy."""
    return _entropy(pattern, by_pos=True)


def entropy_not_normalised(pattern):
    return _entropy(pattern, raw=True)


def entropy_of_the_mean_row(pattern):
    return _entropy(pattern, mean_pattern=True)


# --------------------------------------------------------------------------- spearman_rho


def _pearson(x, y):
    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    return float(np.corrcoef(x, y)[0, 1])


def spearman_pearson(a, b):
    """Pearson's correlation of the values, not of their ranks."""
    return _pearson(a, b)


def spearman_ordinal_ranks(a, b):
    """Ranks without sharing ties."""
    def r(x):
        return np.argsort(np.argsort(np.asarray(x, float).ravel(), kind="stable"))
    return _pearson(r(a), r(b))


def spearman_argsort_once(a, b):
    """argsort gives the order, not the ranks."""
    return _pearson(np.argsort(np.asarray(a, float).ravel()), np.argsort(np.asarray(b, float).ravel()))


def spearman_tie_free_formula(a, b):
    """1 - 6 sum d^2 / (n (n^2 - 1)): exact only without ties."""
    x, y = np.asarray(a, float).ravel(), np.asarray(b, float).ravel()
    d = np.argsort(np.argsort(x)) - np.argsort(np.argsort(y))
    n = x.size
    return float(1 - 6 * (d ** 2).sum() / (n * (n ** 2 - 1)))


# --------------------------------------------------------------------------- layer_pair_effects


def _pair_effects(hm, input_ids, layer, minus_clean=True, sign=1.0, summed=False, ordered=False):
    import torch

    from headlab.metrics import next_token_loss

    def loss(heads=()):
        with torch.no_grad(), (hm.ablate(list(heads)) if heads else contextlib.nullcontext()):
            return float(next_token_loss(hm(input_ids), input_ids).mean())

    clean = loss() if minus_clean else 0.0
    heads = [(layer, h) for h in range(hm.n_heads)]
    singles = {h: sign * (loss([h]) - clean) for h in heads}
    pairs = {}
    for a in heads:
        for b in heads:
            if a == b or (not ordered and a > b):
                continue
            pairs[(a, b)] = singles[a] + singles[b] if summed else sign * (loss([a, b]) - clean)
    return singles, pairs


def pairs_ablated_loss(hm, input_ids, layer):
    """The ablated loss itself, not its increase over the clean loss."""
    return _pair_effects(hm, input_ids, layer, minus_clean=False)


def pairs_clean_minus_ablated(hm, input_ids, layer):
    return _pair_effects(hm, input_ids, layer, sign=-1.0)


def pairs_sum_of_singles(hm, input_ids, layer):
    """Never ablates two heads together: a pair's effect as the sum of its singles."""
    return _pair_effects(hm, input_ids, layer, summed=True)


def pairs_both_orders(hm, input_ids, layer):
    return _pair_effects(hm, input_ids, layer, ordered=True)


CATALOGUE: dict[str, list] = {
    "ex-06-gate-importance": [gate_hooks_left, gate_signed_mean, gate_abs_of_mean, gate_shared_over_batch, gate_ablation_effect],
    "ex-06-mean-ablation": [mean_ablation_in_place, mean_ablation_over_heads, mean_ablation_of_z, mean_ablation_zero],
    "ex-06-redundant-pair": [pair_largest_effect, pair_largest_abs, pair_ratio, pair_smallest, pair_one_single],
    "ex-06-gini": [gini_no_abs, gini_no_clip, gini_n_n_minus_1, gini_library],
    "ex-06-resample-ablation": [resample_mean, resample_other_head, resample_other_position, resample_first_position,
                                resample_own_batch, resample_in_place, resample_library],
    "ex-06-top-k-share": [share_no_clip, share_k_smallest, share_of_heads, share_over_abs],
    "ex-06-attention-entropy": [entropy_with_query_0, entropy_over_log_pos, entropy_not_normalised,
                                entropy_of_the_mean_row],
    "ex-06-spearman": [spearman_pearson, spearman_ordinal_ranks, spearman_argsort_once, spearman_tie_free_formula],
    "ex-06-layer-pairs": [pairs_ablated_loss, pairs_clean_minus_ablated, pairs_sum_of_singles, pairs_both_orders],
}
