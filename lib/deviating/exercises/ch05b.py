"""Checks for chapter 5's second part, "Who gave what to whom: a circuit of many heads".

Every known answer is built by construction or from a forward pass written out by hand
(:mod:`deviating.exercises.by_hand`) on small random GPTs: logits set entry by entry, patterns
whose weights are placed by hand, and the model run from its weights in float64 with heads
zeroed or replaced. No expected value comes from the head interface or from
:mod:`deviating.analysis.ioi`, which the student's function may not call.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, run_cases

__all__ = ["check_ioi_logit_diff", "check_abc_twins", "check_attention_between", "check_ioi_head_dla",
           "check_path_patch_query", "check_backup_drop", "check_circuit_faithfulness"]

_BY_HAND = "deviating.exercises.by_hand"
_TOOLS = ("headlab.analysis", "deviating.analysis", "deviating.data.ioi", _BY_HAND)


def _prompts(seed: int, n: int, pos: int, vocab: int = 40):
    """Random token ids ``(n, pos)`` and, per row, an END before the last position (so reading the last
    position is wrong), the IO and S token ids (distinct)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (n, pos), generator=g)
    end = pos - 1 - torch.randint(1, 3, (n,), generator=g)
    io = torch.randint(vocab, (n,), generator=g)
    s = (io + 1 + torch.randint(vocab - 1, (n,), generator=g)) % vocab
    return ids, end, io, s


def _metric(logits: torch.Tensor, end, io, s, at=None) -> torch.Tensor:
    rows = torch.arange(len(end))
    where = end if at is None else at
    return logits[rows, where, io] - logits[rows, where, s]


# ------------------------------------------------------------------------------ the metric


