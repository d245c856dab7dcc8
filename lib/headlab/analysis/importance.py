"""How unevenly the work is divided: head importance measured three ways.

1. **Ablation deltas** (causal effect): remove a head (zero, mean or resample
   ablation through the gate before ``W_O``) and measure the metric change *per
   input*. Summaries keep the input dimension in view: mean, worst case
   (largest effect on any input), high quantiles, and means over named subsets
   of inputs (e.g. long-distance agreement only).
2. **Gradient importance** (Michel et al., 2019): ``|d metric / d g_h|`` at the
   clean model, averaged over inputs — one backward pass instead of one forward
   per head, a first-order guess of the ablation effect.
3. **Group ablations**: remove pairs and larger sets. The *interaction* of a pair
   is ``effect(a+b) - effect(a) - effect(b)``; positive means the heads back each
   other up (single ablations underestimate removing both), negative means
   their effects overlap.

Effects are signed: for a causal LM the metric is the next-token loss, so a
positive effect means the head helps. Tail statistics (top-k share, Lorenz
curve, Gini) use the positive part of the mean effect, since a head whose
removal *lowers* the loss carries no share of the work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import combinations
from typing import Iterable, Sequence

import numpy as np
import torch

from headlab.analysis.sweep import SweepResult, sweep
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel, check_model
from headlab.metrics import Metric

__all__ = [
    "Importance", "head_importance", "top_k_share", "lorenz_curve",
    "gradient_importance", "rank_disagreements",
    "PairEffects", "pair_effects", "subset_effects", "backup_heads",
]


# ------------------------------------------------------------------ ablation deltas


@dataclass
class Importance:
    """Per-head, per-input ablation effects ``(n_layers, n_heads, n_inputs)`` and their summaries."""

    effects: torch.Tensor
    mode: str
    kind: str

    @classmethod
    def from_sweep(cls, result: SweepResult) -> "Importance":
        """The single-head effects of a sweep over every head (``groups=None``)."""
        by_head = result.by_head()
        if torch.isnan(by_head).any():
            raise ValueError("the sweep did not cover every single head; run sweep(hm, inputs) with groups=None")
        return cls(by_head, result.mode, result.kind)

    @property
    def n_layers(self) -> int:
        """The model's number of layers."""
        return self.effects.shape[0]

    @property
    def n_heads(self) -> int:
        """The model's number of heads per layer."""
        return self.effects.shape[1]

    def mean(self, inputs: Sequence[int] | torch.Tensor | None = None) -> torch.Tensor:
        """Mean effect over all inputs, or over the ``inputs`` subset (indices or bool mask): ``(L, H)``."""
        return self._select(inputs).mean(dim=-1)

    def worst(self, inputs=None) -> torch.Tensor:
        """Worst case: the largest effect on any single input: ``(L, H)``."""
        return self._select(inputs).max(dim=-1).values

    def quantile(self, q: float, inputs=None) -> torch.Tensor:
        """The ``q`` quantile of the effect over inputs: ``(L, H)``."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        return torch.quantile(self._select(inputs), q, dim=-1)

    def _select(self, inputs) -> torch.Tensor:
        if inputs is None:
            return self.effects
        idx = torch.as_tensor(inputs)
        if idx.dtype == torch.bool:
            if idx.shape != (self.effects.shape[-1],):
                raise ValueError(f"a boolean subset needs one entry per input ({self.effects.shape[-1]}), "
                                 f"got shape {tuple(idx.shape)}")
            idx = idx.nonzero().flatten()
        if idx.numel() == 0:
            raise ValueError("the input subset is empty")
        return self.effects[..., idx]

    def ranking(self, by: str = "mean", inputs=None) -> list[Head]:
        """Heads sorted from most to least important by ``"mean"``, ``"worst"`` or ``"q<NN>"`` (e.g. ``"q90"``)."""
        if by == "mean":
            score = self.mean(inputs)
        elif by == "worst":
            score = self.worst(inputs)
        elif by.startswith("q") and by[1:].isdigit():
            score = self.quantile(int(by[1:]) / 100, inputs)
        else:
            raise ValueError(f"rank by 'mean', 'worst' or 'q<percent>' (e.g. 'q90'), not {by!r}")
        flat = score.flatten()
        order = torch.argsort(flat, descending=True, stable=True).tolist()
        return [divmod(i, self.n_heads) for i in order]

    def hidden_in_the_tail(self, mean_below: float, worst_above: float) -> list[tuple[Head, float, float, int]]:
        """Heads whose mean effect is small (< ``mean_below``) but whose worst-case effect is large
        (> ``worst_above``): ``[(head, mean, worst, input index of the worst case)]``, worst first."""
        mean, worst = self.mean(), self.worst()
        arg = self.effects.argmax(dim=-1)
        out = [((l, h), float(mean[l, h]), float(worst[l, h]), int(arg[l, h]))
               for l in range(self.n_layers) for h in range(self.n_heads)
               if mean[l, h] < mean_below and worst[l, h] > worst_above]
        return sorted(out, key=lambda row: -row[2])


def head_importance(hm: HeadModel, inputs, *, ablation: Ablation | None = None, metric: Metric | None = None,
                    progress: bool = False) -> Importance:
    """Every single head's ablation effect on every input (one batched :func:`~headlab.analysis.sweep.sweep`).

    ``ablation``, ``metric`` and ``progress`` as in :func:`~headlab.analysis.sweep.sweep`.
    """
    return Importance.from_sweep(sweep(hm, inputs, ablation=ablation, metric=metric, progress=progress))


# --------------------------------------------------------------- heaviness of the tail


def _shares(values) -> np.ndarray:
    v = np.asarray(torch.as_tensor(values).detach().cpu(), dtype=float).ravel()
    if v.size == 0:
        raise ValueError("no values")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    return np.clip(v, 0.0, None)


def top_k_share(values, k: int) -> float:
    """Share of the total (positive) effect carried by the ``k`` most important heads."""
    v = _shares(values)
    if not 1 <= k <= v.size:
        raise ValueError(f"k must be between 1 and {v.size}, got {k}")
    total = v.sum()
    if total == 0:
        raise ValueError("no head has a positive effect: the share is undefined")
    return float(np.sort(v)[::-1][:k].sum() / total)


def lorenz_curve(values) -> tuple[np.ndarray, np.ndarray]:
    """Lorenz curve of the positive effects: ``(x, y)`` with ``x`` the fraction of heads (least
    important first) and ``y`` the fraction of the total effect they carry; both start at 0, end at 1."""
    v = np.sort(_shares(values))
    total = v.sum()
    if total == 0:
        raise ValueError("no head has a positive effect: the curve is undefined")
    x = np.arange(v.size + 1) / v.size
    y = np.concatenate([[0.0], np.cumsum(v) / total])
    return x, y


# ------------------------------------------------------------------- gradient importance


def gradient_importance(hm: HeadModel, inputs, *, metric: Metric | None = None, batch_size: int = 32
                        ) -> torch.Tensor:
    """Per-input gate gradients ``(n_inputs, n_layers, n_heads)``; Michel et al.'s importance is
    ``.abs().mean(0)``. First-order estimate of zero ablation: ``effect ~= -gradient``.

    Args:
        hm: the model.
        inputs: texts or a batch.
        metric: a :class:`~headlab.metrics.Metric` (default: the next-token loss for a causal
            LM, the self-retrieval loss for an encoder, whose ``1 - cos`` has no gradient at the
            clean model; :func:`headlab.metrics.default_kind`), or a differentiable callable such
            as a :class:`~headlab.metrics.LogitMetric` (row ``r`` of a chunk reads input
            ``batch["index"][r]``, so a per-input token table stays aligned).
        batch_size: inputs per backward pass.
    """
    hm = check_model(hm, "gradient_importance")
    metric = Metric.of(metric)
    batch = hm.tokenize(inputs)
    n = batch["input_ids"].shape[0]
    loss_mask = metric.loss_mask
    if loss_mask is not None and loss_mask.shape != batch["input_ids"].shape:
        raise ValueError(f"loss_mask {tuple(loss_mask.shape)} must have the shape of the inputs "
                         f"{tuple(batch['input_ids'].shape)}")
    parts = []
    for start in range(0, n, batch_size):
        sub = {k: v[start:start + batch_size] for k, v in batch.items()}
        mask = None if loss_mask is None else loss_mask[start:start + batch_size]
        kind = metric.kind
        if callable(kind):  # the chunk's rows are inputs start.. of the whole batch
            kind = _offset(kind, start)
        parts.append(hm.head_gradients(sub, Metric(kind, loss_mask=mask)).cpu())
    return torch.cat(parts)


def _offset(fn, start: int):
    """``fn`` reading the rows of a chunk that starts at input ``start`` as those inputs."""
    def chunk_metric(output, batch):
        return fn(output, {**batch, "index": torch.arange(start, start + len(output), device=output.device)})
    chunk_metric.__name__ = getattr(fn, "__name__", "custom")
    return chunk_metric


def rank_disagreements(a, b, n_heads: int, top: int = 5) -> list[tuple[Head, int, int]]:
    """Heads whose ranks under two importance scores ``(L, H)`` differ most:
    ``[(head, rank by a, rank by b)]`` (rank 1 = most important), largest gap first."""
    from scipy.stats import rankdata  # not at the top: scipy.stats would add ~1 CPU s to `import headlab`

    x = np.asarray(torch.as_tensor(a).detach().cpu(), dtype=float).ravel()
    y = np.asarray(torch.as_tensor(b).detach().cpu(), dtype=float).ravel()
    ra = len(x) + 1 - rankdata(x)
    rb = len(y) + 1 - rankdata(y)
    order = np.argsort(-np.abs(ra - rb), kind="mergesort")[:top]
    return [(divmod(int(i), n_heads), int(round(ra[i])), int(round(rb[i]))) for i in order]


# -------------------------------------------------------------------- group ablations


@dataclass
class PairEffects:
    """Single and pair ablation effects, per input.

    Attributes:
        singles: ``{head: (n_inputs,)}``.
        pairs: ``{(a, b): (n_inputs,)}`` with ``a < b``.
    """

    singles: dict[Head, torch.Tensor]
    pairs: dict[tuple[Head, Head], torch.Tensor]

    def interaction(self, a: Head, b: Head) -> torch.Tensor:
        """``effect(a+b) - effect(a) - effect(b)`` per input; > 0: the pair backs each other up."""
        key = (a, b) if a < b else (b, a)
        if key not in self.pairs:
            raise KeyError(f"pair {a}, {b} was not ablated")
        return self.pairs[key] - self.singles[a] - self.singles[b]

    def redundancy_map(self, layer: int, n_heads: int) -> torch.Tensor:
        """Mean interaction of every pair of heads in ``layer``: ``(n_heads, n_heads)``, NaN where unmeasured."""
        out = torch.full((n_heads, n_heads), float("nan"))
        for (a, b) in self.pairs:
            if a[0] == b[0] == layer:
                value = float(self.interaction(a, b).mean())
                out[a[1], b[1]] = out[b[1], a[1]] = value
        return out

    def underestimates(self, min_pair_effect: float = 0.0) -> dict[str, float]:
        """How often and by how much the sum of single effects underestimates removing the pair.

        Over pairs whose mean pair effect exceeds ``min_pair_effect``: the fraction with
        ``effect(a+b) > effect(a) + effect(b)`` (means over inputs), and the median ratio
        ``effect(a+b) / (effect(a) + effect(b))`` among pairs whose single effects sum to > 0.
        """
        rows = []
        for (a, b), both in self.pairs.items():
            pair, parts = float(both.mean()), float((self.singles[a] + self.singles[b]).mean())
            if pair > min_pair_effect:
                rows.append((pair, parts))
        if not rows:
            raise ValueError("no pair has an effect above min_pair_effect")
        under = sum(p > s for p, s in rows) / len(rows)
        ratios = [p / s for p, s in rows if s > 0]
        return {"n_pairs": len(rows), "fraction_underestimated": under,
                "median_ratio": float(np.median(ratios)) if ratios else float("nan")}


def pair_effects(hm: HeadModel, inputs, pairs: Iterable[tuple[Head, Head]] | None = None, *,
                 ablation: Ablation | None = None, metric: Metric | None = None, progress: bool = False
                 ) -> PairEffects:
    """Ablate every single head and the given pairs (default: all pairs within each layer).

    ``ablation``, ``metric`` and ``progress`` as in :func:`~headlab.analysis.sweep.sweep`.
    """
    if pairs is None:
        pairs = [((l, a), (l, b)) for l in range(hm.n_layers) for a, b in combinations(range(hm.n_heads), 2)]
    pairs = [tuple(sorted(hm.check_heads(p))) for p in pairs]
    if any(len(p) != 2 for p in pairs):
        raise ValueError("each pair must name two different heads")
    singles = hm.heads()
    result = sweep(hm, inputs, groups=[[h] for h in singles] + [list(p) for p in pairs], ablation=ablation,
                   metric=metric, progress=progress)
    effects = result.effects
    return PairEffects(
        singles={h: effects[i] for i, h in enumerate(singles)},
        pairs={p: effects[len(singles) + i] for i, p in enumerate(pairs)},
    )


def subset_effects(hm: HeadModel, inputs, sizes: Sequence[int] = (2, 4, 8), n_per_size: int = 20,
                   seed: int = 0, *, ablation: Ablation | None = None, metric: Metric | None = None,
                   progress: bool = False) -> list[dict]:
    """Random head subsets: the measured effect of removing all of them vs the sum of their
    single effects (mean over inputs). ``[{"heads", "size", "effect", "sum_of_singles"}]``.

    ``seed`` draws the subsets; ``ablation``, ``metric`` and ``progress`` as in
    :func:`~headlab.analysis.sweep.sweep`.
    """
    rng = random.Random(seed)
    heads = hm.heads()
    if max(sizes) > len(heads) or min(sizes) < 1:
        raise ValueError(f"subset sizes must be between 1 and {len(heads)}")
    subsets = [tuple(sorted(rng.sample(heads, k))) for k in sizes for _ in range(n_per_size)]
    result = sweep(hm, inputs, groups=[[h] for h in heads] + [list(s) for s in subsets], ablation=ablation,
                   metric=metric, progress=progress)
    single = {h: float(result.effects[i].mean()) for i, h in enumerate(heads)}
    return [{"heads": s, "size": len(s), "effect": float(result.effects[len(heads) + i].mean()),
             "sum_of_singles": sum(single[h] for h in s)} for i, s in enumerate(subsets)]


def backup_heads(pairs: PairEffects, factor: float = 3.0, min_effect: float = 1e-3
                 ) -> list[tuple[Head, Head, float, float]]:
    """Backup behaviour: head ``b`` matters little alone but much once ``a`` is removed.

    ``b``'s effect given ``a`` removed is ``effect(a+b) - effect(a)``. Returned when it exceeds
    ``min_effect`` and ``factor`` times ``b``'s own effect: ``[(a, b, alone, given_a_removed)]``.

    Order: by the pair's interaction ``effect(a+b) - effect(a) - effect(b)`` (which is
    ``given - alone`` for either orientation), largest first, then by ``(a, b)`` in head order.
    The interaction is computed once per pair, in float64 and rounded to 1e-9, so the two
    orientations of a pair tie exactly and the tie is broken by head index, never by float
    rounding (which differs between CPU instruction sets).
    """
    out = []
    for (x, y), both in pairs.pairs.items():
        both64 = both.double()
        interaction = round(float((both64 - pairs.singles[x].double() - pairs.singles[y].double()).mean()), 9)
        for a, b in ((x, y), (y, x)):
            alone = float(pairs.singles[b].double().mean())
            given = float((both64 - pairs.singles[a].double()).mean())
            if given > min_effect and given > factor * max(alone, 0.0):
                out.append((interaction, tuple(a), tuple(b), (a, b, alone, given)))
    return [row for *_, row in sorted(out, key=lambda r: (-r[0], r[1], r[2]))]
