"""Activation patching and path patching: which components carry the difference between two inputs.

Two runs on inputs of the same lengths: *clean* (the model does the task) and *corrupted* (a
minimal change breaks it). **Noising** patches an activation of the corrupted run into the
clean run; **denoising** the clean one into the corrupted run. Each patched run is scored with a
metric, one value per input, read on the batch of the run patched into (the *base* run).

* :func:`~headlab.analysis.patching.activation_patch`: a head's output ``z`` (per head, or per head and position), a head's
  pattern, or the residual stream after a layer at one position. A head's ``z`` patch is a gate
  whose replacement is the other run's ``z``, so it runs batched as
  :func:`headlab.analysis.sweep.sweep` does (many patches per pass, lower layers replayed).
* :func:`~headlab.analysis.patching.path_patch`: a sender head's corrupted output along its path into a receiver head's
  query, key or value input only; everything else clean.
"""

from __future__ import annotations

import math

import torch

from headlab.heads.gate import GateEdit
from headlab.heads.model import HeadModel, check_model
from headlab.heads.replay import CleanRecord, chunk_plan, groups_per_pass, tile_budget, tiled_from_gate
from headlab.metrics import Metric

__all__ = ["activation_patch", "path_patch", "path_patched_z", "COMPONENTS", "paired_batches", "normalised",
           "check_flags"]

COMPONENTS = ("z", "pattern", "resid")


