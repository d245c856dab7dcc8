"""Per-head values on the layers x heads grid: a score per head as an annotated heat map (the
heads a plan must keep are :func:`headlab.viz.effects.plot_keep_map`)."""

from __future__ import annotations

import numpy as np

from headlab.viz.figures import MIN_FONT_SIZE, as_array, layer_head_axes


def plot_head_grid(ax, values, title: str | None = None, cmap: str = "viridis", annotate: bool = True,
                   fmt: str = "{:.2f}", vmin: float | None = None, vmax: float | None = None,
                   colorbar: bool = True, label: str | None = None):
    """A ``(n_layers, n_heads)`` score as a grid: one cell per head, layer on the vertical axis.

    ``annotate`` writes each value in its cell, but only where the cells are wide enough for the
    numbers to be legible at the figure's size (:data:`~headlab.viz.figures.MIN_FONT_SIZE` points);
    the colour bar (``colorbar``, labelled ``label``) always gives the scale.
    """
    v = as_array(values)
    if v.ndim != 2:
        raise ValueError(f"values must be (n_layers, n_heads), got shape {v.shape}")
    image = ax.imshow(v, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(v.shape[1]))
    ax.set_yticks(range(v.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    cell_inches = ax.get_position().width * ax.figure.get_figwidth() / v.shape[1]
    text_inches = len(fmt.format(0.0)) * 0.6 * MIN_FONT_SIZE / 72  # a digit is ~0.6 em wide
    if annotate and cell_inches >= 1.15 * text_inches:
        finite = v[np.isfinite(v)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for (l, h), x in np.ndenumerate(v):
            if np.isfinite(x):
                ax.text(h, l, fmt.format(x), ha="center", va="center", fontsize=MIN_FONT_SIZE,
                        color="white" if x < mid else "black")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label=label)
    return image


