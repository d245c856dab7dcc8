"""Figures of training runs: a run's evaluation curve (written beside every checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_curve"]


def plot_curve(curve: list[dict[str, Any]], path: str | Path, title: str = "",
               phase_change: dict[str, Any] | None = None, averaged: dict[str, Any] | None = None) -> None:
    """Draw a training curve to ``path`` (PNG).

    Losses on the left axis (evaluation loss, loss on repeated and on other tokens, validation
    loss), scores in [0, 1] on the right (best induction score, accuracies), against the step;
    each series only when the curve has it. A grey vertical line marks ``phase_change["step"]``.

    Args:
        curve: evaluation rows with ``step`` (a :class:`deviating.training.loop.TrainResult`'s ``curve``).
        path: where to write the figure.
        title: the figure's title.
        phase_change: ``{"step", ...}`` or ``None``.
        averaged: for a run whose weights were averaged: ``{"first", "last"}`` (the averaged
            steps, shaded) and ``"metrics"``, the averaged model's evaluation, drawn as a marker
            at the last step for each series the curve has (the curve itself is the unaveraged
            weights').
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    steps = [r["step"] for r in curve]
    series = [(ax, "-", "loss", "eval loss"), (ax, "-", "loss_repeat", "loss, repeated tokens"),
              (ax, "-", "loss_random", "loss, other tokens"), (ax, "-", "val_loss", "validation loss"),
              (ax2, "--", "induction_best", "best induction score"), (ax2, "--", "agreement_acc", "agreement acc."),
              (ax2, "--", "pronoun_acc", "pronoun acc."), (ax2, "--", "copy_acc", "copy acc."),
              (ax2, "--", "ioi_accuracy", "IO above S, held-out names and templates")]
    for color, (axis, style, key, label) in enumerate(s for s in series if s[2] in curve[0]):
        axis.plot(steps, [r[key] for r in curve], style, color=f"C{color}", label=label)
        if averaged is not None and isinstance(averaged["metrics"].get(key), (int, float)):
            axis.plot([steps[-1]], [averaged["metrics"][key]], "D", color=f"C{color}", ms=5)
    if averaged is not None:
        ax.axvspan(averaged["first"], averaged["last"], color="grey", alpha=0.15, lw=0,
                   label="steps whose weights are averaged")
        ax.plot([], [], "D", color="black", ms=5, label="the averaged weights (last step)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("score / accuracy")
    if phase_change is not None:
        ax.axvline(phase_change["step"], color="grey", lw=0.8, label="phase change")
    if averaged is None:
        ax.legend(loc="upper right", fontsize=8)
        ax2.legend(loc="center right", fontsize=8)
    else:  # more entries: one legend under the plot, clear of the curves
        fig.set_size_inches(7, 4.3)
        handles = [h for a in (ax, ax2) for h in a.get_legend_handles_labels()[0]]
        labels = [t for a in (ax, ax2) for t in a.get_legend_handles_labels()[1]]
        fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8)
    ax.set_title(title)
    fig.savefig(str(path), dpi=100)
