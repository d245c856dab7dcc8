"""The pruning-with-tolerance pipeline of chapter 7, as a diagram.

Four steps, left to right: rank the heads on *selection* windows; remove the first ``c`` of the
order (their gate before ``W_O`` set to zero); evaluate the pruned model on *held-out* windows,
the average benchmark (mean loss) and the tail subsets (item accuracies); and compare each
with the unpruned model: a measure *fails* at the first ``c`` where it has degraded by more than
the tolerance. Below, a sketch of two such curves with their tolerance bands and first
failures, and the question claim C10 asks of them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["STEPS", "draw_pruning_pipeline"]

STEPS = (
    ("1. rank", "each head's importance:\nloss increase when it\nalone is removed,\non selection windows"),
    ("2. remove", "the first c heads of the\norder (least important\nfirst): gate before W_O\nset to 0"),
    ("3. evaluate", "on held-out windows:\nmean loss (average)\nand tail subsets\n(item accuracies)"),
    ("4. compare", "with c = 0: a measure\nfails at the first c\nwhere it degrades by\nmore than the tolerance"),
)


def _box(ax, x, y, w, h, title, body, colour):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01,rounding_size=0.02",
                                facecolor=colour, edgecolor="0.3", lw=0.8))
    ax.text(x + w / 2, y + h - 0.05, title, ha="center", va="top", fontsize=9, weight="bold")
    ax.text(x + w / 2, y + h - 0.15, body, ha="center", va="top", fontsize=7.5, linespacing=1.25)


def draw_pruning_pipeline(top, bottom, tolerance: float = 0.05):
    """Draw the pipeline on ``top`` and the sketch of a tail failing first on ``bottom`` (two
    matplotlib ``Axes``, e.g. of ``plt.subplots(2, 1, height_ratios=(1.1, 1))``).

    Args:
        top: axes for the four steps (its frame is hidden).
        bottom: axes for the sketch of two measures' degradation against heads removed.
        tolerance: the tolerance drawn in the sketch (units of degradation).

    Returns:
        ``(top, bottom)``.
    """
    if tolerance <= 0:
        raise ValueError(f"tolerance must be > 0 to be drawn, got {tolerance}")
    colours = ("#dbe9f6", "#fde2c8", "#e2f0d9", "#efe0f3")
    width, gap = 0.215, 0.047
    for i, ((title, body), colour) in enumerate(zip(STEPS, colours)):
        x = i * (width + gap)
        _box(top, x, 0.3, width, 0.66, title, body, colour)
        if i < len(STEPS) - 1:
            top.annotate("", xy=(x + width + gap - 0.004, 0.63), xytext=(x + width + 0.004, 0.63),
                         arrowprops={"arrowstyle": "-|>", "color": "0.25", "lw": 1.2})
    top.annotate("", xy=(0.5 * width + (width + gap), 0.28), xytext=(0.5 * width + 3 * (width + gap), 0.28),
                 arrowprops={"arrowstyle": "-|>", "color": "0.45", "lw": 0.9, "ls": "--",
                             "connectionstyle": "arc3,rad=-0.18"})
    top.text(0.5 * width + 2 * (width + gap), 0.0, "next c: remove more heads, evaluate again",
             ha="center", va="bottom", fontsize=7.5, color="0.3")
    top.set_xlim(-0.01, 1.01)
    top.set_ylim(0.0, 1.0)
    top.axis("off")

    c = np.arange(0, 33, 2)
    average = tolerance * 0.6 * np.exp((c - 8) / 5.0) - tolerance * 0.6 * np.exp(-8 / 5.0)
    tail = tolerance * 0.9 * np.exp((c - 5) / 4.0) - tolerance * 0.9 * np.exp(-5 / 4.0)
    bottom.axhspan(0, tolerance, color="0.9", lw=0)
    bottom.axhline(tolerance, color="0.35", ls="--", lw=0.8)
    bottom.text(31.5, tolerance * 1.08, "tolerance", ha="right", va="bottom", fontsize=7.5, color="0.3")
    for values, colour, label, side in ((average, "#1f77b4", "average benchmark (mean loss)", 1),
                                        (tail, "#d62728", "a tail subset (accuracy drop)", -1)):
        bottom.plot(c, values, "o-", ms=3, color=colour, lw=1.4, label=label)
        first = int(c[np.argmax(values > tolerance)])
        bottom.axvline(first, color=colour, lw=0.8, ls=":")
        bottom.text(first + 0.3 * side, 2.9 * tolerance, f"fails at {first}", color=colour, fontsize=7.5, va="top",
                    ha="left" if side > 0 else "right")
    bottom.set_ylim(-0.1 * tolerance, 3 * tolerance)
    bottom.set_xlim(0, 32)
    bottom.set_xlabel("heads removed, c", fontsize=8)
    bottom.set_ylabel("degradation from c = 0", fontsize=8)
    bottom.set_yticks([0, tolerance], ["0", "tol"])
    bottom.tick_params(labelsize=7.5)
    bottom.legend(fontsize=7.5, frameon=False, loc="upper right")
    bottom.set_title("C10 asks: does a tail fail at fewer heads than the average? (sketch, not data)",
                     fontsize=8.5)
    return top, bottom
