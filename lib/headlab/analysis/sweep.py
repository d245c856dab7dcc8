"""Many ablations in few forward passes.

:func:`sweep` measures the effect of ablating each of many head groups (by default
every single head; pairs within a layer and random groups across layers alike) on
every input, and returns it **per input**. It equals one forward pass per group
(:func:`loop_sweep`) to float rounding, and saves three kinds of work:

* **One gate value per example.** The inputs are tiled once per group of a chunk, each tile
  with its own gate (:meth:`HeadModel.gated`), so one forward pass runs several ablations.
* **Nothing below the gate is computed twice.** Removing a head of layer ``l`` changes
  nothing before that layer's output projection ``W_O``. The clean pass records every
  block's output; a chunk whose lowest ablated layer is ``l`` replays the recorded
  outputs of blocks ``0 .. l-1`` instead of running them, runs block ``l``'s attention
  once on the untiled inputs, and tiles only at the gate (the input of ``W_O``), where
  the ablations start to differ. ``W_O``'s output is viewed as ``(k, n, pos, d_model)``
  so that the block's residual add broadcasts the clean stream ``(n, pos, d_model)``
  over the ``k`` tiles; the block's output is flattened back to ``(k * n, ...)`` for the
  blocks above, whose batch-shaped arguments (masks) are tiled on the way in. The replay and
  the tiling are edits of the forward pass, so the head interface owns them
  (:mod:`headlab.heads.replay`); this module only plans the chunks and reads the metric.
* **Tiles sized for the machine.** Element-wise work (GELU, norms, residual adds) is bound
  by memory: on a CPU a tile far larger than the cache runs it several times slower per row.
  :func:`~headlab.heads.replay.groups_per_pass` picks the groups per pass from the widest activation of one copy
  of the inputs (measured in the clean pass) and a byte budget (:func:`~headlab.heads.replay.tile_budget`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterable

import torch

from headlab.heads.ablation import Ablation
from headlab.heads.gate import GateEdit
from headlab.heads.head import Head, parse_head
from headlab.heads.model import HeadModel, check_model
from headlab.heads.replay import CleanRecord, chunk_plan, groups_per_pass, record_budget, tile_budget, tiled_from_gate
from headlab.metrics import Metric
from headlab.progress import tqdm
from headlab.schema import SchemaError, check_schema, schema_of

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
        per_pass: how many groups one forward pass ran (``None`` for a result read from JSON).
    """

    groups: list[tuple[Head, ...]]
    effects: torch.Tensor
    clean: torch.Tensor
    mode: str
    kind: str
    n_layers: int
    n_heads: int
    per_pass: int | None = None

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
        _check_fields(data, source)
        try:
            groups = [tuple(parse_head(h) for h in g["heads"]) for g in data["groups"]]
        except (TypeError, ValueError) as err:
            raise SchemaError(f"{source}: a group's heads are not [[layer, head], ...] ({err})") from None
        effects = torch.tensor([g["effects"] for g in data["groups"]], dtype=torch.float32)
        return cls(groups, effects.reshape(len(groups), len(data["clean"])),
                   torch.tensor(data["clean"], dtype=torch.float32), data["mode"], data["metric"],
                   data["n_layers"], data["n_heads"])


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_fields(data: dict, source: str) -> None:
    """Raise a :class:`SchemaError` naming the first field of a sweep file that is missing or malformed."""
    def bad(what: str, value) -> SchemaError:
        return SchemaError(f"{source} is not a sweep as SweepResult.to_json writes it: {what}, got "
                           f"{_short(value)}; read a file written by to_json (or python -m headlab sweep --json)")

    for key in ("mode", "metric", "n_layers", "n_heads", "clean", "groups"):
        if key not in data:
            raise SchemaError(f"{source} is not a sweep: it has no {key!r} field (fields: {sorted(data)}); "
                              "read a file written by SweepResult.to_json")
    for key in ("n_layers", "n_heads"):
        if isinstance(data[key], bool) or not isinstance(data[key], int) or data[key] < 1:
            raise bad(f"{key!r} must be a positive int", data[key])
    clean = data["clean"]
    if not isinstance(clean, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in clean):
        raise bad("'clean' must be a list of numbers, one per input", clean)
    if not isinstance(data["groups"], list):
        raise bad("'groups' must be a list of {'heads': [[layer, head], ...], 'effects': [...]}", data["groups"])
    for i, group in enumerate(data["groups"]):
        if not isinstance(group, dict) or not isinstance(group.get("heads"), list) \
                or not isinstance(group.get("effects"), list):
            raise bad(f"group {i} must be {{'heads': [[layer, head], ...], 'effects': [...]}}", group)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in group["effects"]):
            raise bad(f"group {i}'s effects must be numbers", group["effects"])
        if len(group["effects"]) != len(clean):
            raise bad(f"group {i} must have one effect per input ({len(clean)}, as 'clean')", group["effects"])


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


