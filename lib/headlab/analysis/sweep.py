"""Many ablations in few forward passes.

:func:`sweep` measures the effect of ablating each of many head groups (by
default every single head) on every input, and returns it **per input**.

Two savings make it fast:

* **One gate value per example.** The inputs are tiled once per group in a
  chunk, and each tile gets its own gate, so one forward pass runs many
  ablations (:meth:`HeadModel.gated` with a ``(batch, n_layers, n_heads)`` gate).
* **Clean activations below the ablated layer are shared.** An ablation at
  layer ``l`` cannot change anything below ``l``, so the inputs run *untiled*
  through blocks ``0 .. l-1``; a forward pre-hook on each block from ``l`` on
  tiles every batch-shaped argument (hidden states, attention masks, rotary
  tables) on the way in. Chunks are formed from groups sorted by their lowest
  layer, so late-layer ablations skip most of the model.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterable

import torch

from headlab.heads.model import ABLATION_MODES, Head, HeadModel

__all__ = ["sweep", "SweepResult", "loop_sweep"]


@dataclass
class SweepResult:
    """Effects of ablating each group on each input.

    Attributes:
        groups: the ablated head groups, each a tuple of ``(layer, head)``.
        effects: ``(n_groups, n_inputs)``: metric(ablated) - metric(clean). For a
            causal LM the metric is the next-token loss (positive = the ablation
            hurts); for an encoder, 1 - cos of the pooled embedding to the clean
            one (clean = 0), or the self-retrieval loss.
        clean: ``(n_inputs,)`` the clean metric (zeros for ``cosine``).
        mode, kind: the ablation mode and the metric kind.
        n_layers, n_heads: the model's geometry.
    """

    groups: list[tuple[Head, ...]]
    effects: torch.Tensor
    clean: torch.Tensor
    mode: str
    kind: str
    n_layers: int
    n_heads: int

    def by_head(self) -> torch.Tensor:
        """Single-head effects as ``(n_layers, n_heads, n_inputs)`` (NaN where a head was not swept)."""
        out = torch.full((self.n_layers, self.n_heads, self.effects.shape[1]), float("nan"))
        for i, group in enumerate(self.groups):
            if len(group) == 1:
                (layer, head), = group
                out[layer, head] = self.effects[i]
        return out

    def mean(self) -> torch.Tensor:
        """Mean effect over inputs, per group: ``(n_groups,)``."""
        return self.effects.mean(dim=1)

    def to_json(self) -> dict:
        return {
            "mode": self.mode, "metric": self.kind,
            "n_layers": self.n_layers, "n_heads": self.n_heads,
            "clean": [round(float(x), 6) for x in self.clean],
            "groups": [
                {"heads": [list(h) for h in g],
                 "effects": [round(float(x), 6) for x in row],
                 "mean": round(float(row.mean()), 6)}
                for g, row in zip(self.groups, self.effects)
            ],
        }


def _tile_like(x, n: int, k: int):
    """Repeat every tensor whose first dimension is ``n`` ``k`` times along it (recursively)."""
    if isinstance(x, torch.Tensor):
        return x.repeat(k, *([1] * (x.dim() - 1))) if x.dim() and x.shape[0] == n else x
    if isinstance(x, tuple):
        return tuple(_tile_like(v, n, k) for v in x)
    if isinstance(x, list):
        return [_tile_like(v, n, k) for v in x]
    if isinstance(x, dict):
        return {key: _tile_like(v, n, k) for key, v in x.items()}
    return x


@contextlib.contextmanager
def _tiled_from(hm: HeadModel, layer: int, n: int, k: int):
    """Blocks ``layer..`` see every ``n``-batched argument tiled ``k`` times."""
    def hook(module, args, kwargs):
        return _tile_like(args, n, k), _tile_like(kwargs, n, k)

    handles = []
    try:
        if k > 1:
            for block in hm.blocks[layer:]:
                handles.append(block.register_forward_pre_hook(hook, with_kwargs=True))
        yield
    finally:
        for h in handles:
            h.remove()


def _normalise_groups(hm: HeadModel, groups) -> list[tuple[Head, ...]]:
    if groups is None:
        return [(h,) for h in hm.heads()]
    out = []
    for g in groups:
        if isinstance(g, tuple) and len(g) == 2 and all(isinstance(x, int) for x in g):
            g = [g]  # a single head given as (layer, head)
        out.append(tuple(hm.check_heads(g)))
    if not out:
        raise ValueError("groups is empty: give at least one group of (layer, head) pairs, or None for all heads")
    return out


def _metric(hm: HeadModel, batch: dict, kind, loss_mask: torch.Tensor | None):
    """The metric as ``(name, evaluate)``, where ``evaluate(output, k)`` scores an output whose
    batch is ``batch`` tiled ``k`` times, one value per row.

    ``kind`` is a name understood by :meth:`HeadModel.metric` or a callable
    ``metric(output, batch) -> (rows,)``; its ``batch`` holds the tiled ``input_ids``,
    ``attention_mask`` and ``index`` (each row's input index in the untiled batch), so a
    metric can look up per-input data such as the position and target of an item.
    """
    if loss_mask is not None and loss_mask.shape != batch["input_ids"].shape:
        raise ValueError(f"loss_mask {tuple(loss_mask.shape)} must have the shape of the inputs "
                         f"{tuple(batch['input_ids'].shape)}")
    n = batch["input_ids"].shape[0]
    index = torch.arange(n, device=batch["input_ids"].device)

    def tiled(k: int) -> dict:
        out = {key: v.repeat(k, 1) for key, v in batch.items()}
        out["index"] = index.repeat(k)
        return out

    if callable(kind):
        name = getattr(kind, "__name__", "custom")
        return name, lambda output, k: kind(output, tiled(k))
    kind = kind or ("loss" if hm.causal else "cosine")
    pooled = None
    if not hm.causal:
        with torch.no_grad():
            pooled = hm.metric(hm.forward(batch), batch)

    def evaluate(output, k):
        mask = None if loss_mask is None else loss_mask.repeat(k, 1)
        return hm.metric(output, tiled(k), clean=pooled, kind=kind, loss_mask=mask)

    return kind, evaluate


def _chunks(groups: list[tuple[Head, ...]], per_pass: int) -> list[list[int]]:
    """Indices of groups to run together: groups sharing their lowest layer, at most
    ``per_pass`` at a time (mixing lowest layers would recompute the shared blocks)."""
    by_first: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        by_first.setdefault(min(l for l, _ in group), []).append(i)
    return [idx[j:j + per_pass] for first in sorted(by_first) for idx in [by_first[first]]
            for j in range(0, len(idx), per_pass)]


def sweep(hm: HeadModel, inputs, groups: Iterable | None = None, mode: str = "zero",
          reference=None, kind: str | None = None, loss_mask: torch.Tensor | None = None,
          max_batch: int = 256, seed: int = 0, progress: bool = False) -> SweepResult:
    """Ablate each group of heads in turn and measure the metric on every input.

    Args:
        hm: the model.
        inputs: texts or a batch (as accepted by :meth:`HeadModel.tokenize`).
        groups: ``None`` for every single head, or a list of groups (each a list of
            ``(layer, head)``; a bare ``(layer, head)`` is a group of one).
        mode, reference, seed: as in :meth:`HeadModel.ablate`.
        kind: metric kind (``"loss"`` for causal LMs; ``"cosine"``/``"retrieval"``
            for encoders; default per model), or a callable ``metric(output, batch) -> (rows,)``
            (see :func:`_metric`; e.g. an accuracy on annotated items).
        loss_mask: ``(batch, pos)`` positions whose next-token loss counts (causal LMs).
        max_batch: the largest tiled batch one forward pass may run.
        progress: show a progress bar.
    """
    if mode not in ABLATION_MODES:
        raise ValueError(f"unknown ablation mode {mode!r}: choose from {', '.join(ABLATION_MODES)}")
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    groups = _normalise_groups(hm, groups)
    if max_batch < n:
        raise ValueError(f"max_batch={max_batch} is smaller than the {n} inputs; raise it or split the inputs")
    layers = sorted({l for g in groups for l, _ in g})
    replacement = hm.replacements(mode, reference, layers, seed=seed, base_batch=n)
    name, evaluate = _metric(hm, batch, kind, loss_mask)
    with torch.no_grad():
        clean = evaluate(hm.forward(batch), 1)

    chunks = _chunks(groups, max(1, max_batch // n))
    effects = torch.empty(len(groups), n)
    bar = _progress(len(groups), progress, f"sweep {hm.name}")
    for chunk in chunks:
        k = len(chunk)
        first = min(l for i in chunk for l, _ in groups[i])
        gate = torch.ones(k * n, hm.n_layers, hm.n_heads, device=hm.device)
        for j, i in enumerate(chunk):
            for layer, head in groups[i]:
                gate[j * n:(j + 1) * n, layer, head] = 0.0
        with torch.no_grad(), hm.gated(gate, replacement), _tiled_from(hm, first, n, k):
            values = evaluate(hm.forward(batch), k)
        effects[chunk] = (values.reshape(k, n) - clean).float().cpu()
        bar.update(k)
    bar.close()
    return SweepResult(groups, effects, clean.float().cpu(), mode, name, hm.n_layers, hm.n_heads)


def loop_sweep(hm: HeadModel, inputs, groups: Iterable | None = None, mode: str = "zero",
               reference=None, kind: str | None = None, loss_mask: torch.Tensor | None = None,
               seed: int = 0) -> SweepResult:
    """The same measurement as :func:`sweep`, one forward pass per group (the slow reference).

    The reference activations for mean/resample ablation are computed once, as in :func:`sweep`.
    """
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    groups = _normalise_groups(hm, groups)
    layers = sorted({l for g in groups for l, _ in g})
    replacement = hm.replacements(mode, reference, layers, seed=seed, base_batch=n)
    name, evaluate = _metric(hm, batch, kind, loss_mask)
    with torch.no_grad():
        clean = evaluate(hm.forward(batch), 1)
        rows = []
        for group in groups:
            gate = torch.ones(hm.n_layers, hm.n_heads, device=hm.device)
            for layer, head in group:
                gate[layer, head] = 0.0
            with hm.gated(gate, replacement):
                rows.append(evaluate(hm.forward(batch), 1) - clean)
    return SweepResult(groups, torch.stack(rows).float().cpu(), clean.float().cpu(), mode, name,
                       hm.n_layers, hm.n_heads)


def _progress(total: int, show: bool, desc: str):
    if show:
        from headlab.progress import tqdm  # text lines on the website (HEADLAB_PROGRESS=text)
        return tqdm(total=total, desc=desc)

    class _Quiet:
        def update(self, _n):
            pass

        def close(self):
            pass

    return _Quiet()