def check_ioi_logit_diff(fn: Callable) -> None:
    """Check ``fn(logits, end, io_id, s_id)``: per prompt, ``logit(IO) - logit(S)`` at the prompt's END."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 10, generator=g)
    end, io, s = torch.tensor([3, 5, 2]), torch.tensor([1, 4, 7]), torch.tensor([2, 0, 9])
    planted = torch.zeros(2, 5, 8)
    planted[0, 2, 3], planted[0, 2, 5], planted[0, 4, 5] = 2.0, -1.0, 7.0  # END = 2; a decoy at the last position
    planted[1, 3, 1], planted[1, 3, 6] = 0.5, 0.25
    cases = [
        Case("two prompts, logits set by hand: prompt 0 ends at position 2, prompt 1 at 3",
             args=(planted, torch.tensor([2, 3]), torch.tensor([3, 1]), torch.tensor([5, 6])),
             expected=np.array([3.0, 0.25]),
             hint="read each prompt's logits at its own END, not at the last position (padding follows END)."),
        Case("random logits, three prompts of different END", args=(logits, end, io, s),
             expected=_metric(logits, end, io, s).numpy(),
             hint="one value per prompt: logits[i, end[i], io[i]] - logits[i, end[i], s[i]]."),
        Case("the same logits, IO and S swapped", args=(logits, end, s, io),
             expected=_metric(logits, end, s, io).numpy(), hidden=True),
    ]
    run_cases(fn, cases, what="the indirect-object logit difference", forbid=_TOOLS)


# ----------------------------------------------------------------------- the ABC twins


def _abc_compare(got, spec) -> str | None:
    tokens, pos, names = spec["tokens"], spec["pos"], set(spec["names"])
    try:
        out = torch.as_tensor(np.asarray(got)).long()
    except (TypeError, ValueError):
        return f"expected a tensor of token ids, got {type(got).__name__}"
    if out.shape != tokens.shape:
        return f"wrong shape: expected {tuple(tokens.shape)} (the clean prompts' shape), got {tuple(out.shape)}"
    rows = torch.arange(len(tokens))
    keep = torch.ones_like(tokens, dtype=torch.bool)
    for p in pos:
        keep[rows, p] = False
    if not torch.equal(out[keep], tokens[keep]):
        return "a token outside the three name slots (S1, IO, S2) changed: only those three positions may change"
    slots = torch.stack([out[rows, p] for p in pos], 1)
    for i, row in enumerate(slots.tolist()):
        if not set(row) <= names:
            return f"prompt {i}: a slot holds {row}, not all drawn from the names given ({sorted(names)})"
        if len(set(row)) != 3:
            return (f"prompt {i}: the name slots hold {row}: the ABC twin needs three *different* names "
                    "(no name repeated, so the prompt no longer says who was mentioned twice)")
    return None


def check_abc_twins(fn: Callable) -> None:
    """Check ``fn(tokens, s1, io, s2, name_ids, seed)``: a new tensor, the clean prompts with the
    slots S1, IO and S2 of each row filled with three different names of ``name_ids``, nothing
    else changed, the input left as it was."""
    g = torch.Generator().manual_seed(1)
    names = [11, 12, 13, 14]
    tokens = torch.randint(20, 40, (40, 9), generator=g)
    s1, io = torch.tensor([2, 3] * 20), torch.tensor([3, 2] * 20)
    s2 = torch.full((40,), 6)
    tokens[torch.arange(40), s1] = tokens[torch.arange(40), s2] = 11
    tokens[torch.arange(40), io] = 12
    few = tokens[:4].clone()
    cases = [
        Case("40 prompts, S1 and IO in both orders, four names to draw from",
             args=(tokens, s1, io, s2, names, 0), expected={"tokens": tokens, "pos": (s1, io, s2), "names": names},
             hint="draw three distinct names per prompt (e.g. a random sample without replacement) and write "
                  "them at S1, IO and S2 of a copy of the tokens.", unchanged=True),
        Case("four prompts, exactly three names: every twin uses all three", args=(few, s1[:4], io[:4], s2[:4],
             names[:3], 5), expected={"tokens": few, "pos": (s1[:4], io[:4], s2[:4]), "names": names[:3]},
             hidden=True, unchanged=True),
    ]
    run_cases(fn, cases, compare=_abc_compare, what="the ABC twins of indirect-object prompts", forbid=_TOOLS)


# ------------------------------------------------------------------------ attention between


def check_attention_between(fn: Callable) -> None:
    """Check ``fn(patterns, query_pos, key_pos)``: each head's mean attention, over prompts, from
    ``query_pos[i]`` to ``key_pos[i]`` of prompt ``i``; ``patterns`` ``(n, n_layers, n_heads, pos, pos)``."""
    n, L, H, P = 3, 2, 2, 6
    pat = torch.tril(torch.ones(P, P)) / torch.arange(1, P + 1)[:, None]
    patterns = pat.expand(n, L, H, P, P).clone()
    q, k = torch.tensor([5, 4, 5]), torch.tensor([1, 2, 3])
    for i in range(n):
        patterns[i, 1, 0, q[i]] = 0.0
        patterns[i, 1, 0, q[i], k[i]] = 1.0  # head 1.0 attends from END to the name: 1
    patterns[0, 0, 1, q[0]] = 0.0
    patterns[0, 0, 1, q[0], k[0]] = 1.0  # head 0.1 does so in the first prompt only: 1/3 in all
    expected = torch.stack([patterns[i, :, :, q[i], k[i]] for i in range(n)]).mean(0)
    g = torch.Generator().manual_seed(2)
    rand = torch.rand(4, 3, 2, 7, 7, generator=g).tril()
    rand = rand / rand.sum(-1, keepdim=True)
    q2, k2 = torch.tensor([6, 5, 6, 4]), torch.tensor([2, 2, 0, 3])
    cases = [
        Case("three prompts, head 1.0 always on the name, head 0.1 in the first prompt only",
             args=(patterns, q, k), expected=expected.numpy(),
             hint="patterns[i, :, :, query_pos[i], key_pos[i]]: the query axis comes before the key axis; "
                  "then the mean over prompts."),
        Case("random causal patterns, 3 layers of 2 heads, four prompts", args=(rand, q2, k2),
             expected=torch.stack([rand[i, :, :, q2[i], k2[i]] for i in range(4)]).mean(0).numpy(), hidden=True),
    ]
    run_cases(fn, cases, what="attention between ground-truth positions", forbid=_TOOLS)


# ------------------------------------------------------------------ by hand: DLA, patches


def _w_o(hm, layer: int, head: int) -> torch.Tensor:
    d = hm.d_head
    return hm.model.blocks[layer].attn.W_O.weight.detach().double()[:, head * d:(head + 1) * d].T  # (d_head, d_model)


def _dla_by_hand(hm, run, end, io, s, centre=True, scale=True, at=None, only_io=False, bias=False):
    """``(n, n_layers, n_heads)``: each head's direct share of logit(IO) - logit(S) at END, from a run by hand."""
    model = hm.model
    gamma, eps = model.ln_final.weight.detach().double(), model.config.ln_eps
    W_U = model.unembed.weight.detach().double()  # (d_vocab, d_model)
    rows = torch.arange(len(end))
    where = end if at is None else at
    u = W_U[io] - (0 if only_io else W_U[s])  # (n, d_model)
    final = run.resid[-1][rows, where]
    sd = torch.sqrt(final.var(-1, unbiased=False) + eps)[:, None] if scale else torch.ones(len(end), 1)
    out = torch.zeros(len(end), hm.n_layers, hm.n_heads, dtype=torch.float64)
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            w = run.z[l][rows, where, h] @ _w_o(hm, l, h)
            if bias:
                w = w + model.blocks[l].attn.W_O.bias.detach().double()
            w = w - w.mean(-1, keepdim=True) if centre else w
            out[:, l, h] = ((w / sd) * gamma * u).sum(-1)
    return out


