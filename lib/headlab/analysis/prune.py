"""Pruning: remove heads in some order and watch what breaks, on average and in the tail.

A pruning *order* lists heads from first removed to last. Orders here:

* :func:`order_by` — one shot, by a precomputed importance score (least important
  first): average importance, worst-case importance, a quantile, a gradient score;
* :func:`iterative_order` — recompute every remaining head's importance with the
  already-removed heads ablated, and remove the least important each time;
* :func:`random_order` — the control.

:func:`pruning_curve` then evaluates the model with the first ``c`` heads of an
order removed, for many ``c`` at once (one batched sweep per evaluation set), on
as many named evaluation sets as you like (the average validation set and the
tail subsets). Removal is ablation through the gate before ``W_O`` (zero by
default, or mean), which for zero ablation is exactly pruning the head's slice
of ``W_O``.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from headlab.analysis.sweep import sweep
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head, parse_head
from headlab.heads.model import HeadModel
from headlab.metrics import Metric, next_token_loss
from headlab.progress import tqdm  # text lines on the website (HEADLAB_PROGRESS=text)

__all__ = ["EvalSet", "PruningCurve", "pruning_curve", "order_by", "random_order", "iterative_order",
           "window_loss", "pruning_curve_shared", "first_failure"]


@dataclass(init=False)
class EvalSet:
    """An evaluation set: inputs, the :class:`~headlab.metrics.Metric` measured on them, and whether
    higher metric values are better (accuracies) or worse (losses).

    Attributes:
        inputs: texts or a batch.
        metric: what is measured (default: the model's own metric); a kind name or a callable
            is taken as ``Metric(it)``.
        higher_is_better: True for accuracies, False for losses.
    """

    inputs: object
    metric: Metric
    higher_is_better: bool

    def __init__(self, inputs, metric: Metric | str | Callable | None = None, higher_is_better: bool = False):
        metric = Metric.of(metric)
        self.inputs, self.metric, self.higher_is_better = inputs, metric, bool(higher_is_better)


@dataclass
class PruningCurve:
    """Metric values with the first ``counts[i]`` heads of ``order`` removed.

    Attributes:
        order: heads, first removed first.
        counts: numbers of heads removed (``0`` is the unpruned model).
        values: per evaluation set, ``(len(counts), n_inputs)`` metric values.
        higher_is_better: per evaluation set.
    """

    order: list[Head]
    counts: list[int]
    values: dict[str, torch.Tensor]
    higher_is_better: dict[str, bool] = field(default_factory=dict)

    def mean(self, name: str) -> torch.Tensor:
        """Mean over inputs at each count: ``(len(counts),)``."""
        return self.values[name].mean(dim=1)

    def degradation(self, name: str) -> torch.Tensor:
        """How much worse than unpruned at each count (positive = worse), in the metric's units."""
        m = self.mean(name)
        return (m[0] - m) if self.higher_is_better.get(name, False) else (m - m[0])

    def first_failure(self, name: str, tolerance: float) -> int | None:
        """The smallest number of removed heads at which the set's mean degrades by more than
        ``tolerance`` (>= 0); ``None`` if it never does within the curve."""
        return first_failure(self.mean(name), self.counts, tolerance, self.higher_is_better.get(name, False))

    def to_json(self) -> dict:
        """The curve's order (heads as ``[layer, head]``), counts, mean per set and direction."""
        return {"order": [parse_head(h).to_json() for h in self.order], "counts": self.counts,
                "mean": {k: [round(float(x), 6) for x in self.mean(k)] for k in self.values},
                "higher_is_better": self.higher_is_better}


def first_failure(means, counts: Sequence[int], tolerance: float, higher_is_better: bool = False) -> int | None:
    """The first of ``counts`` at which a mean curve (``means[i]`` with ``counts[i]`` heads removed,
    ``counts[0]`` the reference) has degraded by more than ``tolerance`` (>= 0) from ``means[0]``;
    ``None`` if it never does. Works on stored curves as well as on a :class:`PruningCurve`."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    means = torch.as_tensor(means, dtype=torch.float64).flatten()
    if len(means) != len(counts):
        raise ValueError(f"{len(means)} curve values for {len(counts)} counts")
    worse = (means[0] - means) if higher_is_better else (means - means[0])
    bad = (worse > tolerance).nonzero().flatten()
    return int(counts[int(bad[0])]) if len(bad) else None


def order_by(score: torch.Tensor, ascending: bool = True) -> list[Head]:
    """Heads sorted by a ``(n_layers, n_heads)`` score, least important first (``ascending``).
    Ties keep layer-major order."""
    if score.dim() != 2:
        raise ValueError(f"score must be (n_layers, n_heads), got shape {tuple(score.shape)}")
    if torch.isnan(score).any():
        raise ValueError("score contains NaN: every head needs a score to be ordered")
    flat = score.flatten()
    idx = torch.argsort(flat if ascending else -flat, stable=True).tolist()
    return [Head(*divmod(i, score.shape[1])) for i in idx]


def random_order(hm: HeadModel, seed: int = 0) -> list[Head]:
    """Every head in a random order (the control)."""
    heads = hm.heads()
    random.Random(seed).shuffle(heads)
    return heads


def iterative_order(hm: HeadModel, inputs, by: str = "mean", *, ablation: Ablation | None = None,
                    metric: Metric | None = None, stop_after: int | None = None, progress: bool = False
                    ) -> list[Head]:
    """Greedy pruning order: at each step ablate the heads removed so far, measure every remaining
    head's effect on ``inputs``, and remove the one whose effect is smallest by ``by``
    (``"mean"`` or ``"worst"``, the largest effect on any input). ``stop_after``: order only that
    many heads (the rest follow in one-shot order of the last measurement). ``ablation`` (how the
    heads are removed, both those already pruned and the one measured) and ``metric`` as in
    :func:`~headlab.analysis.sweep.sweep`."""
    ablation, metric = Ablation.of(ablation), Metric.of(metric)
    if by not in ("mean", "worst"):
        raise ValueError(f"by must be 'mean' or 'worst', not {by!r}")
    remaining = hm.heads()
    removed: list[Head] = []
    limit = len(remaining) if stop_after is None else min(stop_after, len(remaining))
    bar = None
    if progress:
        bar = tqdm(total=limit, desc=f"iterative pruning ({by})")
    score = None
    while remaining and len(removed) < limit:
        with (hm.ablate(removed, ablation=ablation) if removed else contextlib.nullcontext()):
            result = sweep(hm, inputs, groups=[[h] for h in remaining], ablation=ablation, metric=metric)
        score = result.effects.mean(dim=1) if by == "mean" else result.effects.max(dim=1).values
        i = int(torch.argmin(score))
        removed.append(remaining.pop(i))
        score = torch.cat([score[:i], score[i + 1:]])
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    if remaining:
        rest = torch.argsort(score, stable=True).tolist()
        removed += [remaining[i] for i in rest]
    return removed


def pruning_curve(hm: HeadModel, order: Sequence[Head], eval_sets: dict[str, EvalSet],
                  counts: Sequence[int] | None = None, *, ablation: Ablation | None = None,
                  progress: bool = False) -> PruningCurve:
    """Evaluate every set with the first ``c`` heads of ``order`` removed, for each ``c`` in ``counts``
    (default: 0, 1, ..., all heads). ``ablation``: how the heads are removed (default: zero
    ablation); each set brings its own metric."""
    ablation = Ablation.of(ablation)
    order = [parse_head(h) for h in order]
    if sorted(order) != sorted(set(order)):
        raise ValueError("the pruning order names a head twice")
    hm.check_heads(order)
    counts = list(range(len(order) + 1)) if counts is None else sorted(set(int(c) for c in counts))
    if counts[0] < 0 or counts[-1] > len(order):
        raise ValueError(f"counts must lie between 0 and {len(order)}")
    if not eval_sets:
        raise ValueError("give at least one evaluation set")
    values, better = {}, {}
    groups = [list(order[:c]) for c in counts if c > 0]
    for name, es in eval_sets.items():
        if not isinstance(es, EvalSet):
            raise TypeError(f"eval_sets[{name!r}] must be an EvalSet, got {type(es).__name__}")
        result = sweep(hm, es.inputs, groups=groups, ablation=ablation, metric=es.metric, progress=progress)
        rows = [result.clean] if counts[0] == 0 else []
        rows += [result.clean + e for e in result.effects]
        values[name] = torch.stack(rows)
        better[name] = es.higher_is_better
    return PruningCurve(list(order), counts, values, better)


# ------------------------------------------------------------ many metrics, one set of inputs


def window_loss(output: torch.Tensor, batch) -> torch.Tensor:
    """``(batch,)`` mean next-token loss of each input (real positions only): a metric for
    :func:`pruning_curve_shared` (lower is better)."""

    return next_token_loss(output, batch["input_ids"], batch.get("attention_mask"), reduction="input")


def pruning_curve_shared(hm: HeadModel, order: Sequence[Head], inputs, metrics: dict[str, tuple[Callable, bool]],
                         counts: Sequence[int] | None = None, *, ablation: Ablation | None = None,
                         batch_size: int = 64, progress: bool = False) -> PruningCurve:
    """Like :func:`pruning_curve`, but every metric reads the *same* inputs, so each count costs one
    forward pass for all of them (e.g. the loss and several item accuracies on the same windows).

    ``metrics``: name -> ``(metric(output, batch) -> (batch,), higher_is_better)``; a metric may
    return NaN for inputs it does not score (an :class:`headlab.metrics.ItemMetric` on a window
    without items): those inputs are dropped from that metric's values (they are NaN at every count,
    since which inputs hold items does not depend on the ablation). ``ablation``: how the heads
    are removed (default: zero ablation).
    """
    ablation = Ablation.of(ablation)
    order = [parse_head(h) for h in order]
    if len(order) != len(set(order)):
        raise ValueError("the pruning order names a head twice")
    hm.check_heads(order)
    counts = list(range(len(order) + 1)) if counts is None else sorted(set(int(c) for c in counts))
    if counts[0] < 0 or counts[-1] > len(order):
        raise ValueError(f"counts must lie between 0 and {len(order)}")
    if not metrics:
        raise ValueError("give at least one metric")
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in metrics}
    bar = None
    if progress:
        bar = tqdm(total=len(counts), desc="pruning curve")
    for c in counts:
        ctx = hm.ablate(order[:c], ablation=ablation) if c > 0 else contextlib.nullcontext()
        with ctx, torch.no_grad():  # forward in chunks, score the whole batch (item metrics index windows)
            out = torch.cat([hm.forward({k: v[start:start + batch_size] for k, v in batch.items()})
                             for start in range(0, n, batch_size)])
            for name, (fn, _) in metrics.items():
                rows[name].append(fn(out, batch).float().cpu())
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    values, better = {}, {}
    for name, (_, higher) in metrics.items():
        v = torch.stack(rows[name])  # (len(counts), n)
        keep = ~torch.isnan(v[0])
        if not bool(keep.any()):
            raise ValueError(f"metric {name!r} scored no input (NaN everywhere)")
        if bool(torch.isnan(v[:, keep]).any()):
            raise ValueError(f"metric {name!r} is NaN on an input it scored without ablation")
        values[name], better[name] = v[:, keep], higher
    return PruningCurve(list(order), counts, values, better)
