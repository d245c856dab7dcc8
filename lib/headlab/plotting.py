"""The book's figures: one module, so every chapter draws a pattern the same way.

Functions take a matplotlib ``Axes`` (or create a figure) and return what they
drew; nothing here changes global matplotlib settings.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def new_axes(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (3.2, 3.0), **kwargs):
    """A figure with ``nrows x ncols`` axes of the given size each (inches)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False,
                             constrained_layout=True, **kwargs)
    return fig, axes


def plot_pattern(ax, pattern, tokens: Sequence[str] | None = None, title: str | None = None,
                 vmax: float | None = 1.0, cmap: str = "Blues", max_labels: int = 40):
    """An attention pattern ``(q_pos, k_pos)`` as a heat map: rows are queries, columns keys."""
    p = _np(pattern)
    if p.ndim != 2:
        raise ValueError(f"pattern must be (q_pos, k_pos), got shape {p.shape}")
    image = ax.imshow(p, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
    if tokens is not None and len(tokens) <= max_labels:
        if len(tokens) != p.shape[1]:
            raise ValueError(f"{len(tokens)} token labels for {p.shape[1]} keys")
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens], rotation=90, fontsize=7)
        ax.set_yticks(range(p.shape[0]), [str(t) for t in tokens[: p.shape[0]]], fontsize=7)
    else:
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    if title:
        ax.set_title(title, fontsize=9)
    return image


def plot_head_grid(ax, values, title: str | None = None, cmap: str = "viridis", annotate: bool = True,
                   fmt: str = "{:.2f}", vmin: float | None = None, vmax: float | None = None,
                   colorbar: bool = True, label: str | None = None):
    """A ``(n_layers, n_heads)`` score as a grid: one cell per head, layer on the vertical axis."""
    v = _np(values)
    if v.ndim != 2:
        raise ValueError(f"values must be (n_layers, n_heads), got shape {v.shape}")
    image = ax.imshow(v, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(v.shape[1]))
    ax.set_yticks(range(v.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if annotate and v.size <= 160:
        finite = v[np.isfinite(v)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for (l, h), x in np.ndenumerate(v):
            if np.isfinite(x):
                ax.text(h, l, fmt.format(x), ha="center", va="center", fontsize=6,
                        color="white" if x < mid else "black")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label=label)
    return image


def plot_lorenz(ax, x, y, label: str | None = None):
    """A Lorenz curve with the line of perfect equality."""
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
    ax.plot(x, y, lw=2, label=label, drawstyle="steps-post")
    ax.set_xlabel("fraction of heads (least important first)")
    ax.set_ylabel("fraction of total effect")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return ax