def _models():
    from deviating.exercises.by_hand import tiny_gpt

    return tiny_gpt(seed=11), tiny_gpt(seed=12, n_layers=3, n_heads=2, d_model=24, d_mlp=48)


def check_ioi_head_dla(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id)``: ``(n, n_layers, n_heads)``, each head's direct share
    of ``logit(IO) - logit(S)`` at each prompt's END, the final LayerNorm's scale frozen at the run's."""
    from deviating.exercises.by_hand import naming_compare, run_by_hand

    built = []
    for name, hm, seed, hidden in (("a 2-layer model of 4 heads, three prompts", _models()[0], 0, False),
                                   ("3 layers with MLPs, 2 heads each, four prompts", _models()[1], 1, False),
                                   ("the 2-layer model, other prompts", _models()[0], 2, True)):
        ids, end, io, s = _prompts(seed, 3 + seed % 2, 9)
        run = run_by_hand(hm, ids)
        last = torch.full_like(end, ids.shape[1] - 1)
        mistakes = {
            "the final LayerNorm's scale is missing: divide by sqrt(var + eps) of the final stream at END":
                _dla_by_hand(hm, run, end, io, s, scale=False),
            "the head's write is not centred: the LayerNorm subtracts its mean over d_model first":
                _dla_by_hand(hm, run, end, io, s, centre=False),
            "this is read at the last position; read each prompt at its END": _dla_by_hand(hm, run, end, io, s, at=last),
            "this is the share of logit(IO) alone: use the direction W_U[:, IO] - W_U[:, S]":
                _dla_by_hand(hm, run, end, io, s, only_io=True),
            "W_O's bias is counted; it belongs to no head": _dla_by_hand(hm, run, end, io, s, bias=True),
        }
        built.append((Case(name, args=(hm, ids, end, io, s), expected=_dla_by_hand(hm, run, end, io, s).numpy(),
                           hint="per prompt i and head (l, h): centre z[i, end[i], h] @ W_O[h], divide by the final "
                                "LayerNorm's scale at END, dot with gamma * (W_U[:, io] - W_U[:, s]).",
                           hidden=hidden), mistakes))
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="direct logit attribution of the task", forbid=_TOOLS)


def _layer_norm(x, ln, eps):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps) * ln.weight.double() + ln.bias.double()


