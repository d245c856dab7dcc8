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


CATALOGUE: dict[str, list] = {
    "ex-06-gate-importance": [gate_signed_mean, gate_abs_of_mean, gate_shared_over_batch, gate_ablation_effect],
    "ex-06-mean-ablation": [mean_ablation_in_place, mean_ablation_over_heads, mean_ablation_of_z, mean_ablation_zero],
    "ex-06-redundant-pair": [pair_largest_effect, pair_largest_abs, pair_ratio, pair_smallest, pair_one_single],
    "ex-06-gini": [gini_no_abs, gini_no_clip, gini_n_n_minus_1, gini_library],
    "ex-06-resample-ablation": [resample_mean, resample_other_head, resample_other_position, resample_first_position,
                                resample_own_batch, resample_in_place, resample_library],
}
