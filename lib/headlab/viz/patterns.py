"""Attention patterns: one head's pattern as a heat map. Each function draws on the axes it is given (or
makes a figure) and returns what it drew. The book's teaching figures (one query's row as bars, every
head of several models side by side, a rank-2 head's 2-d values) are ``deviating.figures.patterns``."""

from __future__ import annotations

from typing import Sequence

from headlab.viz.figures import MIN_FONT_SIZE, as_array


def plot_pattern(ax, pattern, tokens: Sequence[str] | None = None, title: str | None = None,
                 vmax: float | None = 1.0, cmap: str = "Blues", max_labels: int = 40, colorbar: bool = True):
    """An attention pattern ``(q_pos, k_pos)`` as a heat map: rows are queries, columns keys, and
    (``colorbar``) a colour bar of the attention weight beside it."""
    p = as_array(pattern)
    if p.ndim != 2:
        raise ValueError(f"pattern must be (q_pos, k_pos), got shape {p.shape}")
    image = ax.imshow(p, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
    if tokens is not None and len(tokens) <= max_labels:
        if len(tokens) != p.shape[1]:
            raise ValueError(f"{len(tokens)} token labels for {p.shape[1]} keys")
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens], rotation=90, fontsize=MIN_FONT_SIZE)
        ax.set_yticks(range(p.shape[0]), [str(t) for t in tokens[: p.shape[0]]], fontsize=MIN_FONT_SIZE)
        ax.set_xlabel("key (attended to)", fontsize=8)
        ax.set_ylabel("query (attending)", fontsize=8)
    else:
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    return image
