"""Checks for chapter 5's second part, the circuit's tools: path patching into one receiver's
query, the backup test and the faithfulness of a circuit.

Every known answer comes from a forward pass written out by hand in float64
(:mod:`deviating.exercises.by_hand`) on small random GPTs, with heads zeroed or replaced and one
head recomputed from its weights; never from the head interface or :mod:`deviating.analysis.ioi`,
which the student's function may not call. When grading, each check also draws random models of
drawn size and prompts from the secret seed (:mod:`deviating.exercises.drawn`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, run_cases
from deviating.exercises.ch05b import (DRAWN, FORBIDDEN, dla_by_hand, drawn_model, random_prompts,
                                       small_models)
from deviating.exercises.drawn import drawn

__all__ = ["check_path_patch_query", "check_backup_drop", "check_circuit_faithfulness"]


def _metric(logits: torch.Tensor, end, io, s, at=None) -> torch.Tensor:
    rows = torch.arange(len(end))
    where = end if at is None else at
    return logits[rows, where, io] - logits[rows, where, s]


def _w_o(hm, layer: int, head: int) -> torch.Tensor:
    d = hm.d_head
    return hm.model.blocks[layer].attn.W_O.weight.detach().double()[:, head * d:(head + 1) * d].T


def _compare(built: list) -> Callable:
    from deviating.exercises.by_hand import naming_compare

    return naming_compare({id(c.expected): m for c, m in built}, atol=1e-4)


# ------------------------------------------------------------------------ path patching

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


def _path_case(name: str, hm, sender, receiver, seed: int, hidden: bool = False) -> tuple[Case, dict]:
    """Three random prompts (``seed``) and their corrupted twins (two positions changed)."""
    clean, end, io, s = random_prompts(seed, 3, 9)
    corrupted = clean.clone()
    corrupted[:, 2] = (clean[:, 2] + 7) % 40
    corrupted[:, 4] = (clean[:, 4] + 3) % 40
    expected, mistakes = _path_mistakes(hm, clean, corrupted, sender, receiver, end, io, s)
    return (Case(name, args=(hm, clean, corrupted, sender, receiver, end, io, s), expected=expected.numpy(),
                 hidden=hidden, hint="only the receiver's query may read the sender's change; its keys and values, "
                                     "and every other head, read the clean run."), mistakes)


def check_path_patch_query(fn: Callable) -> None:
    """Check ``fn(hm, clean, corrupted, sender, receiver, end, io_id, s_id)``: per prompt, the metric of
    the clean run when only the receiver's **query** reads the sender's change (its corrupted minus its
    clean output, through ``W_O``) added to the clean residual stream; everything else clean."""
    small, deep = small_models()
    built = [_path_case("2 layers of 4 heads: sender 0.1, receiver 1.2", small, (0, 1), (1, 2), 3),
             _path_case("3 layers with MLPs: sender 0.0, receiver 2.1 (a layer in between)", deep, (0, 0), (2, 1), 4),
             _path_case("3 layers with MLPs: sender 1.1, receiver 2.0", deep, (1, 1), (2, 0), 5, hidden=True)]
    built += drawn(_drawn_path_cases)
    run_cases(fn, [c for c, _ in built], compare=_compare(built), what="path patching into one receiver's query",
              forbid=FORBIDDEN)


def _drawn_path_cases(rng: np.random.Generator) -> list[tuple[Case, dict]]:
    """Two random GPTs of drawn size; the sender in a lower layer than the receiver, both drawn."""
    out = []
    for _ in range(2):
        hm, seed = drawn_model(rng)
        lr = int(rng.integers(1, hm.n_layers))
        sender = (int(rng.integers(0, lr)), int(rng.integers(hm.n_heads)))
        receiver = (lr, int(rng.integers(hm.n_heads)))
        out.append(_path_case(DRAWN + f"{hm.n_layers} layers of {hm.n_heads} heads, sender {sender[0]}.{sender[1]}, "
                              f"receiver {lr}.{receiver[1]}", hm, sender, receiver, seed))
    return out


# ----------------------------------------------------------------------- the backup test


def _backup_case(name: str, hm, removed, seed: int, hidden: bool = False) -> tuple[Case, dict]:
    from deviating.exercises.by_hand import run_by_hand

    ids, end, io, s = random_prompts(seed, 4, 9)
    run = run_by_hand(hm, ids)
    clean = _metric(run.logits, end, io, s)
    ablated = _end_metric(hm, ids, end, io, s, zero=removed)
    dla = dla_by_hand(hm, run, end, io, s)
    share = sum(dla[:, l, h] for l, h in removed)
    after = dla_by_hand(hm, run_by_hand(hm, ids, zero=removed), end, io, s)
    first = dla[:, removed[0][0], removed[0][1]]
    mistakes = {
        "the drop has the wrong sign: clean minus ablated": torch.stack([ablated - clean, share], 1),
        "the direct share was measured on the ablated run, where the removed heads write nothing":
            torch.stack([clean - ablated, sum(after[:, l, h] for l, h in removed)], 1),
        "only the first removed head's direct share is counted": torch.stack([clean - ablated, first], 1),
        "the direct share of every head is counted, not only the removed ones'":
            torch.stack([clean - ablated, dla.sum((1, 2))], 1),
    }
    return (Case(name, args=(hm, ids, end, io, s, removed), expected=torch.stack([clean - ablated, share], 1).numpy(),
                 hidden=hidden, hint="column 0 compares the clean run with the run without the removed heads; "
                                     "column 1 is what the removed heads wrote directly on the clean run."), mistakes)


def check_backup_drop(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id, removed)``: ``(n, 2)``, per prompt the drop of the metric
    when the heads ``removed`` are zero-ablated (clean minus ablated) and their summed direct share
    on the clean run (what the drop would be if no other head changed)."""
    small, deep = small_models()
    built = [_backup_case("2 layers of 4 heads, remove 1.0 and 1.3", small, [(1, 0), (1, 3)], 6),
             _backup_case("3 layers with MLPs, remove 1.1 and 2.0", deep, [(1, 1), (2, 0)], 7),
             _backup_case("2 layers, remove 0.2 and 1.1", small, [(0, 2), (1, 1)], 8, hidden=True)]
    built += drawn(_drawn_backup_cases)
    run_cases(fn, [c for c, _ in built], compare=_compare(built), what="the backup test", forbid=FORBIDDEN)


