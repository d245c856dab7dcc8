"""How much each head matters, the book's figures: the Lorenz curve of importance and pruning
curves. Mean against worst case, a score against the ablation effect, pairs against the sum of
singles and the heads a plan must keep are the library's (:mod:`headlab.viz.effects`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import as_array


def plot_lorenz(ax, x, y, label: str | None = None):
    """A Lorenz curve with the line of perfect equality."""
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
    ax.plot(x, y, lw=2, label=label, drawstyle="steps-post")
    ax.set_xlabel("fraction of heads (least important first)")
    ax.set_ylabel("fraction of total effect")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return ax


_ORDER_STYLES = {"mean": ("#1f77b4", "-"), "worst": ("#d62728", "-"), "iterative": ("#2ca02c", "--"),
                 "random": ("0.5", ":")}


def plot_pruning_curves(axes, counts, curves: dict, metrics: Sequence[str], tolerance: dict | None = None):
    """One panel per metric: its value against the number of heads removed, one line per pruning order.

    ``curves``: order name -> {metric: values at ``counts``}. Orders whose name starts with
    ``"random"`` are drawn as their mean with a band from their minimum to their maximum.
    ``tolerance``: metric -> the largest degradation that still passes; drawn as a dashed line at
    the unpruned value plus (or minus, for accuracies) the tolerance, with ``higher_is_better``
    read from the sign: ``{metric: (tol, higher_is_better)}``.
    """
    x = as_array(counts)
    axes = list(np.asarray(axes).flat)
    if len(axes) < len(metrics):
        raise ValueError(f"{len(metrics)} metrics need as many axes, got {len(axes)}")
    randoms = {k: v for k, v in curves.items() if k.startswith("random")}
    for ax, metric in zip(axes, metrics):
        for name, values in curves.items():
            if name in randoms:
                continue
            key = next((k for k in _ORDER_STYLES if k in name), "mean")
            colour, style = _ORDER_STYLES["iterative" if "iterative" in name else key]
            ax.plot(x, as_array(values[metric]), style, color=colour, label=name, lw=1.4)
        if randoms:
            r = np.stack([as_array(v[metric]) for v in randoms.values()])
            ax.plot(x, r.mean(0), ":", color="0.4", label=f"random ({len(r)} orders: mean, range)")
            ax.fill_between(x, r.min(0), r.max(0), color="0.8", alpha=0.6, lw=0)
        if tolerance and metric in tolerance:
            tol, higher = tolerance[metric]
            first = as_array(next(iter(curves.values()))[metric])[0]
            ax.axhline(first - tol if higher else first + tol, color="0.3", ls="--", lw=0.8)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("heads removed", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(metrics):]:
        ax.axis("off")
    return axes
