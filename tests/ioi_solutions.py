"""The solutions of chapter 5b's exercises, kept here until the chapter notebook lands (then they live only
in the notebook and tests/test_exercises.py runs them from there; delete this file then)."""

from __future__ import annotations

import math
import numpy as np
import torch
from headlab.heads.ablation import Ablation


def ioi_logit_diff(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    at_end = logits[rows, end]  # (n, d_vocab): each prompt's logits at its own END
    return at_end[rows, io_id] - at_end[rows, s_id]


def abc_twins(tokens, s1, io, s2, name_ids, seed):
    g = torch.Generator().manual_seed(seed)
    out = tokens.clone()  # never change the clean prompts
    names = torch.as_tensor(name_ids)
    rows = torch.arange(len(tokens))
    for i in range(len(tokens)):
        a, b, c = names[torch.randperm(len(names), generator=g)[:3]]  # three different names
        out[i, s1[i]], out[i, io[i]], out[i, s2[i]] = a, b, c
    return out


def attention_between(patterns, query_pos, key_pos):
    rows = torch.arange(len(query_pos))
    # advanced indices on prompts, query and key: (n, n_layers, n_heads)
    return patterns[rows, :, :, query_pos, key_pos].mean(0)


def ioi_head_dla(hm, ids, end, io_id, s_id):
    readout = hm.readout()
    norm, W_U = readout.norm, readout.W_U
    rows = torch.arange(len(end))
    with torch.no_grad(), hm.capture(("z",)) as cache, hm.residual_stream() as stream:
        hm.forward(ids)
    final = stream[-1][rows, end]  # (n, d_model): the last stream at END
    scale = (final - final.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()
    u = (W_U[:, io_id] - W_U[:, s_id]).T * norm.weight  # (n, d_model): gamma * the answer direction
    out = torch.zeros(len(end), hm.n_layers, hm.n_heads)
    for l in range(hm.n_layers):
        z = cache.z(l)[rows, end]  # (n, head, d_head)
        for h in range(hm.n_heads):
            write = z[:, h] @ hm.W_O(l)[h]  # (n, d_model)
            write = write - write.mean(-1, keepdim=True)  # the LayerNorm centres first
            out[:, l, h] = (write / scale * u).sum(-1)
    return out


def path_patch_query(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    (ls, hs), (lr, hr) = sender, receiver
    with torch.no_grad(), hm.capture(("z",)) as cc, hm.residual_stream() as stream:
        hm.forward(clean)
    with torch.no_grad(), hm.capture(("z",)) as cr:
        hm.forward(corrupted)
    delta = (cr.z(ls)[:, :, hs] - cc.z(ls)[:, :, hs]) @ hm.W_O(ls)[hs]  # the sender's change, (n, pos, d_model)
    norm = hm.attn_norm(lr)
    x_clean, x_moved = norm(stream[lr]), norm(stream[lr] + delta)  # add, then normalise
    q = x_moved @ hm.W_Q(lr)[hr] + hm.b_Q(lr)[hr]  # only the query reads the change
    k = x_clean @ hm.W_K(lr)[hr] + hm.b_K(lr)[hr]
    v = x_clean @ hm.W_V(lr)[hr] + hm.b_V(lr)[hr]
    pos = clean.shape[1]
    scores = (q @ k.transpose(1, 2) / math.sqrt(hm.d_head)).masked_fill(~torch.ones(pos, pos, dtype=torch.bool).tril(),
                                                                       float("-inf"))
    z_new = scores.softmax(-1) @ v  # (n, pos, d_head)

    def put(layer, z):
        z = z.clone()
        z[:, :, hr] = z_new
        return z

    with torch.no_grad(), hm.patch_z(put, layers=[lr]):
        logits = hm.forward(clean)
    rows = torch.arange(len(end))
    return logits[rows, end, io_id] - logits[rows, end, s_id]


def backup_drop(hm, ids, end, io_id, s_id, removed):
    rows = torch.arange(len(end))
    with torch.no_grad():
        clean = hm.forward(ids)[rows, end]
        with hm.ablate(removed):
            ablated = hm.forward(ids)[rows, end]
    drop = (clean[rows, io_id] - clean[rows, s_id]) - (ablated[rows, io_id] - ablated[rows, s_id])
    dla = ioi_head_dla(hm, ids, end, io_id, s_id)  # measured on the clean run
    share = sum(dla[:, l, h] for l, h in removed)
    return torch.stack([drop, share], 1)


def circuit_faithfulness(hm, ids, end, io_id, s_id, circuit, kind, reference):
    keep = {tuple(h) for h in circuit}
    others = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads) if (l, h) not in keep]
    ablation = Ablation() if kind == "zero" else Ablation("mean", reference=reference)
    rows = torch.arange(len(end))
    with torch.no_grad():
        full = hm.forward(ids)[rows, end]
        with hm.ablate(others, ablation):
            alone = hm.forward(ids)[rows, end]
    diff = lambda x: x[rows, io_id] - x[rows, s_id]
    return float(diff(alone).mean() / diff(full).mean())
