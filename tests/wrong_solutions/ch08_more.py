"""Wrong solutions students really write for chapter 8's builds (deviating.exercises.ch08_more)."""

from __future__ import annotations

import numpy as np
import torch


def _splice(hm, layer, inputs, z_hat, floor="zero", heads=None, score="mean", fraction="recovered",
            floor_layers=None):
    from headlab.metrics import next_token_loss

    def loss():
        with torch.no_grad():
            logits = hm(inputs)
        if score == "last":
            return float(-logits[:, -2].log_softmax(-1).gather(-1, inputs[:, -1:]).mean())
        return float(next_token_loss(logits, inputs, reduction="mean"))

    clean = loss()
    keep = list(range(hm.n_heads)) if heads is None else heads

    def patched(_, z):
        out = z.clone()
        out[:, :, keep] = z_hat.to(z)[:, :, keep]
        return out

    with hm.patch_z(patched, layers=[layer]):
        replaced = loss()
    if floor == "mean":
        with hm.patch_z(lambda _, z: z.mean((0, 1), keepdim=True).expand_as(z), layers=[layer]):
            low = loss()
    else:
        layers = [layer] if floor_layers is None else floor_layers(hm)
        with hm.ablate([(l, h) for l in layers for h in range(hm.n_heads)]):
            low = loss()
    frac = (low - replaced) / (low - clean) if fraction == "recovered" else (replaced - clean) / (low - clean)
    return clean, replaced, low, frac


def splice_mean_floor(hm, layer, inputs, z_hat):
    """The floor replaces z by its mean, not by zero."""
    return _splice(hm, layer, inputs, z_hat, floor="mean")


def splice_one_head(hm, layer, inputs, z_hat):
    """Replaces only head 0 of the layer."""
    return _splice(hm, layer, inputs, z_hat, heads=[0])


def splice_last_position(hm, layer, inputs, z_hat):
    return _splice(hm, layer, inputs, z_hat, score="last")


def splice_fraction_lost(hm, layer, inputs, z_hat):
    """The fraction of the gap *lost* (0 for a perfect splice), not recovered."""
    return _splice(hm, layer, inputs, z_hat, fraction="lost")


def splice_floor_every_layer(hm, layer, inputs, z_hat):
    """The floor removes every head of the model, not the layer's."""
    return _splice(hm, layer, inputs, z_hat, floor_layers=lambda hm: range(hm.n_layers))


def _own(W_dec, n_heads, power=2, interleaved=False, normalise="rows"):
    n_features, d_in = W_dec.shape
    w = W_dec.detach()
    blocks = w.reshape(n_features, -1, n_heads).transpose(1, 2) if interleaved else w.reshape(n_features, n_heads, -1)
    mass = blocks.abs().pow(power).sum(-1)
    if power == 1:
        mass = blocks.norm(dim=-1)
    if normalise == "rows":
        return mass / mass.sum(1, keepdim=True)
    if normalise == "columns":
        return mass / mass.sum(0, keepdim=True)
    return mass


def ownership_norm_not_squared(W_dec, n_heads):
    """Shares of the blocks' lengths, not of their squared lengths."""
    return _own(W_dec, n_heads, power=1)


def ownership_interleaved(W_dec, n_heads):
    """Reads column j as head j % n_heads (reshape to (d_head, n_heads))."""
    return _own(W_dec, n_heads, interleaved=True)


def ownership_unnormalised(W_dec, n_heads):
    return _own(W_dec, n_heads, normalise=None)


def ownership_over_features(W_dec, n_heads):
    """Normalises each head's column over the features instead of each feature's row."""
    return _own(W_dec, n_heads, normalise="columns")


def ownership_library(W_dec, n_heads):
    from deviating.analysis.sae.compare import head_ownership

    return head_ownership(W_dec, n_heads)


def _pairs(acts, positive, tie=0.5):
    a, pos = np.asarray(acts, dtype=float), np.asarray(positive, dtype=bool)
    p, n = a[pos], a[~pos]
    return (((p[:, None] > n[None]).sum((0, 1)) + tie * (p[:, None] == n[None]).sum((0, 1)))
            / (len(p) * len(n)))


def auroc_ties_lost(acts, positive):
    return _pairs(acts, positive, tie=0.0)


def auroc_ties_won(acts, positive):
    return _pairs(acts, positive, tie=1.0)


def auroc_folded(acts, positive):
    """max(A, 1 - A), as the chapter does for heads: a feature that marks the opposite is no detector."""
    auc = _pairs(acts, positive)
    return np.maximum(auc, 1 - auc)


def auroc_ordinal_ranks(acts, positive):
    """Ranks from a double argsort: tied values get different ranks."""
    a, pos = np.asarray(acts, dtype=float), np.asarray(positive, dtype=bool)
    ranks = a.argsort(0, kind="stable").argsort(0, kind="stable") + 1.0
    n_pos = pos.sum()
    return (ranks[pos].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * (len(pos) - n_pos))


def auroc_library(acts, positive):
    from deviating.analysis.sae.compare import auroc_table

    return auroc_table(torch.as_tensor(acts), {"x": (torch.as_tensor(positive), None)})["x"]


CATALOGUE: dict[str, list] = {
    "ex-08-splice": [splice_mean_floor, splice_one_head, splice_last_position, splice_fraction_lost,
                     splice_floor_every_layer],
    "ex-08-ownership": [ownership_norm_not_squared, ownership_interleaved, ownership_unnormalised,
                        ownership_over_features, ownership_library],
    "ex-08-auroc": [auroc_ties_lost, auroc_ties_won, auroc_folded, auroc_ordinal_ranks, auroc_library],
}
