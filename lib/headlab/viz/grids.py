"""Per-head values on the layers x heads grid: a score per head as an annotated heat map, and the
heads a pruning plan must keep, coloured by reason."""

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


KEEP_COLOURS = {"worst case": "#d62728", "circuit": "#1f77b4", "backup": "#ff7f0e", "backed up": "#ff7f0e",
                "orphan": "#2ca02c"}


def plot_keep_map(ax, n_layers: int, n_heads: int, keep: dict):
    """A layers x heads grid of the heads a plan must keep, coloured by their first reason.

    ``keep`` maps ``(layer, head)`` to a list of reasons, each starting with one of
    :data:`KEEP_COLOURS`' keys (``"worst case ..."``, ``"circuit: ..."``); other heads stay white.
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
