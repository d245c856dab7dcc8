"""Patching against ablation (chapter 6): five ways to ask how much one head matters, on one scale.

Every method is scored on the same clean/corrupted pairs with the same metric, as a share of the
gap between the clean and the corrupted run (Heimersheim and Nanda 2024):

* **ablation** (zero, mean, resample): the clean run with the head removed; the share of the gap lost;
* **noising**: the clean run with the head's output taken from the corrupted run; the share lost
  (is the head *necessary* for the clean behaviour?);
* **denoising**: the corrupted run with the head's output taken from the clean run; the share
  recovered (is the head *sufficient* to bring it back?).

The shares are ratios of means over the inputs, ``(mean v - mean corrupted) / (mean clean - mean
corrupted)``, so one input whose two runs nearly tie cannot blow the ratio up.
:func:`rank_agreement` asks whether two metrics rank the heads alike, with a percentile bootstrap
over the inputs (the rankings are recomputed on each resample).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from headlab.analysis.patching import activation_patch
from headlab.analysis.sweep import sweep
from headlab.heads.ablation import Ablation
from headlab.heads.model import HeadModel
from headlab.metrics import Metric
from headlab.stats import spearman

__all__ = ["Runs", "Twins", "ABLATIONS", "PATCHES", "copy_twins", "method_runs", "share", "rank_agreement"]

ABLATIONS = ("zero", "mean", "resample")
PATCHES = ("noising", "denoising")


@dataclass
class Runs:
    """The metric per input: on the clean and the corrupted run ``(n,)``, and for every head under
    each method ``(n, n_layers, n_heads)`` (``values[method]``)."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    values: dict[str, torch.Tensor]

    @property
    def n(self) -> int:
        return len(self.clean)


@dataclass
class Twins:
    """Clean inputs, their corrupted twins (one token changed) and reference inputs for the
    ablations, with the answer and the wrong token the metric compares."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    reference: torch.Tensor
    answer: int
    wrong: int


def copy_twins(n: int, seed: int = 0, a: int = 5, b: int = 9, c: int = 20) -> Twins:
    """Chapter 5's pairs for ``attn-only-2l``: token 64 (a sequence's start), a span of 30 tokens
    drawn from 21..63 with ``a`` then ``b`` at its positions 19 and 20, then the span's first 20
    tokens again, so the last token is ``a`` and an induction head predicts ``b``. The corrupted
    twin has ``c`` where the first copy had ``b``. The reference inputs have the same layout with
    other spans and nothing planted."""
    if n < 1:
        raise ValueError(f"n={n}: ask for at least one pair")
    if len({a, b, c}) != 3 or not all(0 <= t < 21 for t in (a, b, c)):
        raise ValueError(f"a, b, c = {a}, {b}, {c}: they must be three different ids below 21 (the span's "
                         "tokens are 21..63)")
    g = torch.Generator().manual_seed(seed)

    def layout(span: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.full((n, 1), 64), span, span[:, :20]], dim=1)

    span = torch.randint(21, 64, (n, 30), generator=g)
    span[:, 19], span[:, 20] = a, b
    clean = layout(span)
    corrupted = clean.clone()
    corrupted[:, 21] = c  # position 21 holds the first copy's b
    reference = layout(torch.randint(21, 64, (n, 30), generator=g))
    return Twins(clean, corrupted, reference, b, c)


def _ends(hm: HeadModel, clean, corrupted, metric: Metric) -> tuple[torch.Tensor, torch.Tensor]:
    ends = []
    for inputs in (clean, corrupted):
        batch = hm.tokenize(inputs)
        _, evaluate = metric.evaluator(hm, batch)
        with torch.no_grad():
            ends.append(evaluate(hm.forward(batch), 1).float().cpu())
    return ends[0], ends[1]


def method_runs(hm: HeadModel, clean, corrupted, metric, reference, methods=ABLATIONS + PATCHES,
                seed: int = 0) -> Runs:
    """Every head under each of ``methods`` (see the module docstring) on the pairs ``clean`` /
    ``corrupted``; ``reference`` are the inputs that mean and resample ablation draw from.

    Raises:
        ValueError: an unknown method, or pairs of different lengths (from the patching).
    """
    unknown = [m for m in methods if m not in ABLATIONS + PATCHES]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}: choose from {', '.join(ABLATIONS + PATCHES)}")
    metric = Metric.of(metric)
    clean_end, corrupted_end = _ends(hm, clean, corrupted, metric)
    shape = (len(clean_end), hm.n_layers, hm.n_heads)
    values = {}
    for method in methods:
        if method in PATCHES:
            values[method] = activation_patch(hm, clean, corrupted, direction=method, metric=metric)
        else:
            how = Ablation(method) if method == "zero" else Ablation(method, reference=reference, seed=seed)
            result = sweep(hm, clean, ablation=how, metric=metric)
            values[method] = (result.clean + result.effects).T.reshape(shape).float().cpu()
    return Runs(clean_end, corrupted_end, values)


def share(runs: Runs, method: str, items: np.ndarray | None = None) -> np.ndarray:
    """``(n_layers, n_heads)``: the share of the clean-to-corrupted gap that ``method`` loses (the
    ablations and noising) or recovers (denoising), over ``items`` (default: every input)."""
    if method not in runs.values:
        raise ValueError(f"method {method!r} was not run; these were: {', '.join(runs.values)}")
    rows = slice(None) if items is None else torch.as_tensor(items)
    clean, corrupted = runs.clean[rows].mean(), runs.corrupted[rows].mean()
    gap = float(clean - corrupted)
    if gap == 0:
        raise ValueError("the clean and the corrupted run score the same on these inputs: no gap to share")
    moved = (runs.values[method][rows].mean(0) - corrupted) / gap  # 0 = corrupted, 1 = clean
    return (moved if method == "denoising" else 1 - moved).numpy()


def rank_agreement(a: Runs, b: Runs, method: str = "noising", method_b: str | None = None, n_boot: int = 2000,
                   seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Spearman's rank correlation between the heads' shares in ``a`` under ``method`` and in ``b``
    under ``method_b`` (default: the same method; ``a`` and ``b`` are runs on the same inputs, e.g.
    two metrics, or one run twice to compare two methods), with a percentile bootstrap interval
    over the inputs.

    Returns ``{"rho", "low", "high", "n"}``; resamples on which a ranking is constant are dropped.

    Raises:
        ValueError: runs on different numbers of inputs, or too few resamples (``n_boot < 100``).
    """
    if a.n != b.n:
        raise ValueError(f"the two runs hold {a.n} and {b.n} inputs; rank agreement needs the same inputs")
    if n_boot < 100:
        raise ValueError(f"n_boot={n_boot} is too few resamples for a {level:.0%} interval; use at least 100")
    method_b = method if method_b is None else method_b
    rho = spearman(share(a, method).ravel(), share(b, method_b).ravel())
    g = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        items = g.integers(0, a.n, a.n)
        x, y = share(a, method, items).ravel(), share(b, method_b, items).ravel()
        if np.ptp(x) > 0 and np.ptp(y) > 0:
            draws.append(spearman(x, y))
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return {"rho": float(rho), "low": float(low), "high": float(high), "n": a.n}
