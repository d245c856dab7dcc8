"""Edge attribution patching: sender head -> receiver head's query, key or value input, and -> the logits.

An *edge* is the direct path through the residual stream from one head's output ``z @ W_O`` to
what a later head reads as its query, key or value input (or to the logits). Exact path patching
(:func:`~headlab.analysis.patching.path_patch`) runs the model once per edge: the receiver reads
the base stream plus the change of the sender's output, nothing else changes. Edge attribution
patching (Syed et al. 2023) estimates every edge from the gradients of one forward/backward::

    metric(edge patched)
        ~ metric(base) + (out_sender_source - out_sender_base) . d metric / d x_receiver

where ``x_receiver`` is the stream as that one input of that one receiver reads it (before its
norm). The gradient at a receiver's input is the gradient at its ``z`` (from the gate) pulled back
through its attention, recomputed from its weights as path patching does
(:func:`attention_from_stream`), so the estimate is exact where the receiver's ``z`` and the metric
are linear in that input (a value input of the last layer, no norms, a logit difference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from headlab.analysis.attribution import PairRun, finish_values, pair_run
from headlab.analysis.patching import check_flags
from headlab.heads.head import format_head
from headlab.heads.model import HeadModel

__all__ = ["edge_attribution", "EdgeScores", "attention_from_stream", "INPUTS", "edge_list", "edge_circuit_run"]

#: The inputs of a receiver head, in the order of :attr:`EdgeScores.heads`' last axis.
INPUTS = ("q", "k", "v")


def attention_from_stream(hm: HeadModel, layer: int, x: dict, attention_mask: torch.Tensor) -> torch.Tensor:
    """Layer ``layer``'s ``z`` ``(n, pos, head, d_head)`` recomputed from the stream each input reads.

    ``x`` maps ``"q"``, ``"k"``, ``"v"`` to the residual stream before the layer's attention norm,
    ``(n, pos, d_model)`` or ``(n, pos, head, d_model)`` (one copy per head, e.g. to differentiate
    each head's input separately). Attention is ``softmax(q k^T / sqrt(d_head))`` over unmasked
    (and, for a causal model, earlier) keys.

    Raises:
        NotImplementedError: a model that rotates queries and keys by position (rotary embeddings).
    """
    if hm.arch.rotary:
        raise NotImplementedError(f"{hm.name} rotates queries and keys by position; attention_from_stream "
                                  "recomputes attention without rotary embeddings")
    norm = hm.attn_norm(layer) or (lambda t: t)
    qkv = []
    for c in INPUTS:
        W, b = getattr(hm, f"W_{c.upper()}")(layer), getattr(hm, f"b_{c.upper()}")(layer)
        xc = norm(x[c])
        out = torch.einsum("nphd,hdk->nphk" if xc.dim() == 4 else "npd,hdk->nphk", xc, W.to(xc.dtype))
        qkv.append(out if b is None else out + b.to(xc.dtype))
    q, k, v = qkv
    pos = q.shape[1]
    allowed = attention_mask.bool()[:, None, None, :].expand(-1, 1, pos, pos)
    if hm.causal:
        allowed = allowed & torch.ones(pos, pos, dtype=torch.bool, device=q.device).tril()
    scores = torch.einsum("nqhk,nshk->nhqs", q, k) / math.sqrt(hm.d_head)
    return torch.einsum("nhqs,nshk->nqhk", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)


def _receiver_grads(hm: HeadModel, run: PairRun, layer: int) -> torch.Tensor:
    """``d metric / d x`` at the base run for each head's q, k and v input: ``(3, n, pos, head, d_model)``."""
    n, pos, H = run.z_base[layer].shape[:3]
    stream = run.stream_base[layer - 1]
    x = {c: stream[:, :, None, :].expand(n, pos, H, stream.shape[-1]).clone().requires_grad_() for c in INPUTS}
    with torch.enable_grad():
        z = attention_from_stream(hm, layer, x, run.base["attention_mask"])
        if not torch.allclose(z, run.z_base[layer], atol=1e-4, rtol=1e-3):
            raise NotImplementedError(
                f"{hm.name}'s attention is not softmax(q k^T / sqrt(d_head)) over the allowed keys: edge "
                f"attribution cannot recompute layer {layer} (off by {float((z - run.z_base[layer]).abs().max()):.2g})")
        grads = torch.autograd.grad(z, [x[c] for c in INPUTS], grad_outputs=run.grad_z[layer])
    return torch.stack(grads)


def edge_list(n_layers: int, n_heads: int) -> list[tuple[int, int, int, int, int]]:
    """Every edge as ``(sender layer, sender head, receiver layer, receiver head, input)``: head ->
    head edges (input an index of :data:`INPUTS`) in that order, then head -> logits edges, written
    with receiver layer ``n_layers``, head 0 and input -1. :class:`EdgeScores`' :meth:`~EdgeScores.vector`
    and an edge circuit's mask follow this order."""
    L, H = n_layers, n_heads
    return ([(ls, hs, lr, hr, c) for ls in range(L) for hs in range(H) for lr in range(ls + 1, L) for hr in range(H)
             for c in range(3)] + [(l, h, L, 0, -1) for l in range(L) for h in range(H)])


def edge_circuit_run(hm: HeadModel, batch: dict, evaluate, replacement: dict):
    """``keep -> (n,)``: the metric of an edge circuit run alone on ``batch``.

    ``keep`` is a boolean ``(len(edge_list(hm.n_layers, hm.n_heads)),)`` mask. Each receiver's query, key and value
    input reads the stream of this run with, for each edge into it not kept, the sender's write
    ``z @ W_O`` taken out and the sender's ablated write put in (``replacement[l]`` as
    :meth:`~headlab.heads.model.HeadModel.replacements` gives it; ``None``: zero); the logits read
    the last stream with the same correction for the edges into them not kept. What is not a head
    (embeddings, MLPs) reads the stream unchanged. ``evaluate(output, 1)`` scores a run.

    Raises:
        NotImplementedError: a model whose attention :func:`attention_from_stream` does not match.
    """
    L, H = hm.n_layers, hm.n_heads
    edges = torch.tensor(edge_list(L, H))
    to_heads = edges[:, 2] < L
    W_O = [hm.W_O(l) for l in range(L)]

    def run(keep: torch.Tensor) -> torch.Tensor:
        cut = torch.zeros(L, H, L, H, 3, device=hm.device)  # 1 where an edge is not kept
        drop = edges[to_heads][~keep[to_heads].cpu()]
        cut[drop[:, 0], drop[:, 1], drop[:, 2], drop[:, 3], drop[:, 4]] = 1.0
        cut_logits = torch.zeros(L, H, device=hm.device)
        drop = edges[~to_heads][~keep[~to_heads].cpu()]
        cut_logits[drop[:, 0], drop[:, 1]] = 1.0
        excess: list[torch.Tensor] = []  # per layer (n, pos, head, d_model): the write minus the ablated write

        def heads(l: int, z: torch.Tensor) -> torch.Tensor:  # (n, pos, head, d_head)
            if l > 0:
                x = {c: stream[l][:, :, None] - sum(torch.einsum("nphd,hr->nprd", excess[s], cut[s, :, l, :, i])
                                                    for s in range(l)) for i, c in enumerate(INPUTS)}
                new = attention_from_stream(hm, l, x, batch["attention_mask"]).to(z.dtype)
                if not bool(cut[:, :, l].any()) and not torch.allclose(new, z, atol=1e-4, rtol=1e-3):
                    raise NotImplementedError(f"{hm.name}'s attention is not softmax(q k^T / sqrt(d_head)) over the "
                                              f"allowed keys: an edge circuit cannot recompute layer {l}")
                z = new
            r = replacement.get(l)
            r = torch.zeros_like(z) if r is None else r(z) if callable(r) else r
            excess.append(torch.einsum("nphk,hkd->nphd", z - r, W_O[l].to(z.dtype)))
            return z

        def logits(l: int, x: torch.Tensor) -> torch.Tensor:
            return x - sum(torch.einsum("nphd,h->npd", excess[s], cut_logits[s]) for s in range(L))

        with torch.no_grad(), hm.residual_stream() as stream, hm.patch_z(heads), hm.patch_resid(logits, layers=[L - 1]):
            return evaluate(hm.forward(batch), 1).float().cpu()

    return run


@dataclass
class EdgeScores:
    """Every edge's estimate, as :func:`edge_attribution` returns it.

    Attributes:
        heads: ``(n, n_layers, n_heads, n_layers, n_heads, 3)``: input, sender layer and head,
            receiver layer and head, receiver input (``INPUTS``: q, k, v). Only a sender in a
            layer below its receiver makes an edge; other entries hold the base value (effect 0).
        logits: ``(n, n_layers, n_heads)``: sender -> the logits (its direct path to the readout).
        base: ``(n,)``: the base run's value in the same convention (0 for effects).
    """

    heads: torch.Tensor
    logits: torch.Tensor
    base: torch.Tensor

    def vector(self) -> torch.Tensor:
        """The estimated change of the metric (batch mean) of each edge, in :func:`edge_list`'s order."""
        heads, logits = self.heads.mean(0) - self.base.mean(), self.logits.mean(0) - self.base.mean()
        L = logits.shape[0]
        return torch.tensor([float(logits[ls, hs]) if lr == L else float(heads[ls, hs, lr, hr, c])
                             for ls, hs, lr, hr, c in edge_list(*logits.shape)])

    def top(self, k: int = 20) -> list[tuple[str, str, str, float]]:
        """The ``k`` edges whose estimated change of the metric (batch mean) is largest in absolute
        value, as ``(sender, receiver, input, change)`` (heads written ``"1.2"``; receiver
        ``"logits"`` with input ``""``)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        shift = self.base.mean()
        heads, logits = self.heads.mean(0) - shift, self.logits.mean(0) - shift
        L, H = logits.shape
        rows = [(format_head((ls, hs)), format_head((lr, hr)), INPUTS[c], float(heads[ls, hs, lr, hr, c]))
                for ls in range(L) for hs in range(H) for lr in range(ls + 1, L) for hr in range(H) for c in range(3)]
        rows += [(format_head((l, h)), "logits", "", float(logits[l, h])) for l in range(L) for h in range(H)]
        return sorted(rows, key=lambda r: -abs(r[3]))[:k]


def edge_attribution(hm: HeadModel, clean, corrupted, *, metric=None, direction: str = "noising",
                     normalise: bool = False, effect: bool = False) -> EdgeScores:
    """Estimate the path patch of every edge (sender head -> receiver's q, k or v; sender -> logits).

    Entry ``[i, ls, hs, lr, hr, c]`` estimates ``path_patch(hm, clean, corrupted, sender=(ls, hs),
    receiver=(lr, hr), input=INPUTS[c], metric=metric)[i]`` (for ``direction="noising"``; denoising
    moves the clean sender's output into the corrupted run). Costs one forward of each run, one
    backward, and one small recomputation of each layer's attention.

    Example::

        scores = edge_attribution(hm, clean, corrupted, metric=diff, effect=True)
        scores.top(5)  # [("0.3", "1.1", "k", 0.42), ...]

    Args:
        hm, clean, corrupted, metric, direction, normalise, effect: as in
            :func:`~headlab.analysis.attribution.attribution_patch`.

    Returns:
        :class:`EdgeScores` (on the CPU).

    Raises:
        TypeError, ValueError: as ``attribution_patch``.
        NotImplementedError: a model whose attention the recomputation does not match (rotary).
    """
    check_flags(normalise=normalise, effect=effect)
    if hm.arch.rotary:
        raise NotImplementedError(f"{hm.name} rotates queries and keys by position; edge attribution recomputes "
                                  "attention without rotary embeddings (node attribution works: attribution_patch)")
    run = pair_run(hm, clean, corrupted, metric, direction, stream=True)
    L, H = hm.n_layers, hm.n_heads
    n = run.values.shape[0]
    writes = [torch.einsum("nphk,hkd->nphd", s - b, hm.W_O(l).to(s.dtype))  # (n, pos, head, d_model)
              for l, (s, b) in enumerate(zip(run.z_source, run.z_base))]
    heads = torch.zeros(n, L, H, L, H, 3)
    for lr in range(1, L):
        grads = _receiver_grads(hm, run, lr)  # (3, n, pos, head, d_model)
        for ls in range(lr):
            heads[:, ls, :, lr] = torch.einsum("npsd,cnprd->nsrc", writes[ls], grads).detach().float().cpu()
    logits = torch.stack([torch.einsum("npsd,npd->ns", w, run.grad_stream[-1]) for w in writes], 1)
    return EdgeScores(finish_values(run, heads, normalise, effect),
                      finish_values(run, logits.detach(), normalise, effect),
                      finish_values(run, torch.zeros(n), normalise, effect))