def check_flags(**flags) -> None:
    """Refuse a flag that is not a bool, naming it (``normalise="no"`` would read as True)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, not {value!r}")


def paired_batches(hm: HeadModel, clean, corrupted) -> tuple[dict, dict]:
    """The clean and corrupted inputs tokenized, refused unless each pair is equally long."""
    a, b = hm.tokenize(clean), hm.tokenize(corrupted)
    if a["input_ids"].shape != b["input_ids"].shape or not torch.equal(a["attention_mask"], b["attention_mask"]):
        raise ValueError(f"clean inputs {tuple(a['input_ids'].shape)} and corrupted inputs {tuple(b['input_ids'].shape)} "
                         "differ in length: patching moves an activation to the same position of the other run, "
                         "so each clean input and its corrupted twin must have the same number of tokens")
    return a, b


def _scorer(hm: HeadModel, metric, a: dict, b: dict, base: dict):
    """``(evaluate, ends)``: the metric on the base batch, and its values on the clean and the corrupted run."""
    metric = Metric.of(metric).bound(hm)
    # "kl" compares every run with the clean run; an encoder's metrics with the base run's embedding
    _, evaluate = metric.evaluator(hm, base, reference_batch=a if metric.kind == "kl" else base)
    with torch.no_grad():
        return evaluate, [evaluate(hm.forward(x), 1) for x in (a, b)]


def normalised(values: torch.Tensor, ends) -> torch.Tensor:
    """``(values - corrupted) / (clean - corrupted)`` per input: 0 = corrupted, 1 = clean."""
    clean, corrupted = (e.float().cpu().reshape((-1,) + (1,) * (values.dim() - 1)) for e in ends)
    if bool((clean == corrupted).any()):
        raise ValueError(f"inputs {(clean == corrupted).flatten().nonzero().flatten().tolist()} score the same on "
                         "the clean and the corrupted run: the normalised metric is undefined; use normalise=False")
    return (values - corrupted) / (clean - corrupted)


def activation_patch(hm: HeadModel, clean, corrupted, component: str = "z", *, metric=None,
                     direction: str = "noising", positions: bool = False, normalise: bool = False,
                     per_pass: int | None = None) -> torch.Tensor:
    """Patch each head (or each layer's residual stream) from one run into the other; score each patch.

    Args:
        hm: the model.
        clean, corrupted: texts or batches of the same shape (each pair equally long).
        component: ``"z"`` (a head's output before ``W_O``), ``"pattern"`` (a head's attention
            pattern; models whose adapter can replace it) or ``"resid"`` (the residual stream
            after a layer, at one position).
        metric: a :class:`~headlab.metrics.Metric`, e.g. ``Metric(LogitMetric("logit_diff", (a, b)))``,
            ``"loss"``, or ``"kl"`` (``KL(clean || patched)`` at each input's last real token);
            default: the model's own metric.
        direction: ``"noising"`` (corrupted into clean) or ``"denoising"`` (clean into corrupted).
        positions: for ``"z"``, patch each (head, position) alone, not a head at every position.
        normalise: ``(value - corrupted) / (clean - corrupted)`` per input (0 = corrupted, 1 = clean).
        per_pass: patches per forward pass (default: as the sweep sizes its tiles).

    Returns:
        The metric of each patched run per input, ``(n, n_layers, n_heads)`` (``"z"``, ``"pattern"``),
        ``(n, n_layers, n_heads, pos)`` (``"z"`` with ``positions``) or ``(n, n_layers, pos)`` (``"resid"``).

    Raises:
        ValueError: an unknown component or direction, inputs of different lengths, or a metric
            the model cannot give (a logit metric on an encoder).
    """
    hm = check_model(hm, "activation_patch")
    check_flags(positions=positions, normalise=normalise)
    if component not in COMPONENTS or positions and component != "z":
        raise ValueError(f"unknown component {component!r}{' with positions=True' * positions}: choose from "
                         f"{', '.join(map(repr, COMPONENTS))} (positions=True is for 'z'; 'resid' is per position)")
    if direction not in ("noising", "denoising"):
        raise ValueError(f"direction must be 'noising' or 'denoising', not {direction!r}")
    if per_pass is not None and (isinstance(per_pass, bool) or not isinstance(per_pass, int) or per_pass < 1):
        raise ValueError(f"per_pass must be a positive number of patches per forward pass (or None), not {per_pass!r}")
    a, b = paired_batches(hm, clean, corrupted)
    base, source = (a, b) if direction == "noising" else (b, a)
    n, pos = base["input_ids"].shape
    L, H = hm.n_layers, hm.n_heads
    evaluate, ends = _scorer(hm, metric, a, b, base)
    items = [(l, p) for l in range(L) for p in range(pos)] if component == "resid" else \
        [(l, h, p) for l in range(L) for h in range(H) for p in (range(pos) if positions else [None])]
    record = CleanRecord(hm, n * pos, keep=component == "z")
    with torch.no_grad(), record.recording(), hm.capture(("z",) if component == "z" else ()) as own:
        hm.forward(base)
    itemsize = next(hm.model.parameters()).element_size()
    per_pass = per_pass if per_pass is not None else groups_per_pass(n * pos * record.width * itemsize, tile_budget(hm.device), len(items))
    run = _z_chunk if component == "z" else _tiled_chunk
    values = torch.empty(len(items), n)
    with torch.no_grad(), hm.capture(() if component == "resid" else (component,)) as cache, \
            hm.residual_stream() as stream:
        hm.forward(source)
    src = stream[1:] if component == "resid" else [cache[f"blocks.{l}.attn.hook_{component}"] for l in range(L)]
    for chunk in chunk_plan([((item[0], 0),) for item in items], per_pass):
        values[chunk] = run(hm, base, [items[i] for i in chunk], src, own, record, component,
                            evaluate).reshape(len(chunk), n).float().cpu()
    values = values.T.reshape((n, L, pos) if component == "resid" else (n, L, H, pos) if positions else (n, L, H))
    return normalised(values, ends) if normalise else values


def _z_chunk(hm, base, items, src, own, record, component, evaluate) -> torch.Tensor:
    """One forward pass of the patches ``items`` (one layer), tiled at that layer's gate."""
    n, k, first = base["input_ids"].shape[0], len(items), items[0][0]
    r = own.z(first).repeat(k, 1, 1, 1)  # the base run's z, with each tile's patch written in
    gate = torch.ones(k, n, hm.n_layers, hm.n_heads, device=hm.device)
    for j, (_, h, p) in enumerate(items):
        at = slice(None) if p is None else p
        r[j * n:(j + 1) * n, at, h] = src[first][:, at, h]
        gate[j, :, first, h] = 0.0
    edit = GateEdit(gate.flatten(0, 1), {first: r})
    gates = hm.gated(edit.gate, edit.replacement) if k == 1 else tiled_from_gate(hm, first, n, k, edit)
    with torch.no_grad(), record.replaying(first), gates:
        return evaluate(hm.forward(base), k)


def _tiled_chunk(hm, base, items, src, own, record, component, evaluate) -> torch.Tensor:
    """One forward pass of the base inputs tiled once per patch of ``items`` (one layer)."""
    n, k, layer = base["input_ids"].shape[0], len(items), items[0][0]

    def fn(l: int, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        for j, item in enumerate(items):  # a pattern's head, or a residual stream's position
            x[j * n:(j + 1) * n, item[1]] = src[l][:, item[1]]
        return x

    tiled = {key: v.repeat(k, 1) for key, v in base.items()}
    with torch.no_grad(), (hm.patch_pattern if component == "pattern" else hm.patch_resid)(fn, layers=[layer]):
        return evaluate(hm.forward(tiled), k)


def path_patched_z(hm: HeadModel, clean, corrupted, sender, receiver, input: str = "v") -> torch.Tensor:
    """The receiver head's ``z`` ``(n, pos, d_head)`` on the clean inputs when only its ``input``
    (``"q"``, ``"k"`` or ``"v"``) reads the clean residual stream plus the change of the sender's
    output ``z @ W_O`` from the clean to the corrupted run. The receiver's attention is recomputed
    from its weights (``softmax(q k^T / sqrt(d_head))``, causal, padding masked) and checked
    against the clean run.

    Raises:
        ValueError: a sender not in a layer below the receiver, an unknown ``input``, inputs of
            different lengths.
        NotImplementedError: attention the recomputation does not match (rotary embeddings, ...).
    """
    if input not in ("q", "k", "v"):
        raise ValueError(f"input must be 'q', 'k' or 'v' (the receiver's query, key or value), not {input!r}")
    (ls, hs), (lr, hr) = hm.check_heads([sender])[0], hm.check_heads([receiver])[0]
    if ls >= lr:
        raise ValueError(f"sender {ls}.{hs} must sit in a layer below receiver {lr}.{hr}: a head reads only what "
                         "earlier layers wrote; choose a sender in layers 0.." f"{lr - 1}")
    if hm.arch.rotary:
        raise NotImplementedError(f"{hm.name} rotates queries and keys by position; path_patched_z recomputes "
                                  "attention without rotary embeddings")
    a, b = paired_batches(hm, clean, corrupted)
    with torch.no_grad(), hm.capture(("z",), layers=[ls, lr]) as cc, hm.residual_stream() as stream:
        hm.forward(a)
    with torch.no_grad(), hm.capture(("z",), layers=[ls]) as cr:
        hm.forward(b)
    delta = (cr.z(ls)[:, :, hs] - cc.z(ls)[:, :, hs]) @ hm.W_O(ls)[hs]  # (n, pos, d_model)
    norm = hm.attn_norm(lr) or (lambda t: t)
    with torch.no_grad():
        x = {False: norm(stream[lr]), True: norm(stream[lr] + delta)}
    W = {c: getattr(hm, f"W_{c.upper()}")(lr)[hr] for c in "qkv"}
    B = {c: getattr(hm, f"b_{c.upper()}")(lr) for c in "qkv"}
    pos = x[False].shape[1]
    allowed = torch.ones(pos, pos, dtype=torch.bool, device=hm.device).tril() & a["attention_mask"].bool()[:, None, :]

    def head_z(patched: str) -> torch.Tensor:
        q, k, v = (x[c == patched] @ W[c] + (0 if B[c] is None else B[c][hr]) for c in "qkv")
        scores = (q @ k.transpose(1, 2) / math.sqrt(hm.d_head)).masked_fill(~allowed, float("-inf"))
        return scores.softmax(dim=-1) @ v  # (n, pos, d_head)

    clean_z, recomputed = cc.z(lr)[:, :, hr], head_z("")
    if not torch.allclose(recomputed, clean_z, atol=1e-4, rtol=1e-3):
        off = float((recomputed - clean_z).abs().max())
        if hm.hooks_installed:
            raise ValueError(f"head {lr}.{hr}'s output is edited by an open block (ablate, patch or gate: "
                             f"{hm.hooks_installed} hook(s) on {hm.name}), so path patching cannot recompute it "
                             f"(off by {off:.2g}): call path_patch outside the block")
        raise NotImplementedError(f"{hm.name}'s attention is not softmax(q k^T / sqrt(d_head)) over causal, "
                                  "unpadded keys: path_patched_z cannot recompute head "
                                  f"{lr}.{hr} (off by {off:.2g})")
    return clean_z + (head_z(input) - recomputed)


def path_patch(hm: HeadModel, clean, corrupted, sender, receiver, input: str = "v", *, metric=None,
               normalise: bool = False) -> torch.Tensor:
    """The metric ``(n,)`` of the clean run with the receiver's output replaced by
    :func:`~headlab.analysis.patching.path_patched_z` (the sender's corrupted output along its path into the receiver's
    ``input`` only). ``metric`` and ``normalise`` as in :func:`~headlab.analysis.patching.activation_patch`."""
    hm = check_model(hm, "path_patch")
    check_flags(normalise=normalise)
    a, b = paired_batches(hm, clean, corrupted)
    z = path_patched_z(hm, a, b, sender, receiver, input)
    lr, hr = hm.check_heads([receiver])[0]
    evaluate, ends = _scorer(hm, metric, a, b, a)
    with torch.no_grad(), hm.patch_z(lambda l, zl: torch.cat([zl[:, :, :hr], z[:, :, None], zl[:, :, hr + 1:]], 2),
                                     layers=[lr]):
        values = evaluate(hm.forward(a), 1).float().cpu()
    return normalised(values, ends) if normalise else values
