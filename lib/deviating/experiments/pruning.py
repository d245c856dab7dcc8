"""Chapter 7's pruning of the organism (the ``pruning`` part of :func:`deviating.experiments.what_breaks.run_what_breaks`).

For each organism seed: per-head loss effects on the *selection* windows (seed
``selection_seed``, never an evaluation window) give one-shot orders by mean and by worst-case
(largest per-window) effect; an iterative order (mean, recomputed after each removal, on a few
of those windows, for the first heads); random orders, the control. Under mean and resample
ablation (reference: the selection windows) the mean order is measured again, importance and
curve both under that ablation. Every order is evaluated on the held-out evaluation windows at
every count, and the curve is stored **per window**: the window's mean loss, and for each tail
subset the number of its items the model gets right in that window (with the number of items
each window holds), so that first failures can be resampled over windows
(:mod:`deviating.analysis.failure`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from headlab.metrics import ItemMetric
from deviating.analysis.failure import WindowTable
from headlab.analysis.prune import iterative_order, order_by, pruning_curve_shared, random_order
from headlab.analysis.sweep import sweep
from deviating.data.language import encode
from deviating.experiments.what_breaks_setup import eval_metrics, item_counts
from headlab.heads.ablation import Ablation
from headlab.metrics import Metric

__all__ = ["item_weights", "window_sums", "curve_tables", "curve_means", "model_pruning"]


def item_weights(metrics: dict, n_windows: int) -> dict[str, list[int]]:
    """Per metric, how many units each window holds: items for an item metric
    (:class:`headlab.metrics.ItemMetric`), 1 for a per-window metric (the loss)."""

    out = {}
    for name, (fn, _) in metrics.items():
        if isinstance(fn, ItemMetric):
            out[name] = torch.bincount(fn.doc, minlength=n_windows).tolist()
        else:
            out[name] = [1] * n_windows
    return out


def window_sums(curve, weights: dict[str, list[int]]) -> dict[str, list[list[float]]]:
    """Per metric, ``(count, window)`` sums of a :class:`headlab.analysis.prune.PruningCurve` of
    :func:`headlab.analysis.prune.pruning_curve_shared` (which keeps only the windows a metric
    scores): the per-window mean times the window's units, 0 for windows without any; item
    counts are whole numbers, losses keep 4 digits."""
    out = {}
    for name, values in curve.values.items():
        w = torch.tensor(weights[name], dtype=torch.float64)
        kept = w > 0
        if int(kept.sum()) != values.shape[1]:
            raise ValueError(f"metric {name!r}: {values.shape[1]} scored windows but {int(kept.sum())} hold items")
        sums = torch.zeros(values.shape[0], len(w), dtype=torch.float64)
        sums[:, kept] = values.double() * w[kept]
        is_count = bool((w != 1).any()) or name != "loss"
        out[name] = [[round(float(x)) if is_count else round(float(x), 4) for x in row] for row in sums]
    return out


def curve_tables(record: dict, curve: str, higher_is_better: dict[str, bool], counts) -> dict:
    """The stored curve ``curve`` of one model's ``record`` as
    :class:`deviating.analysis.failure.WindowTable` values, one per metric of ``higher_is_better``
    (metric -> whether higher values are better)."""

    if curve not in record["curves"]:
        raise ValueError(f"no curve {curve!r}; stored: {', '.join(record['curves'])}")
    sums = record["curves"][curve]["sums"]
    unknown = [m for m in higher_is_better if m not in sums]
    if unknown:
        raise ValueError(f"no metric {unknown[0]!r} in curve {curve!r}; stored: {', '.join(sums)}")
    return {m: WindowTable(tuple(counts), sums[m], record["items_per_window"][m], higher_is_better[m])
            for m in higher_is_better}


def curve_means(record: dict, curve: str) -> dict[str, list[float]]:
    """Per metric, the stored curve's mean at each count (items pooled over windows)."""
    if curve not in record["curves"]:
        raise ValueError(f"no curve {curve!r}; stored: {', '.join(record['curves'])}")
    out = {}
    for m, sums in record["curves"][curve]["sums"].items():
        total = sum(record["items_per_window"][m])
        out[m] = [sum(row) / total for row in sums]
    return out


def model_pruning(hm, task, data, vocab, sizes) -> dict[str, Any]:
    """The pruning curves of one organism (see the module docstring); ``sizes`` is a
    :class:`deviating.experiments.what_breaks.WhatBreaksSizes`."""

    select = task.windows(sizes.selection_windows, seed=sizes.selection_seed)
    sel_ids = encode(hm.tokenizer, select)
    n = sizes.prune_eval_windows
    sub = dataclasses.replace(data, windows=data.windows[:n], ids=data.ids[:n],
                              **{k: [i for i in getattr(data, k) if i.doc < n]
                                 for k in ("agreement", "pronoun", "copy", "rare")})
    metrics = eval_metrics(sub, vocab)
    weights = item_weights(metrics, n)
    counts = list(sizes.counts)

    def importance(ablation):
        effects = sweep(hm, sel_ids, metric=Metric("loss"), ablation=ablation).effects  # (head, window)
        return (effects.mean(1).reshape(hm.n_layers, hm.n_heads),
                effects.max(1).values.reshape(hm.n_layers, hm.n_heads))

    mean, worst = importance(None)
    plan = {"mean (one-shot)": (order_by(mean), None), "worst case (one-shot)": (order_by(worst), None)}
    t0 = time.perf_counter()
    plan["mean (iterative)"] = (iterative_order(hm, sel_ids[:sizes.iterative_windows], by="mean",
                                                metric=Metric("loss"), stop_after=sizes.iterative_steps), None)
    iterative_seconds = time.perf_counter() - t0
    for seed in range(sizes.random_orders):
        plan[f"random (seed {seed})"] = (random_order(hm, seed=seed), None)
    other = {}
    for mode in sizes.ablation_modes:
        ablation = Ablation(mode, reference=sel_ids, **({"seed": 0} if mode == "resample" else {}))
        m, _ = importance(ablation)
        other[mode] = m.tolist()
        plan[f"mean (one-shot), {mode} ablation"] = (order_by(m), ablation)
    curves = {}
    for name, (order, ablation) in plan.items():
        curve = pruning_curve_shared(hm, order, sub.ids, metrics, counts=counts, ablation=ablation)
        curves[name] = {"order": [list(h) for h in order], "ablation": "zero" if ablation is None else ablation.mode,
                        "sums": window_sums(curve, weights)}
    return {"eval_windows": n, "item_counts": item_counts(sub), "items_per_window": weights,
            "importance_mean": mean.tolist(), "importance_worst": worst.tolist(),
            "importance_mean_other_ablations": other, "iterative_seconds": iterative_seconds, "curves": curves}
