"""Activation patching and path patching: which components carry the difference between two inputs.

Two runs of the model on inputs of the same length, token by token: a *clean* one, where the
model does the task, and a *corrupted* one, a minimal change that breaks it. **Noising**
patches an activation of the corrupted run into the clean run (what stops working?);
**denoising** patches the clean activation into the corrupted run (what is enough to restore
it?). Each patched run is scored with a metric, one value per input, read on the batch of the
run patched into (the *base* run: clean for noising, corrupted for denoising).

* :func:`activation_patch`: a head's output ``z`` (per head, or per head and position), a
  head's pattern, or the residual stream after a layer at one position. Patching a head's
  ``z`` is a gate with the other run's ``z`` as the replacement, so it runs batched as
  :func:`headlab.analysis.sweep.sweep` does: many patches per forward, the layers below the
  patch replayed from the base run.
* :func:`path_patch`: a sender head's corrupted output along the one path into a receiver head's
  query, key or value input; everything else clean.
"""

from __future__ import annotations

import math

import torch

from headlab.analysis.sweep import chunk_plan, groups_per_pass, tile_budget
from headlab.heads.gate import GateEdit
from headlab.heads.model import HeadModel
from headlab.heads.replay import CleanRecord, tiled_from_gate
from headlab.metrics import LogitMetric, Metric

__all__ = ["activation_patch", "path_patch", "path_patched_z", "patch_metric", "COMPONENTS", "DIRECTIONS"]

COMPONENTS = ("z", "pattern", "resid")
DIRECTIONS = ("noising", "denoising")


def patch_metric(hm: HeadModel, metric, clean_logits: torch.Tensor | None = None) -> Metric:
    """``metric`` as a :class:`~headlab.metrics.Metric`: ``"kl"`` is ``KL(clean || patched)`` at each
    input's last real token (a :class:`~headlab.metrics.LogitMetric` on ``clean_logits``); anything
    else as :meth:`Metric.of` reads it.

    Raises:
        ValueError: a metric read from logits on a model with no language-model head.
    """
    kind = metric.kind if isinstance(metric, Metric) else metric
    if isinstance(kind, LogitMetric) or (isinstance(kind, str) and kind in ("kl", "loss")):
        hm.readout()  # raises for an encoder, naming the model
    return Metric.of(LogitMetric("kl", clean=clean_logits) if isinstance(kind, str) and kind == "kl" else metric)


def _pair(hm: HeadModel, clean, corrupted) -> tuple[dict, dict]:
    a, b = hm.tokenize(clean), hm.tokenize(corrupted)
    if a["input_ids"].shape != b["input_ids"].shape or not torch.equal(a["attention_mask"], b["attention_mask"]):
        raise ValueError(f"clean inputs {tuple(a['input_ids'].shape)} and corrupted inputs "
                         f"{tuple(b['input_ids'].shape)} (batch, pos) differ in length: patching moves an "
                         "activation to the same position of the other run, so each clean input and its "
                         "corrupted twin must have the same number of tokens")
    return a, b