def sweep(hm: HeadModel, inputs, groups: Iterable | None = None, *, ablation: Ablation | None = None,
          metric: Metric | None = None, max_batch: int | None = None, per_pass: int | None = None,
          progress: bool = False) -> SweepResult:
    """Ablate each group of heads in turn and measure the metric on every input.

    Args:
        hm: the model.
        inputs: texts or a batch (as accepted by :meth:`HeadModel.tokenize`).
        groups: ``None`` for every single head, or a list of groups (each a list of
            ``(layer, head)``; a bare ``(layer, head)`` is a group of one).
        ablation: how a head is removed (default: zero ablation), e.g.
            ``Ablation("mean", reference=texts)``.
        metric: what is measured on each input (default: the model's own metric,
            :func:`headlab.metrics.default_kind`), e.g. ``Metric("loss", loss_mask=mask)`` or an item
            metric (any callable ``metric(output, batch) -> (rows,)``, see :class:`~headlab.metrics.Metric`).
        max_batch: the largest tiled batch (in inputs) one forward pass may run (default: no cap).
        per_pass: how many groups one forward pass runs (default: ``groups_per_pass`` of this
            module, from the widest activation of one copy of the inputs and ``tile_budget``).
        progress: show a progress bar.

    Raises:
        ValueError: bad groups, ``max_batch`` or ``per_pass``, or a metric that does not return one
            value per input.
    """
    hm = check_model(hm, "sweep")
    ablation, metric = Ablation.of(ablation), Metric.of(metric)
    batch = hm.tokenize(inputs)
    n, pos = batch["input_ids"].shape
    groups = _normalise_groups(hm, groups)
    if max_batch is not None and max_batch < n:
        raise ValueError(f"max_batch={max_batch} is smaller than the {n} inputs; raise it or split the inputs")
    if per_pass is not None and (isinstance(per_pass, bool) or not isinstance(per_pass, int) or per_pass < 1):
        raise ValueError(f"per_pass must be a positive int (groups per forward pass), got {per_pass!r}")
    layers = sorted({l for g in groups for l, _ in g})
    replacement = hm.replacements(ablation, layers, base_batch=n)
    itemsize = next(hm.model.parameters()).element_size()
    stream_bytes = hm.n_layers * n * pos * hm.d_model * itemsize  # every block's clean output
    record = CleanRecord(hm, n * pos, keep=stream_bytes <= record_budget(hm.device))
    with torch.no_grad():
        with record.recording():
            name, evaluate = metric.evaluator(hm, batch)  # an encoder's runs the clean pass
            output = None if record.seen else hm.forward(batch)
        if output is None:  # the clean output, from the recorded blocks where they were kept
            with record.replaying(hm.n_layers if record.keep else 0):
                output = hm.forward(batch)
        clean = evaluate(output, 1)

    cap = max(len(c) for c in chunk_plan(groups, len(groups))) if max_batch is None else max_batch // n
    if per_pass is None:
        per_pass = groups_per_pass(n * pos * record.width * itemsize, tile_budget(hm.device), cap)
    per_pass = min(per_pass, cap)
    effects = torch.empty(len(groups), n)
    bar = _progress(len(groups), progress, f"sweep {hm.name}")
    for chunk in chunk_plan(groups, per_pass):
        k = len(chunk)
        first = min(l for i in chunk for l, _ in groups[i])
        gate = torch.ones(k, n, hm.n_layers, hm.n_heads, device=hm.device)
        for j, i in enumerate(chunk):
            for layer, head in groups[i]:
                gate[j, :, layer, head] = 0.0
        below = first if record.keep else 0
        tiles = contextlib.nullcontext()
        if k > 1:  # layer `first`'s gate goes with the tiling, after the interface's gate
            own = torch.ones_like(gate)
            own[:, :, first] = gate[:, :, first]
            gate[:, :, first] = 1.0
            tiles = tiled_from_gate(hm, first, n, k, GateEdit(own.flatten(0, 1), replacement))
        with torch.no_grad(), hm.gated(gate.flatten(0, 1), replacement), record.replaying(below), tiles:
            values = evaluate(hm.forward(batch), k)
        effects[chunk] = (values.reshape(k, n) - clean).float().cpu()
        bar.update(k)
    bar.close()
    return SweepResult(groups, effects, clean.float().cpu(), ablation.mode, name, hm.n_layers, hm.n_heads,
                       per_pass)


def loop_sweep(hm: HeadModel, inputs, groups: Iterable | None = None, *, ablation: Ablation | None = None,
               metric: Metric | None = None) -> SweepResult:
    """The same measurement as :func:`sweep`, one forward pass per group (the slow reference).

    The reference activations for mean/resample ablation are computed once, as in :func:`sweep`.
    Arguments as in :func:`sweep`.
    """
    ablation, metric = Ablation.of(ablation), Metric.of(metric)
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    groups = _normalise_groups(hm, groups)
    layers = sorted({l for g in groups for l, _ in g})
    replacement = hm.replacements(ablation, layers, base_batch=n)
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
        return tqdm(total=total, desc=desc)  # text lines on the website (HEADLAB_PROGRESS=text)
    return SimpleNamespace(update=lambda _n: None, close=lambda: None)