def _drawn_backup_cases(rng: np.random.Generator) -> list[tuple[Case, dict]]:
    """Two random GPTs of drawn size; two or three heads removed, drawn."""
    out = []
    for _ in range(2):
        hm, seed = drawn_model(rng)
        heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
        removed = [heads[int(i)] for i in sorted(rng.choice(len(heads), size=int(rng.integers(2, 4)), replace=False))]
        out.append(_backup_case(DRAWN + f"{hm.n_layers} layers of {hm.n_heads} heads, remove "
                                + ", ".join(f"{l}.{h}" for l, h in removed), hm, removed, seed))
    return out


# ------------------------------------------------------------------------- faithfulness


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


def _faith_case(name: str, hm, circuit, kind: str, seed: int, hidden: bool = False) -> tuple[Case, dict]:
    ids, end, io, s = random_prompts(seed, 6, 8)
    reference = random_prompts(seed + 100, 5, 8)[0]
    args = (hm, ids, end, io, s, circuit, kind, reference)
    mistakes = {
        "the circuit's own heads were ablated: ablate every head *outside* the circuit": _faithful(*args, invert=True),
        "this is the mean of per-prompt ratios; divide the mean metrics (a prompt near 0 blows a ratio up)":
            _faithful(*args, per_prompt=True),
    }
    if kind == "mean":
        mistakes["the mean was taken over the clean prompts; take it over the reference inputs"] = \
            _faithful(*args, over=ids)
    return (Case(name, args=args, hidden=hidden, expected=np.array(_faithful(*args)),
                 hint="keep the circuit, ablate every other head; a mean ablation's means come from the reference "
                      "inputs; compare the two runs' mean metrics as a ratio."), mistakes)


def check_circuit_faithfulness(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id, circuit, kind, reference)``: the mean metric with every head
    **outside** ``circuit`` ablated (``kind`` ``"zero"``, or ``"mean"``: replaced by its mean output over
    every position of every ``reference`` input), divided by the whole model's mean metric."""
    small, deep = small_models()
    built = [_faith_case("2 layers of 4 heads, circuit {0.1, 1.2}, zero ablation", small, [(0, 1), (1, 2)], "zero", 9),
             _faith_case("the same circuit, mean ablation over a reference set", small, [(0, 1), (1, 2)], "mean", 9),
             _faith_case("3 layers with MLPs, circuit {0.0, 1.1, 2.1}, mean ablation", deep, [(0, 0), (1, 1), (2, 1)],
                         "mean", 10),
             _faith_case("3 layers with MLPs, circuit {2.0}, zero ablation", deep, [(2, 0)], "zero", 11, hidden=True)]
    built += drawn(_drawn_faith_cases)
    run_cases(fn, [c for c, _ in built], compare=_compare(built), what="the faithfulness of a circuit",
              forbid=FORBIDDEN)


def _drawn_faith_cases(rng: np.random.Generator) -> list[tuple[Case, dict]]:
    """Random GPTs of drawn size with a drawn circuit of two or three heads: one zero, two mean ablations."""
    out = []
    for kind in ("zero", "mean", "mean"):
        hm, seed = drawn_model(rng)
        heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
        circuit = [heads[int(i)] for i in sorted(rng.choice(len(heads), size=int(rng.integers(2, 4)), replace=False))]
        out.append(_faith_case(DRAWN + f"{hm.n_layers} layers of {hm.n_heads} heads, circuit "
                               + ", ".join(f"{l}.{h}" for l, h in circuit) + f", {kind} ablation", hm, circuit,
                               kind, seed))
    return out
