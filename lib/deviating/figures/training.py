"""Figures of training runs: a run's evaluation curve (written beside every checkpoint)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_curve"]


def plot_curve(curve: list[dict[str, Any]], path: str | Path, title: str = "",
               phase_change: dict[str, Any] | None = None) -> None:
    """Draw a training curve to ``path`` (PNG).

    Losses on the left axis (evaluation loss, loss on repeated and on other tokens, validation
    loss), scores in [0, 1] on the right (best induction score, accuracies), against the step;
    each series only when the curve has it. A grey vertical line marks ``phase_change["step"]``.

    Args:
        curve: evaluation rows with ``step`` (a :class:`deviating.training.loop.TrainResult`'s ``curve``).
        path: where to write the figure.
        title: the figure's title.
        phase_change: ``{"step", ...}`` or ``None``.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    steps = [r["step"] for r in curve]
    series = [(ax, "-", "loss", "eval loss"), (ax, "-", "loss_repeat", "loss, repeated tokens"),
              (ax, "-", "loss_random", "loss, other tokens"), (ax, "-", "val_loss", "validation loss"),
              (ax2, "--", "induction_best", "best induction score"), (ax2, "--", "agreement_acc", "agreement acc."),
              (ax2, "--", "pronoun_acc", "pronoun acc."), (ax2, "--", "copy_acc", "copy acc.")]
    for color, (axis, style, key, label) in enumerate(s for s in series if s[2] in curve[0]):
        axis.plot(steps, [r[key] for r in curve], style, color=f"C{color}", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("score / accuracy")
    if phase_change is not None:
        ax.axvline(phase_change["step"], color="grey", lw=0.8)
    ax.legend(loc="upper right", fontsize=8)
    ax2.legend(loc="center right", fontsize=8)
    ax.set_title(title)
    fig.savefig(str(path), dpi=100)
