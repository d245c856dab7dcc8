"""How much each head matters, as figures: mean against worst case, a score against the ablation
effect, pairs against the sum of singles, and the heads a pruning plan must keep (the checklist
report's figures, ``headlab.report.writing``)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.heads.head import format_head
from headlab.viz.figures import as_array, layer_head_axes

__all__ = ["plot_mean_vs_worst", "plot_score_vs_effect", "plot_pair_interactions", "plot_keep_map", "KEEP_COLOURS"]


def plot_mean_vs_worst(ax, mean, worst, highlight: dict | None = None, annotate: int = 5):
    """Each head's mean effect (x) against its worst case over inputs (y), both ``(n_layers, n_heads)``.

    Points far above the diagonal matter on a few inputs far more than on average. ``highlight``
    maps ``(layer, head)`` to a legend label (e.g. ``"hidden in the tail"``); the ``annotate``
    heads with the largest worst case are named.
    """
    m, w = as_array(mean), as_array(worst)
    if m.shape != w.shape or m.ndim != 2:
        raise ValueError(f"mean and worst must both be (n_layers, n_heads), got {m.shape} and {w.shape}")
    ax.scatter(m.ravel(), w.ravel(), s=14, color="0.55", label="head", zorder=2)
    top = max(float(np.nanmax(w)), float(np.nanmax(m)), 1e-12)
    low = min(float(np.nanmin(m)), 0.0)
    ax.plot([low, top], [low, top], color="0.7", lw=1, ls="--", label="worst = mean")
    for label, colour in zip(sorted(set((highlight or {}).values())), ("tab:red", "tab:orange", "tab:purple")):
        heads = [h for h, lab in highlight.items() if lab == label]
        ax.scatter([m[h] for h in heads], [w[h] for h in heads], s=40, color=colour, label=label, zorder=3)
    order = np.argsort(-w.ravel(), kind="stable")[:annotate]
    for i in order:
        l, h = divmod(int(i), m.shape[1])
        ax.annotate(format_head((l, h)), (m[l, h], w[l, h]), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("mean effect over inputs")
    ax.set_ylabel("worst case (largest effect on one input)")
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_score_vs_effect(ax, score, effect, xlabel: str, size=None, highlight: dict | None = None):
    """A per-head score (x) against the ablation effect (y), both ``(n_layers, n_heads)``.

    ``size`` (same shape, optional): marker area proportional to it (e.g. the write norm).
    ``highlight`` maps ``(layer, head)`` to a legend label; the first four heads of each label are named.
    """
    x, y = as_array(score), as_array(effect)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"score and effect must both be (n_layers, n_heads), got {x.shape} and {y.shape}")
    if size is None:
        area = np.full(x.shape, 16.0)
    else:
        s = as_array(size)
        if s.shape != x.shape:
            raise ValueError(f"size must be {x.shape}, got {s.shape}")
        area = 8 + 80 * s / max(float(np.nanmax(s)), 1e-12)
    ax.scatter(x.ravel(), y.ravel(), s=area.ravel(), color="0.55", alpha=0.7,
               label="head" + ("" if size is None else " (area: write norm)"))
    for label, colour in zip(sorted(set((highlight or {}).values())), ("tab:green", "tab:purple", "tab:red")):
        heads = [h for h, lab in highlight.items() if lab == label]
        ax.scatter([x[h] for h in heads], [y[h] for h in heads], s=[area[h] for h in heads], color=colour,
                   label=label)
        for h in heads[:4]:  # name a few; more would overlap
            ax.annotate(format_head(h), (x[h], y[h]), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean |ablation effect|")
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_pair_interactions(ax, pair, sum_of_singles, margin: float = 0.0, highlight: Sequence[int] = ()):
    """Removing a pair (y) against the sum of removing each head alone (x), one point per pair.

    Above the diagonal, single ablations *underestimate* the pair (the heads back each other up);
    the dotted line is ``(1 + margin) x`` the sum. ``highlight``: indices of pairs to mark.
    """
    y, x = as_array(pair).ravel(), as_array(sum_of_singles).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError("pair and sum_of_singles must be equally long and non-empty")
    ax.scatter(x, y, s=10, color="0.5", alpha=0.7, label="pair")
    if len(highlight):
        idx = list(highlight)
        ax.scatter(x[idx], y[idx], s=30, color="tab:red", label="largest interactions")
    low, high = min(x.min(), y.min(), 0.0), max(x.max(), y.max(), 1e-12)
    ax.plot([low, high], [low, high], color="0.3", lw=1, ls="--", label="pair = sum of singles")
    if margin:
        ax.plot([0, high], [0, (1 + margin) * high], color="0.6", lw=1, ls=":",
                label=f"pair = {1 + margin:g} x sum")
    ax.set_xlabel("effect(a) + effect(b)")
    ax.set_ylabel("effect(a + b)")
    ax.legend(fontsize=7, frameon=False)
    return ax


KEEP_COLOURS = {"worst case": "#d62728", "circuit": "#1f77b4", "backup": "#ff7f0e", "backed up": "#ff7f0e",
                "orphan": "#2ca02c"}


def plot_keep_map(ax, n_layers: int, n_heads: int, keep: dict):
    """A layers x heads grid of the heads a plan must keep, coloured by their first reason.

    ``keep`` maps ``(layer, head)`` to a list of reasons, each starting with one of
    ``KEEP_COLOURS``' keys (``"worst case ..."``, ``"circuit: ..."``); other heads stay white.
    """
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    image = np.ones((n_layers, n_heads, 3))
    used = {}
    for (l, h), reasons in keep.items():
        if not (0 <= l < n_layers and 0 <= h < n_heads):
            raise ValueError(f"head {l}.{h} is outside a {n_layers} x {n_heads} grid")
        kind = next((k for k in KEEP_COLOURS if reasons and reasons[0].startswith(k)), None)
        colour = KEEP_COLOURS.get(kind, "#7f7f7f")
        used[kind or "other"] = colour
        image[l, h] = to_rgb(colour)
        ax.text(h, l, str(len(reasons)), ha="center", va="center", fontsize=7, color="white")
    ax.imshow(image, aspect="auto", interpolation="nearest")
    layer_head_axes(ax, n_layers, n_heads, line="0.85", linewidth=1)
    ax.legend(handles=[Patch(facecolor=c, label=k) for k, c in used.items()], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="first reason (number: reasons)",
              title_fontsize=8)
    return ax