def _receiver_z(hm, stream, delta, receiver, patched=("q",), after_norm=False):
    """The receiver's ``z`` ``(n, pos, d_head)`` when the inputs in ``patched`` read ``stream + delta``."""
    layer, head = receiver
    block, d, eps = hm.model.blocks[layer], hm.d_head, hm.model.config.ln_eps
    clean_in = _layer_norm(stream, block.ln1, eps)
    moved = clean_in + delta if after_norm else _layer_norm(stream + delta, block.ln1, eps)
    qkv = {}
    for c, lin in zip("qkv", (block.attn.W_Q, block.attn.W_K, block.attn.W_V)):
        x = moved if c in patched else clean_in
        qkv[c] = (x @ lin.weight.double().T + lin.bias.double())[..., head * d:(head + 1) * d]
    pos = stream.shape[1]
    scores = qkv["q"] @ qkv["k"].transpose(1, 2) / math.sqrt(d)
    scores = scores.masked_fill(~torch.ones(pos, pos, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1) @ qkv["v"]


def _end_metric(hm, ids, end, io, s, **kwargs) -> torch.Tensor:
    from deviating.exercises.by_hand import run_by_hand

    return _metric(run_by_hand(hm, ids, **kwargs).logits, end, io, s)


def _path_mistakes(hm, clean, corrupted, sender, receiver, end, io, s) -> tuple[torch.Tensor, dict]:
    from deviating.exercises.by_hand import run_by_hand

    (ls, hs), (lr, hr) = sender, receiver
    a, b = run_by_hand(hm, clean), run_by_hand(hm, corrupted)
    delta = (b.z[ls][:, :, hs] - a.z[ls][:, :, hs]) @ _w_o(hm, ls, hs)

    def with_z(z):
        return _end_metric(hm, clean, end, io, s, replace={(lr, hr): z})

    expected = with_z(_receiver_z(hm, a.resid[lr], delta, receiver))
    whole = b.resid[lr] - a.resid[lr]  # every change of the stream, not the sender's alone
    mistakes = {
        "the sender's change reached the receiver's query, key and value: patch the query only":
            with_z(_receiver_z(hm, a.resid[lr], delta, receiver, "qkv")),
        "the change reached the receiver's key; the exercise asks for its query":
            with_z(_receiver_z(hm, a.resid[lr], delta, receiver, "k")),
        "the change was added after the receiver's LayerNorm: add it to the residual stream, then normalise":
            with_z(_receiver_z(hm, a.resid[lr], delta, receiver, after_norm=True)),
        "the query read the whole corrupted stream (every earlier head's change), not the sender's change alone":
            with_z(_receiver_z(hm, a.resid[lr], whole, receiver)),
        "this is activation patching of the sender (its corrupted z along every path), not a path to one receiver":
            _end_metric(hm, clean, end, io, s, replace={(ls, hs): b.z[ls][:, :, hs]}),
        "the metric is read at the last position; read it at each prompt's END":
            _metric(run_by_hand(hm, clean, replace={(lr, hr): _receiver_z(hm, a.resid[lr], delta, receiver)}).logits,
                    end, io, s, at=torch.full_like(end, clean.shape[1] - 1)),
    }
    return expected, mistakes


def check_path_patch_query(fn: Callable) -> None:
    """Check ``fn(hm, clean, corrupted, sender, receiver, end, io_id, s_id)``: per prompt, the metric of
    the clean run when only the receiver's **query** reads the sender's change (its corrupted minus its
    clean output, through ``W_O``) added to the clean residual stream; everything else clean."""
    from deviating.exercises.by_hand import naming_compare

    small, deep = _models()
    built = []
    for name, hm, sender, receiver, seed, hidden in (
            ("2 layers of 4 heads: sender 0.1, receiver 1.2", small, (0, 1), (1, 2), 3, False),
            ("3 layers with MLPs: sender 0.0, receiver 2.1 (a layer in between)", deep, (0, 0), (2, 1), 4, False),
            ("3 layers with MLPs: sender 1.1, receiver 2.0", deep, (1, 1), (2, 0), 5, True)):
        clean, end, io, s = _prompts(seed, 3, 9)
        corrupted = clean.clone()
        corrupted[:, 2] = (clean[:, 2] + 7) % 40
        corrupted[:, 4] = (clean[:, 4] + 3) % 40
        expected, mistakes = _path_mistakes(hm, clean, corrupted, sender, receiver, end, io, s)
        built.append((Case(name, args=(hm, clean, corrupted, sender, receiver, end, io, s),
                           expected=expected.numpy(), hidden=hidden,
                           hint="delta = (z_corrupted - z_clean of the sender) @ W_O[sender]; recompute the receiver "
                                "with q from ln1(stream + delta), k and v from ln1(stream); put its new z into the "
                                "clean run (hm.patch_z) and read the metric at END."), mistakes))
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="path patching into one receiver's query", forbid=_TOOLS)


# ----------------------------------------------------------------------- backup, faithfulness