def _normalised(values: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """``(values - corrupted) / (clean - corrupted)`` per input: 0 = corrupted, 1 = clean."""
    den = (clean - corrupted).float().cpu()
    if bool((den == 0).any()):
        raise ValueError(f"inputs {(den == 0).nonzero().flatten().tolist()} score the same on the clean and the "
                         "corrupted run, so the normalised metric is undefined; use normalise=False")
    shape = (-1,) + (1,) * (values.dim() - 1)
    return (values - corrupted.float().cpu().reshape(shape)) / den.reshape(shape)


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
        metric: a :class:`~headlab.metrics.Metric` or what :func:`patch_metric` reads: e.g.
            ``Metric(LogitMetric("logit_diff", (a, b)))``, ``LogitMetric("prob", (t,))``, ``"kl"``,
            ``"loss"`` (default: the model's own metric).
        direction: ``"noising"`` (corrupted into clean) or ``"denoising"`` (clean into corrupted).
        positions: for ``"z"``, patch each (head, position) separately instead of a head at
            every position.
        normalise: ``(value - corrupted) / (clean - corrupted)`` per input (0 = corrupted, 1 = clean).
        per_pass: patches per forward pass (default: as the sweep sizes its tiles).

    Returns:
        ``(n, n_layers, n_heads)`` for ``"z"`` and ``"pattern"``, ``(n, n_layers, n_heads, pos)``
        for ``"z"`` with ``positions``, ``(n, n_layers, pos)`` for ``"resid"``: the metric of each
        patched run, per input.

    Raises:
        ValueError: an unknown component or direction, inputs of different lengths, or a
            metric the model cannot give (a logit metric on an encoder).
    """
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}: choose from {', '.join(map(repr, COMPONENTS))}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'noising' or 'denoising', not {direction!r}")
    a, b = _pair(hm, clean, corrupted)
    base, source = (a, b) if direction == "noising" else (b, a)
    n, pos = base["input_ids"].shape
    L, H = hm.n_layers, hm.n_heads
    with torch.no_grad():
        outputs = {"clean": hm.forward(a), "corrupted": hm.forward(b)}
    metric = patch_metric(hm, metric, outputs["clean"] if hm.causal else None)
    _, evaluate = metric.evaluator(hm, base)
    if component == "resid":
        items = [(l, p) for l in range(L) for p in range(pos)]
    else:
        items = [(l, h, p) for l in range(L) for h in range(H) for p in (range(pos) if positions else [None])]
    record = CleanRecord(hm, n * pos, keep=component == "z")
    with torch.no_grad(), record.recording(), hm.capture(("z",) if component == "z" else ()) as own:
        hm.forward(base)
    itemsize = next(hm.model.parameters()).element_size()
    per_pass = per_pass or groups_per_pass(n * pos * record.width * itemsize, tile_budget(hm.device), len(items))
    run = _z_chunk if component == "z" else _tiled_chunk
    values = torch.empty(len(items), n)
    src = _source(hm, source, component)
    for chunk in chunk_plan([((item[0], 0),) for item in items], per_pass):
        values[chunk] = run(hm, base, [items[i] for i in chunk], src, own, record, component,
                            evaluate).reshape(len(chunk), n).float().cpu()
    values = values.T.reshape((n, L, pos) if component == "resid" else (n, L, H, pos) if positions else (n, L, H))
    if not normalise:
        return values
    return _normalised(values, evaluate(outputs["clean"], 1), evaluate(outputs["corrupted"], 1))


def _source(hm: HeadModel, source: dict, component: str) -> list[torch.Tensor]:
    """The source run's activation per layer (the residual stream after each layer for ``"resid"``)."""
    names = () if component == "resid" else (component,)
    with torch.no_grad(), hm.capture(names) as cache, hm.residual_stream() as stream:
        hm.forward(source)
    if component == "resid":
        return stream[1:]
    return [cache.z(l) if component == "z" else cache.pattern(l) for l in range(hm.n_layers)]


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

    patch = hm.patch_pattern if component == "pattern" else hm.patch_resid
    tiled = {key: v.repeat(k, 1) for key, v in base.items()}
    with torch.no_grad(), patch(fn, layers=[layer]):
        return evaluate(hm.forward(tiled), k)


def path_patched_z(hm: HeadModel, clean, corrupted, sender, receiver, input: str = "v") -> torch.Tensor:
    """The receiver head's output ``z`` ``(n, pos, d_head)`` on the clean inputs when its ``input``
    (``"q"``, ``"k"`` or ``"v"``) reads the clean residual stream plus the change in the sender's
    output (its ``z @ W_O``) from the clean to the corrupted run, and nothing else changes.

    The receiver's attention is recomputed from its weights (``softmax(q k^T / sqrt(d_head))``,
    causal, padding masked), and checked against the clean run: a model whose attention differs
    (rotary embeddings, another scale) is refused.

    Raises:
        ValueError: the sender is not in a layer below the receiver, an unknown ``input``, or
            inputs of different lengths.
        NotImplementedError: the model's attention cannot be recomputed this way.
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
    a, b = _pair(hm, clean, corrupted)
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
        raise NotImplementedError(f"{hm.name}'s attention is not softmax(q k^T / sqrt(d_head)) over causal, "
                                  "unpadded keys: path_patched_z cannot recompute head "
                                  f"{lr}.{hr} (off by {float((recomputed - clean_z).abs().max()):.2g})")
    return clean_z + (head_z(input) - recomputed)


def path_patch(hm: HeadModel, clean, corrupted, sender, receiver, input: str = "v", *, metric=None,
               normalise: bool = False) -> torch.Tensor:
    """The metric ``(n,)`` of the clean run with the receiver's output replaced by
    :func:`path_patched_z` (the sender's corrupted output along its path into the receiver's
    ``input`` only). ``metric`` and ``normalise`` as in :func:`activation_patch`."""
    a, b = _pair(hm, clean, corrupted)
    z = path_patched_z(hm, a, b, sender, receiver, input)
    lr, hr = hm.check_heads([receiver])[0]
    with torch.no_grad():
        outputs = {"clean": hm.forward(a), "corrupted": hm.forward(b)}
    _, evaluate = patch_metric(hm, metric, outputs["clean"] if hm.causal else None).evaluator(hm, a)

    def swap(layer: int, zl: torch.Tensor) -> torch.Tensor:
        zl = zl.clone()
        zl[:, :, hr] = z
        return zl

    with torch.no_grad(), hm.patch_z(swap, layers=[lr]):
        values = evaluate(hm.forward(a), 1).float().cpu()
    return _normalised(values, evaluate(outputs["clean"], 1), evaluate(outputs["corrupted"], 1)) if normalise else values
