"""Ablation effects under several metrics at once: one forward pass per ablated group, every
metric read from the same output.

:func:`~headlab.analysis.sweep.sweep` measures one metric per call. A verdict that must hold
under two metrics and three ablation modes would need six sweeps of the same heads; here the
metrics are computed together from each ablated forward pass, and compared with the clean pass
of the same inputs. A metric is any callable ``metric(output, clean, batch) -> (n_inputs,)``
returning how much *worse* the ablated output is on each input (so that a positive effect
always means "removing the group hurts"); :func:`causal_lm_metrics` and
:func:`encoder_metrics` build the book's usual ones.

The numbers equal those of :func:`~headlab.analysis.sweep.sweep` for the same metric
(``tests/test_importance_stats.py`` checks it on the next-token loss); the loop is slower than the
batched sweep per metric, faster as soon as there are two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel
from headlab.metrics import ItemMetric, mean_pool, next_token_loss, retrieval_loss
from headlab.progress import tqdm

__all__ = ["GroupEffects", "group_effects", "causal_lm_metrics", "encoder_metrics", "kl_from_clean",
           "similarity_shift"]

EffectMetric = Callable[[torch.Tensor, torch.Tensor, dict], torch.Tensor]


@dataclass(frozen=True)
class GroupEffects:
    """Per-group, per-input effects under every metric.

    Attributes:
        groups: the ablated groups, each a tuple of heads.
        effects: metric name -> ``(n_groups, n_inputs)`` float64 (NaN where a metric is
            undefined for an input, e.g. a window without the phenomenon).
        mode: the ablation mode.
    """

    groups: tuple[tuple[Head, ...], ...]
    effects: dict[str, torch.Tensor]
    mode: str

    def by_head(self, metric: str, n_layers: int, n_heads: int) -> torch.Tensor:
        """``(n_layers, n_heads, n_inputs)`` for the single-head groups of ``metric`` (NaN where unmeasured)."""
        e = self.effects[metric]
        out = torch.full((n_layers, n_heads, e.shape[1]), float("nan"), dtype=e.dtype)
        for i, g in enumerate(self.groups):
            if len(g) == 1:
                out[g[0][0], g[0][1]] = e[i]
        return out


def _groups(hm: HeadModel, groups) -> tuple[tuple[Head, ...], ...]:
    if groups is None:
        return tuple((h,) for h in hm.heads())
    out = []
    for g in groups:
        out.append(tuple(hm.check_heads(list(g))))  # refuses an empty group, naming it
    if not out:
        raise ValueError("no groups to ablate: pass None for every single head")
    return tuple(out)


def group_effects(hm: HeadModel, inputs, metrics: Mapping[str, EffectMetric], groups: Sequence | None = None, *,
                  ablation: Ablation | None = None, progress: bool = False) -> GroupEffects:
    """Ablate each group in turn and read every metric from the same forward pass.

    Args:
        hm: the model.
        inputs: texts or a batch (anything :meth:`HeadModel.tokenize` reads).
        metrics: name -> ``metric(output, clean_output, batch) -> (n_inputs,)``, the harm done on
            each input (positive: the ablation hurts).
        groups: ``None`` for every single head, or a list of groups of ``(layer, head)``.
        ablation: zero (default), mean or resample ablation; the replacement is computed once.
        progress: show text progress.

    Returns:
        A :class:`GroupEffects`.
    """
    if not metrics:
        raise ValueError("give at least one metric, e.g. causal_lm_metrics(...)")
    ablation = Ablation.of(ablation)
    batch = hm.tokenize(inputs)
    groups = _groups(hm, groups)
    layers = sorted({l for g in groups for l, _ in g})
    replacement = hm.replacements(ablation, layers, base_batch=batch["input_ids"].shape[0])
    n = batch["input_ids"].shape[0]
    out = {name: torch.empty(len(groups), n, dtype=torch.float64) for name in metrics}
    with torch.no_grad():
        clean = hm.forward(batch)
        bar = tqdm(total=len(groups), desc=f"{hm.name}: {ablation.mode} ablation") if progress else None
        for i, group in enumerate(groups):
            gate = torch.ones(hm.n_layers, hm.n_heads, device=hm.device)
            for layer, head in group:
                gate[layer, head] = 0.0
            with hm.gated(gate, replacement):
                output = hm.forward(batch)
            for name, metric in metrics.items():
                value = metric(output, clean, batch)
                if value.shape != (n,):
                    raise ValueError(f"metric {name!r} returned shape {tuple(value.shape)}; "
                                     f"it must return one value per input, ({n},)")
                out[name][i] = value.double().cpu()
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    return GroupEffects(groups, out, ablation.mode)


# ------------------------------------------------------------------------ the book's metrics


def kl_from_clean(output: torch.Tensor, clean: torch.Tensor, batch: dict) -> torch.Tensor:
    """Per input, the mean over real predicting positions of ``KL(p_clean || p_ablated)`` in nats."""
    mask = batch["attention_mask"][:, 1:].bool()
    logp = F.log_softmax(output[:, :-1].double(), dim=-1)
    logq = F.log_softmax(clean[:, :-1].double(), dim=-1)
    kl = (logq.exp() * (logq - logp)).sum(-1)  # (batch, pos - 1)
    return (kl * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def causal_lm_metrics(items: Mapping[str, ItemMetric] | None = None) -> dict[str, EffectMetric]:
    """The loss increase, the divergence from the clean predictions, and for each annotated
    phenomenon (an :class:`~headlab.metrics.ItemMetric` over the same windows) the margin and the
    accuracy it loses (``"<name> margin"``, ``"<name> accuracy"``; NaN for a window without items).
    """
    def loss(output, clean, batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        return next_token_loss(output, ids, mask).double() - next_token_loss(clean, ids, mask).double()

    metrics: dict[str, EffectMetric] = {"loss": loss, "kl": kl_from_clean}
    for name, item in (items or {}).items():
        for score in ("margin", "accuracy"):
            metric = ItemMetric(item.doc, item.pos, item.correct, item.competitors, item.n_windows, score)

            def lost(output, clean, batch, metric=metric):
                return metric(clean, batch).double() - metric(output, batch).double()

            metrics[f"{name} {score}"] = lost
    return metrics


def similarity_shift(pooled: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """Per sentence ``i``: the mean over the other sentences ``j`` of
    ``|cos(e_i, c_j) - cos(c_i, c_j)|``, how far the ablated embedding ``e_i`` moves the
    similarities a search would read (``c``: the clean embeddings)."""
    e, c = F.normalize(pooled.double(), dim=-1), F.normalize(clean.double(), dim=-1)
    n = len(c)
    if n < 2:
        raise ValueError("a similarity shift needs at least two sentences")
    moved = (e @ c.T - c @ c.T).abs()
    moved.fill_diagonal_(0.0)
    return moved.sum(-1) / (n - 1)


def encoder_metrics() -> dict[str, EffectMetric]:
    """For a sentence encoder: ``"cosine"`` (1 - cos of the pooled embedding with its clean self),
    ``"similarity"`` (:func:`similarity_shift`) and ``"retrieval"`` (the InfoNCE self-retrieval
    loss at temperature 0.05, minus its clean value: near zero when retrieval is saturated)."""
    def pooled(output, batch):
        return mean_pool(output, batch["attention_mask"]).double()

    def cosine(output, clean, batch):
        e, c = pooled(output, batch), pooled(clean, batch)
        return 1.0 - F.cosine_similarity(e, c, dim=-1)

    def similarity(output, clean, batch):
        return similarity_shift(pooled(output, batch), pooled(clean, batch))

    def retrieval(output, clean, batch):
        c = pooled(clean, batch)
        return retrieval_loss(pooled(output, batch), c).double() - retrieval_loss(c, c).double()

    return {"cosine": cosine, "similarity": similarity, "retrieval": retrieval}