def check_backup_drop(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id, removed)``: ``(n, 2)``, per prompt the drop of the metric
    when the heads ``removed`` are zero-ablated (clean minus ablated) and their summed direct share
    on the clean run (what the drop would be if no other head changed)."""
    from deviating.exercises.by_hand import naming_compare, run_by_hand

    built = []
    for name, hm, removed, seed, hidden in (("2 layers of 4 heads, remove 1.0 and 1.3", _models()[0], [(1, 0), (1, 3)], 6, False),
                                            ("3 layers with MLPs, remove 1.1 and 2.0", _models()[1], [(1, 1), (2, 0)], 7, False),
                                            ("2 layers, remove 0.2 and 1.1", _models()[0], [(0, 2), (1, 1)], 8, True)):
        ids, end, io, s = _prompts(seed, 4, 9)
        run = run_by_hand(hm, ids)
        clean = _metric(run.logits, end, io, s)
        ablated = _end_metric(hm, ids, end, io, s, zero=removed)
        dla = _dla_by_hand(hm, run, end, io, s)
        share = sum(dla[:, l, h] for l, h in removed)
        after = _dla_by_hand(hm, run_by_hand(hm, ids, zero=removed), end, io, s)
        expected = torch.stack([clean - ablated, share], 1)
        mistakes = {
            "the drop has the wrong sign: clean minus ablated": torch.stack([ablated - clean, share], 1),
            "the direct share was measured on the ablated run, where the removed heads write nothing":
                torch.stack([clean - ablated, sum(after[:, l, h] for l, h in removed)], 1),
            "only the first removed head's direct share is counted": torch.stack([clean - ablated, dla[:, removed[0][0],
                                                                                                       removed[0][1]]], 1),
            "the direct share of every head is counted, not only the removed ones'":
                torch.stack([clean - ablated, dla.sum((1, 2))], 1),
        }
        built.append((Case(name, args=(hm, ids, end, io, s, removed), expected=expected.numpy(), hidden=hidden,
                           hint="column 0: metric(clean) - metric(with hm.ablate(removed)); column 1: the sum, over the "
                                "removed heads, of their direct share on the clean run."), mistakes))
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="the backup test", forbid=_TOOLS)


def _faithful(hm, ids, end, io, s, circuit, kind, reference, invert=False, over=None, per_prompt=False):
    from deviating.exercises.by_hand import run_by_hand

    heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    removed = [x for x in heads if (x in circuit) == invert]
    full = _end_metric(hm, ids, end, io, s)
    if kind == "zero":
        alone = _end_metric(hm, ids, end, io, s, zero=removed)
    else:
        ref = run_by_hand(hm, reference if over is None else over)
        means = {(l, h): ref.z[l][:, :, h].mean((0, 1)).expand(ids.shape[0], ids.shape[1], -1) for l, h in removed}
        alone = _end_metric(hm, ids, end, io, s, replace=means)
    return float((alone / full).mean()) if per_prompt else float(alone.mean() / full.mean())


def check_circuit_faithfulness(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id, circuit, kind, reference)``: the mean metric with every head
    **outside** ``circuit`` ablated (``kind`` ``"zero"``, or ``"mean"``: replaced by its mean output over
    every position of every ``reference`` input), divided by the whole model's mean metric."""
    from deviating.exercises.by_hand import naming_compare

    small, deep = _models()
    built = []
    for name, hm, circuit, kind, seed, hidden in (
            ("2 layers of 4 heads, circuit {0.1, 1.2}, zero ablation", small, [(0, 1), (1, 2)], "zero", 9, False),
            ("the same circuit, mean ablation over a reference set", small, [(0, 1), (1, 2)], "mean", 9, False),
            ("3 layers with MLPs, circuit {0.0, 1.1, 2.1}, mean ablation", deep, [(0, 0), (1, 1), (2, 1)], "mean", 10,
             False),
            ("3 layers with MLPs, circuit {2.0}, zero ablation", deep, [(2, 0)], "zero", 11, True)):
        ids, end, io, s = _prompts(seed, 6, 8)
        reference = _prompts(seed + 100, 5, 8)[0]
        args = (hm, ids, end, io, s, circuit, kind, reference)
        mistakes = {
            "the circuit's own heads were ablated: ablate every head *outside* the circuit": _faithful(*args, invert=True),
            "this is the mean of per-prompt ratios; divide the mean metrics (a prompt near 0 blows a ratio up)":
                _faithful(*args, per_prompt=True),
        }
        if kind == "mean":
            mistakes["the mean was taken over the clean prompts; take it over the reference inputs"] = \
                _faithful(*args, over=ids)
        built.append((Case(name, args=args, hidden=hidden, expected=np.array(_faithful(*args)),
                           hint="ablate the complement of the circuit (every head not in it); the mean is each head's "
                                "z averaged over the reference inputs and positions; return mean(circuit) / mean(model)."),
                      mistakes))
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="the faithfulness of a circuit", forbid=_TOOLS)
