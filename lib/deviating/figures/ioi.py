"""Chapter 5b's two figures that are not head grids: where chosen heads look from END, and the
effect of patching each head at each named position."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

__all__ = ["END_EDGES", "plot_signed_grid", "plot_attention_from_end", "plot_position_effects"]

END_EDGES = ("END->IO", "END->S1", "END->S2")  # the bars of plot_attention_from_end


def plot_signed_grid(ax, values, title: str | None = None, limit: float | None = None,
                     colorbar: bool = True) -> None:
    """A signed ``(n_layers, n_heads)`` score on a diverging scale (-limit blue... red, 0 white;
    default limit: the largest absolute value), each value written in black on pale cells and in
    white on dark ones (headlab's grid picks the text colour by the data's midpoint, which on a
    diverging scale writes white on the white cells near 0)."""
    from headlab.viz.figures import MIN_FONT_SIZE
    from headlab.viz.grids import plot_head_grid

    v = torch.as_tensor(values).float()
    if v.ndim != 2:
        raise ValueError(f"values has shape {tuple(v.shape)}: expected (n_layers, n_heads)")
    if limit is None:
        limit = float(v.abs().max()) or 1.0
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    plot_head_grid(ax, v, title=title, cmap="RdBu", vmin=-limit, vmax=limit, annotate=False, colorbar=colorbar)
    for (l, h), x in np.ndenumerate(v.numpy()):
        ax.text(h, l, f"{x:.2f}", ha="center", va="center", fontsize=MIN_FONT_SIZE,
                color="white" if abs(x) > 0.6 * limit else "black")


def plot_attention_from_end(ax, att: dict[str, torch.Tensor], heads: Sequence[tuple[int, int]],
                            title: str | None = None) -> None:
    """Grouped bars: for each head of ``heads``, its mean attention from END to the IO, to S1 and to S2
    (``att`` as :func:`~deviating.analysis.ioi.attention_scores` returns it)."""
    missing = [e for e in END_EDGES if e not in att]
    if missing:
        raise ValueError(f"att lacks {missing}: pass what deviating.analysis.ioi.attention_scores returns")
    if not heads:
        raise ValueError("heads is empty: name at least one (layer, head)")
    x = np.arange(len(heads))
    width = 0.8 / len(END_EDGES)
    colours = ("tab:blue", "tab:orange", "tab:red")
    for k, (edge, colour) in enumerate(zip(END_EDGES, colours)):
        values = [float(att[edge][l, h]) for l, h in heads]
        ax.bar(x + (k - 1) * width, values, width, label=edge.replace("END->", "to "), color=colour)
    ax.set_xticks(x, [f"{l}.{h}" for l, h in heads])
    ax.set_xlabel("head (layer.head)")
    ax.set_ylabel("mean attention from END")
    ax.set_ylim(0, 1)
    ax.legend(frameon=False, fontsize="small")
    if title:
        ax.set_title(title)


def plot_position_effects(ax, effects: torch.Tensor, positions: Sequence[str], title: str | None = None,
                          limit: float = 1.0) -> None:
    """A heads x positions heatmap of ``effects`` ``(n_layers, n_heads, len(positions))``
    (:func:`~deviating.analysis.ioi.patch_head_positions`), one row per head, -limit blue to +limit red."""
    effects = torch.as_tensor(effects).float()
    if effects.ndim != 3 or effects.shape[-1] != len(positions):
        raise ValueError(f"effects has shape {tuple(effects.shape)}: expected (n_layers, n_heads, "
                         f"{len(positions)}), one column per named position")
    L, H, P = effects.shape
    grid = effects.reshape(L * H, P).numpy()
    im = ax.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_xticks(range(P), list(positions))
    ax.set_yticks(range(L * H), [f"{l}.{h}" for l in range(L) for h in range(H)], fontsize="small")
    ax.set_xlabel("position patched")
    ax.set_ylabel("head")
    ax.figure.colorbar(im, ax=ax, label="effect (-1: whole gap)")
    if title:
        ax.set_title(title)
