"""Circuits between heads: composition scores between two layers."""

from __future__ import annotations

from headlab.heads.head import format_head
from headlab.viz.figures import as_array, new_axes
from headlab.viz.grids import plot_head_grid


def plot_composition(scores: dict, baseline: dict | None = None, earlier_layer: int = 0, later_layer: int = 1,
                     size: tuple[float, float] = (2.9, 2.6)):
    """Composition scores between the heads of two layers, one panel per kind (Q, K, V).

    ``scores``: kind -> ``(n_heads, n_heads)``, entry ``[e, l]`` for head ``later_layer.l``
    reading head ``earlier_layer.e``. ``baseline``: kind -> the random-weights score, shown
    in the title; cells are coloured on one shared scale. Returns the figure.
    """
    fig, axes = new_axes(len(scores), size=size)
    vmax = max(float(as_array(s).max()) for s in scores.values())
    for ax, (kind, s) in zip(axes[0], scores.items()):
        plot_head_grid(ax, s, cmap="magma", vmin=0.0, vmax=vmax, colorbar=False, fmt="{:.2f}")
        ax.set_xlabel(f"head of layer {later_layer} (reads)")
        ax.set_ylabel(f"head of layer {earlier_layer} (writes)")
        n_earlier, n_later = as_array(s).shape
        ax.set_xticks(range(n_later), [format_head((later_layer, h)) for h in range(n_later)])
        ax.set_yticks(range(n_earlier), [format_head((earlier_layer, h)) for h in range(n_earlier)])
        base = f"\nrandom weights: {baseline[kind]:.2f}" if baseline and kind in baseline else ""
        ax.set_title(f"{kind}-composition{base}", fontsize=9)
    return fig
