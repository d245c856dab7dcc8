"""Circuit discovery from node or edge scores, and faithfulness measured exactly under three ablations.

A *circuit* is a set of nodes (heads, or (head, position) cells) or of edges (sender head ->
receiver's q, k or v, sender -> logits; :func:`~headlab.analysis.edges.edge_list`). Run alone, it
keeps its nodes' outputs and every other node is ablated (Wang et al. 2023); an edge circuit keeps
its edges, and every other edge carries the sender's ablated output instead
(:func:`~headlab.analysis.edges.edge_circuit_run`). Its **faithfulness** is the share of
the metric it keeps::

    F = (m(circuit) - m(empty)) / (m(model) - m(empty))

with each ``m`` the metric's mean over the inputs: 1 for the whole model, 0 for the empty circuit.
The number depends on how the other nodes are removed (Miller et al. 2024), so
:func:`faithfulness` reports it under zero, mean and resample ablation side by side.

:func:`find_circuit` ranks the nodes by the absolute value of their scores (e.g. the effects of
:func:`~headlab.analysis.attribution.attribution_patch`) and finds a circuit that keeps a stated
share, measured exactly (one forward pass per candidate): ``"threshold"`` keeps the smallest
top-k of the ranking (EAP's rule, Syed et al. 2023); ``"greedy"`` starts from the whole model and
drops nodes (or edges) from the least to the most important whenever the share stays kept (ACDC's
rule, Conmy et al. 2023).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from headlab.analysis.attribution import checked_values
from headlab.analysis.edges import EdgeScores, edge_circuit_run, edge_list
from headlab.heads.ablation import Ablation
from headlab.heads.gate import gate_heads
from headlab.heads.head import format_head
from headlab.heads.model import HeadModel, check_model
from headlab.metrics import Metric

__all__ = ["find_circuit", "faithfulness", "circuit_metric", "Circuit", "Faithfulness", "default_ablations",
           "METHODS"]

METHODS = ("threshold", "greedy")


def default_ablations(reference) -> dict[str, Ablation]:
    """Zero ablation, and mean and resample ablation over ``reference`` (e.g. the corrupted inputs)."""
    return {"zero": Ablation(), "mean": Ablation("mean", reference=reference),
            "resample": Ablation("resample", reference=reference)}


def _check_keep(hm: HeadModel, keep, pos: int) -> torch.Tensor:
    E = len(edge_list(hm.n_layers, hm.n_heads))
    shapes = (f"({hm.n_layers}, {hm.n_heads}) (heads), ({hm.n_layers}, {hm.n_heads}, {pos}) (heads x positions) "
              f"or ({E},) (edges, in edge_list's order)")
    if not isinstance(keep, torch.Tensor) or tuple(keep.shape) not in ((hm.n_layers, hm.n_heads),
                                                                        (hm.n_layers, hm.n_heads, pos), (E,)):
        raise ValueError(f"a circuit is a boolean mask of shape {shapes}, got "
                         f"{tuple(getattr(keep, 'shape', ())) or type(keep).__name__}")
    if keep.dtype != torch.bool:
        raise ValueError(f"a circuit mask must be boolean (True = kept), got dtype {keep.dtype}")
    if not bool(keep.any()):
        raise ValueError("empty circuit: the mask keeps no node; keep at least one (the empty circuit is the "
                         "baseline, m(empty), that faithfulness is measured from)")
    return keep


def _runner(hm: HeadModel, batch: dict, ablation, metric):
    """``keep -> (n,)``: the metric on ``batch`` with every node outside ``keep`` ablated."""
    ablation = Ablation.of(ablation)
    _, scored = Metric.of(metric).evaluator(hm, batch)  # "kl": to the whole model's logits

    def evaluate(output: torch.Tensor, k: int) -> torch.Tensor:
        return checked_values(scored(output, k), metric)

    replacement = hm.replacements(ablation, range(hm.n_layers)) or {}
    edge_run = edge_circuit_run(hm, batch, evaluate, replacement)

    def run(keep: torch.Tensor) -> torch.Tensor:
        if keep.dim() == 1:
            return edge_run(keep)
        gates = keep.to(device=hm.device, dtype=torch.float32)
        gates = gates[:, None, :, None] if gates.dim() == 2 else gates.transpose(1, 2)[:, :, :, None]
        layers = [l for l in range(hm.n_layers) if not bool(keep[l].all())]

        def fn(l: int, z: torch.Tensor) -> torch.Tensor:  # (batch, pos, head, d_head)
            r = replacement.get(l)
            return gate_heads(z, gates[l][None], r(z) if callable(r) else r)

        with torch.no_grad(), hm.patch_z(fn, layers=layers) if layers else contextlib.nullcontext():
            return evaluate(hm.forward(batch), 1).float().cpu()

    return run


def circuit_metric(hm: HeadModel, inputs, keep: torch.Tensor, ablation=None, metric=None) -> torch.Tensor:
    """The metric ``(n,)`` of the circuit ``keep`` run alone: every node outside it ablated.

    Example::

        keep = torch.zeros(hm.n_layers, hm.n_heads, dtype=torch.bool); keep[1, 2] = True
        circuit_metric(hm, texts, keep, Ablation("mean", reference=other_texts), metric=diff)

    Args:
        hm: the model.
        inputs: texts or a batch.
        keep: boolean ``(n_layers, n_heads)`` (heads), ``(n_layers, n_heads, pos)`` (heads x
            positions) or ``(n_edges,)`` (edges, in :func:`~headlab.analysis.edges.edge_list`'s
            order; models without rotary embeddings), True for a node or edge of the circuit.
        ablation: an :class:`~headlab.heads.ablation.Ablation` (default: zero ablation).
        metric: a :class:`~headlab.metrics.Metric` or ``"kl"`` (to the full model's logits).

    Raises:
        ValueError: a mask of the wrong shape or dtype, or one that keeps nothing.
    """
    batch = check_model(hm, "circuit_metric").tokenize(inputs)
    return _runner(hm, batch, ablation, metric)(_check_keep(hm, keep, batch["input_ids"].shape[1]))


@dataclass(frozen=True)
class Faithfulness:
    """A circuit's faithfulness under one ablation (means over the inputs).

    Attributes:
        ablation: the name of the ablation.
        circuit, model, empty: the mean metric of the circuit alone, of the whole model and of the
            empty circuit (every node ablated); :attr:`share` is the faithfulness.
    """

    ablation: str
    circuit: float
    model: float
    empty: float

    @property
    def share(self) -> float:
        """``(circuit - empty) / (model - empty)``: 1 keeps the whole model's metric, 0 none of it."""
        return (self.circuit - self.empty) / (self.model - self.empty)


def _faithfulness(name: str, run, keep: torch.Tensor) -> Faithfulness:
    model = float(run(torch.ones_like(keep)).mean())
    empty = float(run(torch.zeros_like(keep)).mean())
    if model == empty:
        raise ValueError(f"under {name} ablation the whole model and the empty circuit score the same ({model:.4g}): "
                         "faithfulness is undefined; choose another metric or ablation")
    return Faithfulness(name, float(run(keep).mean()), model, empty)


def faithfulness(hm: HeadModel, inputs, keep: torch.Tensor, *, ablations: dict | None = None,
                 reference=None, metric=None) -> dict[str, Faithfulness]:
    """The exact faithfulness of the circuit ``keep`` under each ablation, side by side.

    Example::

        table = faithfulness(hm, clean, keep, reference=corrupted, metric=diff)
        {name: round(f.share, 3) for name, f in table.items()}  # {"zero": ..., "mean": ..., "resample": ...}

    Args:
        hm, inputs, keep, metric: as in :func:`circuit_metric`.
        ablations: name -> :class:`~headlab.heads.ablation.Ablation`; default
            :func:`default_ablations` of ``reference``.
        reference: the texts mean and resample ablation draw from (needed for the default).

    Raises:
        ValueError: no ``reference`` and no ``ablations``, an empty or misshapen circuit, an
            ablation under which the model and the empty circuit score the same.
    """
    if ablations is None:
        if reference is None:
            raise ValueError("give reference=<texts> (mean and resample ablation draw from it) or ablations={...}")
        ablations = default_ablations(reference)
    if not isinstance(ablations, dict) or not ablations:
        raise ValueError(f"ablations must be a non-empty dict name -> Ablation, got {ablations!r:.80}")
    batch = check_model(hm, "faithfulness").tokenize(inputs)
    keep = _check_keep(hm, keep, batch["input_ids"].shape[1])
    return {name: _faithfulness(name, _runner(hm, batch, a, metric), keep) for name, a in ablations.items()}


@dataclass
class Circuit:
    """A circuit found by :func:`find_circuit`.

    Attributes:
        keep: the boolean mask (as :func:`circuit_metric` takes it).
        nodes: the nodes, most important first (``"1.2"``, or ``"1.2@5"`` for head 1.2 at position 5),
            or the edges (``"0.3->1.2.k"``, ``"1.2->logits"``).
        share: the share of the metric it was asked to keep, under ``ablation``.
        method: ``"threshold"`` or ``"greedy"``.
        ablation: the name of the ablation the search measured with.
        faithfulness: name -> :class:`Faithfulness`, under each ablation.
        evaluated: how many candidate circuits the search ran.
    """

    keep: torch.Tensor
    nodes: list[str]
    share: float
    method: str
    ablation: str
    faithfulness: dict[str, Faithfulness] = field(default_factory=dict)
    evaluated: int = 0

    def table(self) -> str:
        """The faithfulness table in Markdown: one row per ablation."""
        rows = [f"| {f.ablation} | {f.circuit:.4g} | {f.model:.4g} | {f.empty:.4g} | {f.share:.3f} |"
                for f in self.faithfulness.values()]
        return "\n".join(["| ablation | circuit | model | empty | faithfulness |", "|---|---|---|---|---|", *rows])


def find_circuit(hm: HeadModel, clean, corrupted, scores: torch.Tensor, share: float = 0.8, *,
                 method: str = "threshold", ablation: str = "mean", metric=None,
                 ablations: dict | None = None) -> Circuit:
    """The smallest circuit (by the scores' ranking) that keeps ``share`` of the metric on ``clean``.

    Example::

        # (n, L, H)
        effects = attribution_patch(hm, clean, corrupted, metric=diff, effect=True)
        circuit = find_circuit(hm, clean, corrupted, effects, share=0.8, metric=diff)
        circuit.nodes, circuit.table()  # the heads; faithfulness under zero, mean, resample

    Args:
        hm: the model.
        clean: the inputs the circuit must do the task on.
        corrupted: the reference inputs of mean and resample ablation (the default ``ablations``).
        scores: each node's importance (ranked by absolute value; with an input axis first, by the
            absolute value of the batch mean): ``(n_layers, n_heads)`` or ``(n_layers, n_heads,
            pos)``, optionally ``(n, ...)``; or :class:`~headlab.analysis.edges.EdgeScores` for an
            edge circuit.
        share: in ``(0, 1]``, the faithfulness to reach.
        method: ``"threshold"`` (smallest top-k) or ``"greedy"`` (drop from the least important).
        ablation: the name, in ``ablations``, of the ablation the search measures with.
        metric: as in :func:`circuit_metric`; default: the model's own.
        ablations: name -> :class:`~headlab.heads.ablation.Ablation` (default:
            :func:`default_ablations` of ``corrupted``); the circuit's faithfulness is reported
            under each.

    Returns:
        A :class:`Circuit`.

    Raises:
        ValueError: ``share`` outside ``(0, 1]``, an unknown method or ablation name, scores of a
            shape that fits no node set or holding NaN, clean and corrupted inputs of different shapes.
    """
    hm = check_model(hm, "find_circuit")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1] (the faithfulness to keep), got {share!r}")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: choose from {', '.join(map(repr, METHODS))}")
    ablations = default_ablations(corrupted) if ablations is None else ablations
    if not isinstance(ablations, dict) or ablation not in ablations:
        raise ValueError(f"unknown ablation {ablation!r}: choose from "
                         f"{', '.join(map(repr, ablations)) if isinstance(ablations, dict) else 'a dict of ablations'}")
    batch, other = hm.tokenize(clean), hm.tokenize(corrupted)
    n, pos = batch["input_ids"].shape
    if other["input_ids"].shape != batch["input_ids"].shape:
        raise ValueError(f"clean inputs {tuple(batch['input_ids'].shape)} and corrupted inputs "
                         f"{tuple(other['input_ids'].shape)} differ in shape: give each clean input its corrupted twin")
    E = len(edge_list(hm.n_layers, hm.n_heads))
    scores = scores.vector() if isinstance(scores, EdgeScores) else torch.as_tensor(scores).detach().float().cpu()
    node_shapes = ((hm.n_layers, hm.n_heads), (hm.n_layers, hm.n_heads, pos), (E,))
    if tuple(scores.shape[1:]) in node_shapes and scores.shape[0] == n and tuple(scores.shape) not in node_shapes:
        scores = scores.mean(0)
    if tuple(scores.shape) not in node_shapes:
        raise ValueError(f"scores of shape {tuple(scores.shape)} fit no node set: give ({hm.n_layers}, {hm.n_heads}) "
                         f"(heads), ({hm.n_layers}, {hm.n_heads}, {pos}) (heads x positions) or ({E},) (edges), "
                         f"optionally with the {n} inputs first, or EdgeScores")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("scores hold NaN or inf: every node needs a finite score to be ranked")
    runs = {name: _runner(hm, batch, a, metric) for name, a in ablations.items()}
    order = torch.argsort(scores.abs().flatten(), descending=True, stable=True)
    ends = _faithfulness(ablation, runs[ablation], torch.ones(scores.shape, dtype=torch.bool))

    def kept(keep: torch.Tensor) -> float:
        return (float(runs[ablation](keep).mean()) - ends.empty) / (ends.model - ends.empty)

    keep, evaluated = torch.zeros(scores.numel(), dtype=torch.bool), 0
    if method == "threshold":
        for node in order:
            keep[node] = True
            evaluated += 1
            if kept(keep.reshape(scores.shape)) >= share:
                break
    else:
        keep[:] = True
        for node in order.flip(0):
            keep[node] = False
            evaluated += 1
            if kept(keep.reshape(scores.shape)) < share:
                keep[node] = True
    keep = keep.reshape(scores.shape)
    if scores.dim() == 1:
        edges = edge_list(hm.n_layers, hm.n_heads)
        names = [f"{ls}.{hs}->" + ("logits" if lr == hm.n_layers else f"{lr}.{hr}.{'qkv'[c]}")
                 for ls, hs, lr, hr, c in (edges[int(i)] for i in order)]
        names = [name for name, i in zip(names, order) if keep[int(i)]]
    else:
        cells = [tuple(int(i) for i in torch.unravel_index(node, scores.shape)) for node in order]
        names = [format_head(c[:2]) + (f"@{c[2]}" if len(c) == 3 else "") for c in cells if keep[c]]
    return Circuit(keep, names, float(share), method, ablation,
                   {name: _faithfulness(name, run, keep) for name, run in runs.items()}, evaluated)
