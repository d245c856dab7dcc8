"""Wrong solutions students really write for chapter 5b's node attribution patching exercise."""

from __future__ import annotations

import torch


def _batch(ids):
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _corrupted_z(hm, corrupted):
    with torch.no_grad():
        _, cache = hm.run_with_cache(_batch(corrupted), names=("z",))
    return [cache.z(l) for l in range(hm.n_layers)]


def _grads(hm, ids, end, io_id, s_id, *, detach=False, at_last=False):
    """Each layer's z on ``ids`` and the gradient of the summed metric with respect to it."""
    kept = {}

    def keep(layer, z):
        if detach:  # a leaf per layer: cuts the graph between layers
            z = z.detach().requires_grad_(True)
        else:
            z.retain_grad()
        kept[layer] = z
        return z

    with hm.patch_z(keep):
        logits = hm(_batch(ids))
    rows = torch.arange(len(end))
    where = torch.full_like(end, ids.shape[1] - 1) if at_last else end
    (logits[rows, where, io_id] - logits[rows, where, s_id]).sum().backward()
    hm.model.zero_grad(set_to_none=True)
    return [kept[l].detach() for l in range(hm.n_layers)], [kept[l].grad for l in range(hm.n_layers)]


def _sum(delta_times_grad):
    return delta_times_grad.sum(dim=(1, 3))  # over positions and d_head: (n, heads)


def attribution_detached(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id, detach=True)
    zc = _corrupted_z(hm, corrupted)
    return torch.stack([_sum((zc[l] - z[l]) * g[l]) for l in range(hm.n_layers)], dim=1)


def attribution_sign(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id)
    zc = _corrupted_z(hm, corrupted)
    return torch.stack([_sum((z[l] - zc[l]) * g[l]) for l in range(hm.n_layers)], dim=1)


def attribution_corrupted_gradient(hm, clean, corrupted, end, io_id, s_id):
    zc, g = _grads(hm, corrupted, end, io_id, s_id)
    z, _ = _grads(hm, clean, end, io_id, s_id)
    return torch.stack([_sum((zc[l] - z[l]) * g[l]) for l in range(hm.n_layers)], dim=1)


def attribution_gradient_times_activation(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id)
    return torch.stack([_sum(z[l] * g[l]) for l in range(hm.n_layers)], dim=1)


def attribution_end_only(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id)
    zc = _corrupted_z(hm, corrupted)
    rows = torch.arange(len(end))
    return torch.stack([((zc[l] - z[l]) * g[l])[rows, end].sum(-1) for l in range(hm.n_layers)], dim=1)


def attribution_last_position(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id, at_last=True)
    zc = _corrupted_z(hm, corrupted)
    return torch.stack([_sum((zc[l] - z[l]) * g[l]) for l in range(hm.n_layers)], dim=1)


def attribution_exact_patching(hm, clean, corrupted, end, io_id, s_id):
    zc = _corrupted_z(hm, corrupted)
    rows = torch.arange(len(end))

    def metric(fn=None):
        with torch.no_grad():
            if fn is None:
                logits = hm(_batch(clean))
            else:
                with hm.patch_z(fn):
                    logits = hm(_batch(clean))
        return logits[rows, end, io_id] - logits[rows, end, s_id]

    base = metric()
    out = torch.zeros(len(end), hm.n_layers, hm.n_heads)
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            def swap(layer, z, l=l, h=h):
                if layer == l:
                    z = z.clone()
                    z[:, :, h] = zc[l][:, :, h]
                return z
            out[:, l, h] = metric(swap) - base
    return out


def attribution_absolute(hm, clean, corrupted, end, io_id, s_id):
    z, g = _grads(hm, clean, end, io_id, s_id)
    zc = _corrupted_z(hm, corrupted)
    return torch.stack([_sum((zc[l] - z[l]) * g[l]) for l in range(hm.n_layers)], dim=1).abs()


CATALOGUE: dict[str, list] = {
    "ex-05-node-attribution": [attribution_detached, attribution_sign, attribution_corrupted_gradient,
                                attribution_gradient_times_activation, attribution_end_only,
                                attribution_last_position, attribution_exact_patching, attribution_absolute],
}
