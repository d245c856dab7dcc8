"""Circuits between heads: composition scores between two layers, and what removing one head of a
pair takes from the other's score."""

from __future__ import annotations

import numpy as np

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


def plot_circuit_drops(ax, pairs: list[dict]):
    """Induction score of each candidate induction head, clean and with its candidate previous-token
    head ablated. ``pairs``: dicts with ``previous_token``, ``induction`` (heads), ``clean``,
    ``ablated`` and ``verified`` (as in the checklist report)."""
    if not pairs:
        raise ValueError("no candidate pairs to draw")
    x = np.arange(len(pairs))
    clean = [p["clean"] for p in pairs]
    ablated = [p["ablated"] for p in pairs]
    ax.bar(x - 0.2, clean, width=0.4, color="tab:blue", label="clean")
    ax.bar(x + 0.2, ablated, width=0.4, color="tab:orange", label="previous-token head ablated")
    names = [f"{format_head(p['previous_token'])} → {format_head(p['induction'])}"
             + (" ✓" if p["verified"] else "") for p in pairs]
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("induction score")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, frameon=False)
    return ax
