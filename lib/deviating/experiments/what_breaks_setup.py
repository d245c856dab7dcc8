"""What chapter 7's experiments share: their sizes, the shipped result's path, and the metrics
on the evaluation windows (the average set and the tail subsets).

:mod:`deviating.experiments.what_breaks` runs the parts; :mod:`~deviating.experiments.pruning`
and :mod:`~deviating.experiments.minilm_pruning` are two of them. All three read this module,
so none imports another's orchestration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from headlab.analysis.prune import window_loss
from deviating.data.language.metrics import agreement_metric, copy_metric, pronoun_metric

__all__ = ["WhatBreaksSizes", "PARTS", "OUT", "ORGANISMS", "eval_metrics", "item_counts", "evaluate_metrics"]

OUT = Path(__file__).resolve().parents[1] / "results" / "what_breaks.json"
PARTS = ("pruning", "averaging", "adversarial", "minilm")
ORGANISMS = ("organism", "organism-s1", "organism-s2")  # the three training seeds


@dataclass(frozen=True)
class WhatBreaksSizes:
    """The sizes of chapter 7's experiments (defaults: the shipped run).

    ``models``: the organisms the organism parts run on; ``eval_windows``: held-out evaluation
    windows (the averaging part uses all); ``prune_eval_windows``: the first that many of them
    evaluate the pruning curves, at ``counts`` heads removed; ``selection_windows`` (seed
    ``selection_seed``): the windows on which heads are ranked, of which the first
    ``iterative_windows`` rank the iterative order for ``iterative_steps`` removals;
    ``random_orders``: random orders (seeds 0, 1, ...), the control; ``ablation_modes``: the
    other ablations under which the mean order is measured again; ``specialist_windows``:
    evaluation windows of the specialist scores; ``adversarial_windows``: evaluation windows
    the attacked predictions come from, ``adversarial_targets`` per kind (agreement, copy), at
    most one per window first, attacked by a search of ``search_steps`` steps with
    ``search_top_k`` candidate tokens per slot; ``random_trigger_draws``: single random
    triggers per item whose flips and attention are recorded; ``calibration_seed``: the seed
    of the inspectors' calibration windows; ``minilm_counts``: MiniLM heads removed at each
    point of its curves; ``minilm_sentences``: use only the first that many English sentences
    (``None``: all); ``minilm_ablation_modes``: the other ablations of MiniLM's mean order.
    """

    models: tuple[str, ...] = ORGANISMS
    eval_windows: int = 96
    prune_eval_windows: int = 96
    counts: tuple[int, ...] = (*range(0, 21, 2), 24, 28, 32)
    selection_windows: int = 32
    selection_seed: int = -3
    iterative_windows: int = 8
    iterative_steps: int = 12
    random_orders: int = 3
    ablation_modes: tuple[str, ...] = ("mean", "resample")
    specialist_windows: int = 48
    adversarial_windows: int = 256
    adversarial_targets: int = 256
    search_steps: int = 6
    search_top_k: int = 4
    random_trigger_draws: int = 8
    calibration_seed: int = -4
    minilm_counts: tuple[int, ...] = tuple(range(0, 73, 2))
    minilm_sentences: int | None = None
    minilm_ablation_modes: tuple[str, ...] = ("mean",)


def eval_metrics(data, vocab) -> dict[str, tuple[Any, bool]]:
    """The average set and the tail subsets, as metrics on the evaluation windows ``data``
    (a :class:`~deviating.data.windows.LanguageEval`): name -> ``(metric, higher_is_better)``."""
    n = len(data.windows)
    return {
        "loss": (window_loss, False),
        "agreement": (agreement_metric(data.agreement, vocab, n), True),
        "agreement, attractor": (agreement_metric([i for i in data.agreement if i.attractor], vocab, n), True),
        "pronoun, distractor": (pronoun_metric([i for i in data.pronoun if i.distractor], vocab, n), True),
        "copy in repeated spans": (copy_metric(data.copy, vocab, n), True),
        "rare-word copies": (copy_metric(data.rare, vocab, n), True),
    }


def item_counts(data) -> dict[str, int]:
    """How many items of each tail subset the evaluation windows ``data`` hold."""
    return {"agreement": len(data.agreement),
            "agreement, attractor": sum(i.attractor for i in data.agreement),
            "pronoun, distractor": sum(i.distractor for i in data.pronoun),
            "copy in repeated spans": len(data.copy), "rare-word copies": len(data.rare)}


def evaluate_metrics(hm, data, metrics, weights: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """Each metric of ``metrics`` (:func:`eval_metrics`) averaged over the evaluation windows
    (items pooled: windows without items left out), in batches of 32 windows; with ``weights``
    (:func:`deviating.experiments.pruning.item_weights`) also ``"sums"``: per metric and window,
    the window's mean loss or its number of items right (for resampling windows)."""
    with torch.no_grad():
        out = torch.cat([hm.forward(data.ids[s:s + 32]) for s in range(0, len(data.ids), 32)])
    batch = {"input_ids": data.ids, "attention_mask": torch.ones_like(data.ids)}
    res: dict[str, Any] = {}
    sums = {}
    for name, (fn, _) in metrics.items():
        v = fn(out, batch).double()
        if weights is None:
            res[name] = float(v[~torch.isnan(v)].mean())
            continue
        w = torch.tensor(weights[name], dtype=torch.float64)
        s = torch.nan_to_num(v * w, nan=0.0)
        res[name] = float(s.sum() / w.sum())
        sums[name] = [round(float(x), 4) if name == "loss" else round(float(x)) for x in s]
    if weights is not None:
        res["sums"] = sums
    return res
