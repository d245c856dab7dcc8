"""One quantity compared across inputs or conditions: every input's value over a box plot,
grouped bars, and detectors compared by their ROC curves."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import as_array


def plot_per_input(ax, samples: dict, xlabel: str, title: str | None = None, seed: int = 0):
    """One row per label: every input's value as a dot (jittered vertically) over a box plot of
    the distribution. ``samples``: label -> 1-d values (NaN values are left out)."""
    rng = np.random.default_rng(seed)
    labels = list(samples)
    values = [as_array(samples[k]).ravel() for k in labels]
    values = [v[np.isfinite(v)] for v in values]
    ax.boxplot(values, vert=False, widths=0.6, showfliers=False, medianprops={"color": "black"})
    for i, v in enumerate(values, start=1):
        ax.plot(v, i + rng.uniform(-0.22, 0.22, size=len(v)), "o", ms=2.5, alpha=0.45, color=f"C{i - 1}")
    ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_grouped_bars(ax, groups: Sequence[str], series: dict, ylabel: str, title: str | None = None,
                      ylim: tuple[float, float] | None = (0.0, 1.0)):
    """Bars for several series side by side in each group (e.g. one group per construction).
    ``series``: label -> one value per group (NaN draws no bar)."""
    n = len(series)
    width = 0.8 / max(n, 1)
    x = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        v = as_array(values)
        if v.shape != (len(groups),):
            raise ValueError(f"series {label!r} has {v.shape} values for {len(groups)} groups")
        ax.bar(x + (i - (n - 1) / 2) * width, v, width, label=label)
    ax.set_xticks(x, list(groups), rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=n, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return ax


def roc_points(positive, negative) -> tuple[np.ndarray, np.ndarray]:
    """The empirical ROC curve of scores: ``(false-positive rates, true-positive rates)`` at
    every threshold, from (0, 0) to (1, 1) (positives: scores that should be flagged)."""
    pos, neg = as_array(positive).ravel(), as_array(negative).ravel()
    if pos.size == 0 or neg.size == 0:
        raise ValueError("an ROC curve needs at least one positive and one negative score")
    thresholds = np.unique(np.concatenate([pos, neg]))[::-1]
    tpr = np.array([0.0, *[(pos >= t).mean() for t in thresholds]])
    fpr = np.array([0.0, *[(neg >= t).mean() for t in thresholds]])
    return fpr, tpr


def plot_roc(ax, curves: dict, title: str | None = None, mark_fpr: float | None = None):
    """ROC curves of several detectors on the same inputs. ``curves``: label -> ``(positive
    scores, negative scores)``; the legend gives each curve's area (AUC). ``mark_fpr`` draws a
    vertical line at one false-positive rate (where detectors are compared at a matched rate)."""
    for i, (label, (pos, neg)) in enumerate(curves.items()):
        fpr, tpr = roc_points(pos, neg)
        auc = float(np.trapezoid(tpr, fpr)) if hasattr(np, "trapezoid") else float(np.trapz(tpr, fpr))
        ax.step(fpr, tpr, where="post", color=f"C{i}", lw=1.4, label=f"{label} (AUC {auc:.2f})")
    ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls=":", label="chance")
    if mark_fpr is not None:
        ax.axvline(mark_fpr, color="0.4", lw=0.8, ls="--")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("false-positive rate (clean inputs flagged)")
    ax.set_ylabel("true-positive rate (hijacks flagged)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    return ax


def plot_text_and_task(axes, models: dict, tol: float | None = None):
    """Two panels of a pruning run by importance on text (``deviating.experiments.ioi_tail``): the rise
    of the text loss (left) and the task's accuracy (right) against the heads removed, one line per
    model of ``models`` (name -> its record); ``tol``: the text's tolerance, drawn as a dashed line."""
    if len(axes) != 2:
        raise ValueError(f"give two axes (text, task), got {len(axes)}")
    if not models:
        raise ValueError("no model to draw")
    text_ax, task_ax = axes
    for name, record in models.items():
        curve = record["pruning"]
        removed = [r["removed"] for r in curve]
        base = curve[0]["text_loss"]
        text_ax.plot(removed, [r["text_loss"] - base for r in curve], marker=".", label=name)
        task_ax.plot(removed, [r["task_accuracy"] for r in curve], marker=".", label=name)
    if tol is not None:
        text_ax.axhline(tol, color="0.4", linestyle="--", linewidth=0.8, label=f"tolerance {tol:g}")
    task_ax.axhline(0.5, color="0.4", linestyle=":", linewidth=0.8, label="chance")
    text_ax.set(xlabel="heads removed (least important on text first)", ylabel="text loss rise (nats)",
                title="Brown text")
    task_ax.set(xlabel="heads removed (least important on text first)", ylabel="share with IO above S",
                title="the indirect-object task", ylim=(0.0, 1.02))
    for ax in axes:
        ax.legend(fontsize=7)
