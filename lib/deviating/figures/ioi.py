"""Figures of chapter 5's second part: effects of heads at the ground-truth positions of the
indirect-object prompts, and where the heads look from END."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import MIN_FONT_SIZE, as_array

__all__ = ["plot_position_effects", "plot_attention_from_end"]


def plot_position_effects(ax, values, positions: Sequence[str], title: str | None = None, label: str = "effect"):
    """``values`` ``(n_layers, n_heads, len(positions))`` as one row per head (``L.H``) and one column
    per named position, on a colour scale centred at 0 (red: the patch lowers the metric)."""
    v = as_array(values)
    if v.ndim != 3 or v.shape[2] != len(positions):
        raise ValueError(f"values must be (n_layers, n_heads, {len(positions)}), got shape {v.shape}")
    L, H, P = v.shape
    flat = v.reshape(L * H, P)
    bound = float(np.nanmax(np.abs(flat))) or 1.0
    image = ax.imshow(flat, cmap="RdBu", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(P), list(positions), fontsize=8)
    ax.set_yticks(range(L * H), [f"{l}.{h}" for l in range(L) for h in range(H)], fontsize=MIN_FONT_SIZE)
    for y in range(H, L * H, H):
        ax.axhline(y - 0.5, color="grey", linewidth=0.6)
    ax.set_xlabel("position patched")
    ax.set_ylabel("head")
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label=label)
    return image


def plot_attention_from_end(ax, scores: dict, heads: Sequence[tuple[int, int]], title: str | None = None):
    """Grouped bars: for each head of ``heads``, its mean attention from END to the IO, to S1 and to
    S2 (``scores``: :func:`deviating.analysis.ioi.attention_scores`)."""
    keys = (("END->IO", "IO"), ("END->S1", "S1"), ("END->S2", "S2"))
    width = 0.8 / len(keys)
    x = np.arange(len(heads))
    for k, (key, name) in enumerate(keys):
        ax.bar(x + (k - 1) * width, [float(as_array(scores[key])[l, h]) for l, h in heads], width, label=name,
               color=f"C{k}")
    ax.set_xticks(x, [f"{l}.{h}" for l, h in heads], fontsize=8)
    ax.set_ylabel("mean attention from END")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, title="to", title_fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax
