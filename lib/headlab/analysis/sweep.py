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
from typing import Any, Iterable

import torch

from headlab.heads.ablation import Ablation, upgrade_arguments
from headlab.heads.head import Head, parse_head
from headlab.heads.model import HeadModel
from headlab.metrics import Metric
from headlab.schema import check_schema, schema_of

__all__ = ["sweep", "SweepResult", "loop_sweep", "SCHEMA"]

SCHEMA = schema_of("sweep")


@dataclass
class SweepResult:
    """Effects of ablating each group on each input.

    Attributes:
        groups: the ablated head groups, each a tuple of :class:`~headlab.heads.head.Head`.
        effects: ``(n_groups, n_inputs)``: metric(ablated) - metric(clean). For a
            causal LM the metric is the next-token loss (positive = the ablation
            hurts); for an encoder, 1 - cos of the pooled embedding to the clean
            one (clean = 0), or the self-retrieval loss.
        clean: ``(n_inputs,)`` the clean metric (zeros for ``cosine``).
        mode: the ablation mode (see :class:`~headlab.heads.ablation.Ablation`).
        kind: the metric's name (see :class:`~headlab.metrics.Metric`).
        n_layers: the model's number of layers.
        n_heads: the model's number of heads per layer.
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
        """The result as JSON (schema ``headlab.sweep/1``): each group's heads as ``[[layer, head], ...]``,
        its effect on every input and their mean (6 decimals)."""
        return {
            "schema": SCHEMA, "mode": self.mode, "metric": self.kind,
            "n_layers": self.n_layers, "n_heads": self.n_heads,
            "clean": [round(float(x), 6) for x in self.clean],
            "groups": [
                {"heads": [parse_head(h).to_json() for h in g],
                 "effects": [round(float(x), 6) for x in row],
                 "mean": round(float(row.mean()), 6)}
                for g, row in zip(self.groups, self.effects)
            ],
        }

    @classmethod
    def from_json(cls, data: dict, source: str = "the sweep") -> "SweepResult":
        """Read back what :meth:`to_json` wrote (effects as stored, rounded to 6 decimals).

        Raises:
            headlab.schema.SchemaError: not a sweep file, or a newer schema than this headlab reads.
        """
        check_schema(data, "sweep", source)
        groups = [tuple(parse_head(h) for h in g["heads"]) for g in data["groups"]]
        effects = torch.tensor([g["effects"] for g in data["groups"]], dtype=torch.float32)
        return cls(groups, effects.reshape(len(groups), len(data["clean"])),
                   torch.tensor(data["clean"], dtype=torch.float32), data["mode"], data["metric"],
                   data["n_layers"], data["n_heads"])


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


def _chunks(groups: list[tuple[Head, ...]], per_pass: int) -> list[list[int]]:
    """Indices of groups to run together: groups sharing their lowest layer, at most
    ``per_pass`` at a time (mixing lowest layers would recompute the shared blocks)."""
    by_first: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        by_first.setdefault(min(l for l, _ in group), []).append(i)
    return [idx[j:j + per_pass] for first in sorted(by_first) for idx in [by_first[first]]
            for j in range(0, len(idx), per_pass)]


def sweep(hm: HeadModel, inputs, groups: Iterable | None = None, *, ablation: Ablation | None = None,
          metric: Metric | None = None, max_batch: int = 256, progress: bool = False,
          **legacy: Any) -> SweepResult:
    """Ablate each group of heads in turn and measure the metric on every input.

    Args:
        hm: the model.
        inputs: texts or a batch (as accepted by :meth:`HeadModel.tokenize`).
        groups: ``None`` for every single head, or a list of groups (each a list of
            ``(layer, head)``; a bare ``(layer, head)`` is a group of one).
        ablation: how a head is removed (default: zero ablation), e.g.
            ``Ablation("mean", reference=texts)``.
        metric: what is measured on each input (default: the model's own metric, the
            next-token loss for a causal LM and ``1 - cos`` for an encoder), e.g.
            ``Metric("loss", loss_mask=mask)`` or an item metric (any callable
            ``metric(output, batch) -> (rows,)``, see :class:`~headlab.metrics.Metric`).
        max_batch: the largest tiled batch one forward pass may run.
        progress: show a progress bar.
        **legacy: headlab 0.1's ``mode=``, ``reference=``, ``seed=``, ``kind=``, ``loss_mask=``
            (deprecated: they become ``ablation=`` and ``metric=``, with a warning).
    """
    ablation, metric = upgrade_arguments("sweep", legacy, ablation=ablation, metric=metric)
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    groups = _normalise_groups(hm, groups)
    if max_batch < n:
        raise ValueError(f"max_batch={max_batch} is smaller than the {n} inputs; raise it or split the inputs")
    layers = sorted({l for g in groups for l, _ in g})
    replacement = ablation.replacements(hm, layers, base_batch=n)
    name, evaluate = metric.evaluator(hm, batch)
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
    return SweepResult(groups, effects, clean.float().cpu(), ablation.mode, name, hm.n_layers, hm.n_heads)


def loop_sweep(hm: HeadModel, inputs, groups: Iterable | None = None, *, ablation: Ablation | None = None,
               metric: Metric | None = None, **legacy: Any) -> SweepResult:
    """The same measurement as :func:`sweep`, one forward pass per group (the slow reference).

    The reference activations for mean/resample ablation are computed once, as in :func:`sweep`.
    Arguments as in :func:`sweep`.
    """
    ablation, metric = upgrade_arguments("loop_sweep", legacy, ablation=ablation, metric=metric)
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    groups = _normalise_groups(hm, groups)
    layers = sorted({l for g in groups for l, _ in g})
    replacement = ablation.replacements(hm, layers, base_batch=n)
    name, evaluate = metric.evaluator(hm, batch)
    with torch.no_grad():
        clean = evaluate(hm.forward(batch), 1)
        rows = []
        for group in groups:
            gate = torch.ones(hm.n_layers, hm.n_heads, device=hm.device)
            for layer, head in group:
                gate[layer, head] = 0.0
            with hm.gated(gate, replacement):
                rows.append(evaluate(hm.forward(batch), 1) - clean)
    return SweepResult(groups, torch.stack(rows).float().cpu(), clean.float().cpu(), ablation.mode, name,
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
