"""Wrong solutions students really write for the exercises of chapter 5's second part
(the indirect-object circuit)."""

from __future__ import annotations

import math

import torch

from headlab.heads.ablation import Ablation


# ------------------------------------------------------------------ the metric

def metric_last_position(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    return logits[rows, -1, io_id] - logits[rows, -1, s_id]


def metric_swapped(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    return logits[rows, end, s_id] - logits[rows, end, io_id]


def metric_mean(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    return (logits[rows, end, io_id] - logits[rows, end, s_id]).mean()


def metric_probabilities(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    p = logits[rows, end].softmax(-1)
    return p[rows, io_id] - p[rows, s_id]


def metric_one_past_end(logits, end, io_id, s_id):
    rows = torch.arange(len(end))
    at = (end + 1).clamp(max=logits.shape[1] - 1)
    return logits[rows, at, io_id] - logits[rows, at, s_id]


# ------------------------------------------------------------------ the ABC twins

def _twins(tokens, s1, io, s2, name_ids, seed, replace=True, slots=("s1", "io", "s2"), shift=0, inplace=False):
    g = torch.Generator().manual_seed(seed)
    out = tokens if inplace else tokens.clone()
    names = torch.as_tensor(name_ids)
    where = {"s1": s1, "io": io, "s2": s2}
    for i in range(len(tokens)):
        picks = (names[torch.randint(len(names), (3,), generator=g)] if replace
                 else names[torch.randperm(len(names), generator=g)[:3]])
        for name, pick in zip(("s1", "io", "s2"), picks):
            if name in slots:
                out[i, where[name][i] + shift] = pick
    return out


def abc_with_replacement(tokens, s1, io, s2, name_ids, seed):
    return _twins(tokens, s1, io, s2, name_ids, seed, replace=True)


def abc_io_only(tokens, s1, io, s2, name_ids, seed):
    return _twins(tokens, s1, io, s2, name_ids, seed, replace=False, slots=("io",))


def abc_one_position_late(tokens, s1, io, s2, name_ids, seed):
    return _twins(tokens, s1, io, s2, name_ids, seed, replace=False, shift=1)


def abc_in_place(tokens, s1, io, s2, name_ids, seed):
    return _twins(tokens, s1, io, s2, name_ids, seed, replace=False, inplace=True)


def abc_any_token(tokens, s1, io, s2, name_ids, seed):
    g = torch.Generator().manual_seed(seed)
    vocab = int(tokens.max()) + 1
    return _twins(tokens, s1, io, s2, torch.randperm(vocab, generator=g)[:10].tolist(), seed, replace=False)


# ------------------------------------------------------------------ attention between

def attention_swapped(patterns, query_pos, key_pos):
    rows = torch.arange(len(query_pos))
    return patterns[rows, :, :, key_pos, query_pos].mean(0)


def attention_max(patterns, query_pos, key_pos):
    rows = torch.arange(len(query_pos))
    return patterns[rows, :, :, query_pos, key_pos].max(0).values


def attention_first_prompt_positions(patterns, query_pos, key_pos):
    return patterns[:, :, :, int(query_pos[0]), int(key_pos[0])].mean(0)


def attention_last_query(patterns, query_pos, key_pos):
    rows = torch.arange(len(query_pos))
    return patterns[rows, :, :, -1, key_pos].mean(0)


# ------------------------------------------------------------------ direct logit attribution

def _dla(hm, ids, end, io_id, s_id, scale=True, centre=True, at_last=False, only_io=False, bias=False):
    readout = hm.readout()
    norm, W_U = readout.norm, readout.W_U
    rows = torch.arange(len(end))
    at = torch.full_like(end, ids.shape[1] - 1) if at_last else end
    with torch.no_grad(), hm.capture(("z",)) as cache, hm.residual_stream() as stream:
        hm.forward(ids)
    final = stream[-1][rows, at]
    sd = (final - final.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt() if scale else 1.0
    u = (W_U[:, io_id] - (0 if only_io else W_U[:, s_id])).T * norm.weight
    out = torch.zeros(len(end), hm.n_layers, hm.n_heads)
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            w = cache.z(l)[rows, at, h] @ hm.W_O(l)[h] + (hm.b_O(l) if bias else 0)
            w = w - w.mean(-1, keepdim=True) if centre else w
            out[:, l, h] = (w / sd * u).sum(-1)
    return out


def dla_no_scale(hm, ids, end, io_id, s_id):
    return _dla(hm, ids, end, io_id, s_id, scale=False)


def dla_not_centred(hm, ids, end, io_id, s_id):
    return _dla(hm, ids, end, io_id, s_id, centre=False)


def dla_last_position(hm, ids, end, io_id, s_id):
    return _dla(hm, ids, end, io_id, s_id, at_last=True)


def dla_io_only(hm, ids, end, io_id, s_id):
    return _dla(hm, ids, end, io_id, s_id, only_io=True)


def dla_with_bias(hm, ids, end, io_id, s_id):
    return _dla(hm, ids, end, io_id, s_id, bias=True)


# ------------------------------------------------------------------ path patching into a query

def _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, inputs="q", after_norm=False, whole=False,
          at_last=False):
    (ls, hs), (lr, hr) = sender, receiver
    with torch.no_grad(), hm.capture(("z",)) as cc, hm.residual_stream() as stream:
        hm.forward(clean)
    with torch.no_grad(), hm.capture(("z",)) as cr, hm.residual_stream() as other:
        hm.forward(corrupted)
    delta = other[lr] - stream[lr] if whole else (cr.z(ls)[:, :, hs] - cc.z(ls)[:, :, hs]) @ hm.W_O(ls)[hs]
    norm = hm.attn_norm(lr)
    x_clean = norm(stream[lr])
    x_moved = x_clean + delta if after_norm else norm(stream[lr] + delta)
    q, k, v = ((x_moved if c in inputs else x_clean) @ getattr(hm, f"W_{c.upper()}")(lr)[hr]
               + getattr(hm, f"b_{c.upper()}")(lr)[hr] for c in "qkv")
    pos = clean.shape[1]
    scores = (q @ k.transpose(1, 2) / math.sqrt(hm.d_head)).masked_fill(
        ~torch.ones(pos, pos, dtype=torch.bool).tril(), float("-inf"))
    z_new = scores.softmax(-1) @ v

    def put(layer, z):
        z = z.clone()
        z[:, :, hr] = z_new
        return z

    with torch.no_grad(), hm.patch_z(put, layers=[lr]):
        logits = hm.forward(clean)
    rows = torch.arange(len(end))
    at = torch.full_like(end, pos - 1) if at_last else end
    return logits[rows, at, io_id] - logits[rows, at, s_id]


def path_all_inputs(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    return _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, inputs="qkv")


def path_key(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    return _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, inputs="k")


def path_after_norm(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    return _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, after_norm=True)


def path_whole_stream(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    return _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, whole=True)


def path_activation_patch(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    ls, hs = sender
    with torch.no_grad(), hm.capture(("z",)) as cr:
        hm.forward(corrupted)

    def put(layer, z):
        z = z.clone()
        z[:, :, hs] = cr.z(ls)[:, :, hs]
        return z

    with torch.no_grad(), hm.patch_z(put, layers=[ls]):
        logits = hm.forward(clean)
    rows = torch.arange(len(end))
    return logits[rows, end, io_id] - logits[rows, end, s_id]


def path_last_position(hm, clean, corrupted, sender, receiver, end, io_id, s_id):
    return _path(hm, clean, corrupted, sender, receiver, end, io_id, s_id, at_last=True)


# ------------------------------------------------------------------ the backup test

def _backup(hm, ids, end, io_id, s_id, removed, sign=1.0, share_on_ablated=False, first_only=False, every=False):
    rows = torch.arange(len(end))
    with torch.no_grad():
        clean = hm.forward(ids)[rows, end]
        with hm.ablate(removed):
            ablated = hm.forward(ids)[rows, end]
    diff = lambda x: x[rows, io_id] - x[rows, s_id]
    drop = sign * (diff(clean) - diff(ablated))
    if share_on_ablated:
        with hm.ablate(removed):
            dla = _dla(hm, ids, end, io_id, s_id)
    else:
        dla = _dla(hm, ids, end, io_id, s_id)
    heads = removed[:1] if first_only else removed
    share = dla.sum((1, 2)) if every else sum(dla[:, l, h] for l, h in heads)
    return torch.stack([drop, share], 1)


def backup_sign(hm, ids, end, io_id, s_id, removed):
    return _backup(hm, ids, end, io_id, s_id, removed, sign=-1.0)


def backup_share_after_ablation(hm, ids, end, io_id, s_id, removed):
    return _backup(hm, ids, end, io_id, s_id, removed, share_on_ablated=True)


def backup_first_head(hm, ids, end, io_id, s_id, removed):
    return _backup(hm, ids, end, io_id, s_id, removed, first_only=True)


def backup_every_head(hm, ids, end, io_id, s_id, removed):
    return _backup(hm, ids, end, io_id, s_id, removed, every=True)


# ------------------------------------------------------------------ faithfulness

def _faithful(hm, ids, end, io_id, s_id, circuit, kind, reference, invert=False, per_prompt=False, over_clean=False,
              difference=False):
    keep = {tuple(h) for h in circuit}
    heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    removed = [x for x in heads if (x in keep) == invert]
    ablation = Ablation() if kind == "zero" else Ablation("mean", reference=ids if over_clean else reference)
    rows = torch.arange(len(end))
    with torch.no_grad():
        full = hm.forward(ids)[rows, end]
        with hm.ablate(removed, ablation):
            alone = hm.forward(ids)[rows, end]
    a, f = alone[rows, io_id] - alone[rows, s_id], full[rows, io_id] - full[rows, s_id]
    if difference:
        return float(f.mean() - a.mean())
    return float((a / f).mean()) if per_prompt else float(a.mean() / f.mean())


def faithful_circuit_removed(hm, ids, end, io_id, s_id, circuit, kind, reference):
    return _faithful(hm, ids, end, io_id, s_id, circuit, kind, reference, invert=True)


def faithful_per_prompt_ratio(hm, ids, end, io_id, s_id, circuit, kind, reference):
    return _faithful(hm, ids, end, io_id, s_id, circuit, kind, reference, per_prompt=True)


def faithful_mean_over_clean(hm, ids, end, io_id, s_id, circuit, kind, reference):
    return _faithful(hm, ids, end, io_id, s_id, circuit, kind, reference, over_clean=True)


def faithful_difference(hm, ids, end, io_id, s_id, circuit, kind, reference):
    return _faithful(hm, ids, end, io_id, s_id, circuit, kind, reference, difference=True)


def faithful_always_zero(hm, ids, end, io_id, s_id, circuit, kind, reference):
    return _faithful(hm, ids, end, io_id, s_id, circuit, "zero", reference)


CATALOGUE: dict[str, list] = {
    "ex-05-ioi-metric": [metric_last_position, metric_swapped, metric_mean, metric_probabilities, metric_one_past_end],
    "ex-05-abc-twins": [abc_with_replacement, abc_io_only, abc_one_position_late, abc_in_place, abc_any_token],
    "ex-05-attention-between": [attention_swapped, attention_max, attention_first_prompt_positions,
                                attention_last_query],
    "ex-05-ioi-dla": [dla_no_scale, dla_not_centred, dla_last_position, dla_io_only, dla_with_bias],
    "ex-05-path-patch-query": [path_all_inputs, path_key, path_after_norm, path_whole_stream, path_activation_patch,
                               path_last_position],
    "ex-05-backup": [backup_sign, backup_share_after_ablation, backup_first_head, backup_every_head],
    "ex-05-faithfulness": [faithful_circuit_removed, faithful_per_prompt_ratio, faithful_mean_over_clean,
                           faithful_difference, faithful_always_zero],
}
