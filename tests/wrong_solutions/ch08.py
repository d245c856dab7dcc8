"""Wrong solutions students really write for the exercises of chapter 07."""

from __future__ import annotations

import numpy as np
import torch


def topk_no_relu(pre, k):
    idx = pre.topk(k, dim=-1).indices
    return torch.zeros_like(pre).scatter(-1, idx, pre.gather(-1, idx))


def topk_wrong_dim(pre, k):
    if pre.dim() == 1:
        return torch.relu(torch.zeros_like(pre).scatter(-1, pre.topk(k).indices, pre.topk(k).values))
    idx = pre.topk(min(k, pre.shape[0]), dim=0).indices
    return torch.relu(torch.zeros_like(pre).scatter(0, idx, pre.gather(0, idx)))


def topk_smallest(pre, k):
    idx = pre.topk(k, dim=-1, largest=False).indices
    return torch.relu(torch.zeros_like(pre).scatter(-1, idx, pre.gather(-1, idx)))


def topk_values_only(pre, k):
    return torch.relu(pre.topk(k, dim=-1).values)


def recovered_complement(clean, replaced, floor):
    return (replaced - clean) / (floor - clean)


def recovered_clipped(clean, replaced, floor):
    return min(1.0, max(0.0, (floor - replaced) / (floor - clean)))


def recovered_inverted(clean, replaced, floor):
    """The fraction upside down: the gap the model leaves over the gap the splice leaves (numpy's
    division, as a student's array code would: inf, not an exception, where the splice is the floor)."""
    with np.errstate(divide="ignore"):
        return float(np.float64(floor - clean) / np.float64(floor - replaced))


def recovered_over_floor(clean, replaced, floor):
    return (floor - replaced) / floor


def match_abs(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    return (a @ b.T).abs().max(dim=1).values


def match_dot(dec_a, dec_b):
    return (dec_a @ dec_b.T).max(dim=1).values


def match_same_row(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    n = min(len(a), len(b))
    return torch.cat([(a[:n] * b[:n]).sum(dim=1), torch.zeros(len(a) - n)])


def match_over_b(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    return (a @ b.T).max(dim=0).values


def match_library(dec_a, dec_b):
    from deviating.analysis.sae.compare import match_features

    return match_features(dec_a, dec_b)


def _units(contributions, mass, sort=True, strict=True, per_row=True):
    c = np.asarray(contributions, dtype=float)
    if sort:
        c = -np.sort(-c, axis=1)
    cum = np.cumsum(c, axis=1)
    total = cum[:, -1:] if per_row else np.full((len(c), 1), cum[:, -1].mean())
    needed = ((cum < mass * total) if strict else (cum <= mass * total)).sum(axis=1) + 1
    return np.where(cum[:, -1] > 0, np.minimum(needed, c.shape[1]), 0)


def units_unsorted(contributions, mass):
    return _units(contributions, mass, sort=False)


def units_at_most(contributions, mass):
    return _units(contributions, mass, strict=False)


def units_global_total(contributions, mass):
    return _units(contributions, mass, per_row=False)


def units_zero_row_one(contributions, mass):
    c = -np.sort(-np.asarray(contributions, dtype=float), axis=1)
    cum = np.cumsum(c, axis=1)
    return (cum < mass * cum[:, -1:]).sum(axis=1) + 1


# --------------------------------------------------------------------------- sae_step


def _step(W_enc, b_enc, W_dec, b_dec, x, l1, lr, *, relu=True, mse="tokens", penalty="f", sign=1.0,
          normalise=1, loss_after=False):
    """One autograd SGD step of an L1 SAE, with one mistake switched on."""
    params = [p.detach().clone().requires_grad_(True) for p in (W_enc, b_enc, W_dec, b_dec)]
    we, be, wd, bd = params
    pre = x @ we + be
    f = torch.relu(pre) if relu else pre
    err = (x - (f @ wd + bd)).pow(2)
    loss = {"tokens": err.sum(1).mean(), "entries": torch.nn.functional.mse_loss(f @ wd + bd, x),
            "sum": err.sum()}[mse]
    loss = loss + (l1 * f.sum(1).mean() if penalty == "f" else l1 * (we.abs().sum() + wd.abs().sum()))
    loss.backward()
    with torch.no_grad():
        new = [p - sign * lr * p.grad for p in params]
        if normalise is not None:
            new[2] = new[2] / new[2].norm(dim=normalise, keepdim=True)
        if loss_after:
            f2 = torch.relu(x @ new[0] + new[1])
            loss = (x - (f2 @ new[2] + new[3])).pow(2).sum(1).mean() + l1 * f2.sum(1).mean()
    return (*new, float(loss.detach()))


def sae_no_relu(*args):
    return _step(*args, relu=False)


def sae_l1_on_weights(*args):
    return _step(*args, penalty="weights")


def sae_mse_loss_default(*args):
    return _step(*args, mse="entries")  # F.mse_loss averages over d_in too


def sae_sum_over_tokens(*args):
    return _step(*args, mse="sum")


def sae_gradient_ascent(*args):
    return _step(*args, sign=-1.0)


def sae_decoder_not_normalised(*args):
    return _step(*args, normalise=None)


def sae_decoder_columns_normalised(*args):
    return _step(*args, normalise=0)


def sae_loss_after_step(*args):
    return _step(*args, loss_after=True)


def sae_library(W_enc, b_enc, W_dec, b_dec, x, l1, lr):
    from deviating.analysis.sae.model import SAEConfig, SparseAutoencoder

    sae = SparseAutoencoder(SAEConfig(d_in=x.shape[1], n_features=W_enc.shape[1], sparsity="l1", l1_coeff=l1))
    return sae(x.float())  # the book's SAE class does the forward pass


CATALOGUE: dict[str, list] = {
    "ex-08-topk": [topk_no_relu, topk_wrong_dim, topk_smallest, topk_values_only],
    "ex-08-recovered": [recovered_complement, recovered_clipped, recovered_over_floor, recovered_inverted],
    "ex-08-match": [match_abs, match_dot, match_same_row, match_over_b, match_library],
    "ex-08-units": [units_unsorted, units_at_most, units_global_total, units_zero_row_one],
    "ex-08-sae-step": [sae_no_relu, sae_l1_on_weights, sae_mse_loss_default, sae_sum_over_tokens, sae_gradient_ascent,
                       sae_decoder_not_normalised, sae_decoder_columns_normalised, sae_loss_after_step, sae_library],
}
