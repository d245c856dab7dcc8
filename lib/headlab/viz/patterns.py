"""Attention patterns: one head's pattern as a heat map, every head of several models side by
side, and the 2-d values a rank-2 head writes. Each function draws on the axes it is given (or
makes a figure) and returns what it drew."""

from __future__ import annotations

from typing import Sequence

from headlab.heads.head import format_head
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


def plot_patterns_by_head_count(patterns, tokens: Sequence[str], layer: int, max_cols: int = 4,
                                size: float = 2.4):
    """The patterns ``(head, q_pos, k_pos)`` of every head of several models on one text.

    ``patterns`` maps a head count to that model's pattern array for ``layer``. Models are
    drawn in increasing head count, each on as many rows of ``max_cols`` panels as it
    needs; every panel is labelled with the text's tokens. Returns the figure.
    """
    import matplotlib.pyplot as plt

    if not patterns:
        raise ValueError("no patterns to draw")
    counts = sorted(patterns)
    rows_of = {h: -(-h // max_cols) for h in counts}
    n_rows, n_cols = sum(rows_of.values()), min(max_cols, max(counts))
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(size * n_cols, size * n_rows), squeeze=False,
                             constrained_layout=True)
    row = 0
    for n_heads in counts:
        p = as_array(patterns[n_heads])
        if p.ndim != 3 or p.shape[0] != n_heads:
            raise ValueError(f"the {n_heads}-head model's patterns must be (head={n_heads}, q_pos, k_pos), "
                             f"got shape {p.shape}")
        block = axes[row:row + rows_of[n_heads]].flat
        for head, ax in enumerate(block):
            if head >= n_heads:
                ax.axis("off")
                continue
            plural = "s" if n_heads > 1 else ""
            plot_pattern(ax, p[head], tokens, title=f"{n_heads} head{plural}: head {format_head((layer, head))}")
        row += rows_of[n_heads]
    return fig


def plot_labelled_points(ax, points, labels: Sequence[str], title: str | None = None):
    """2-d points ``(n, 2)`` (e.g. a rank-2 head's value of each token), each with its label."""
    p = as_array(points)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"points must be (n, 2), got shape {p.shape}")
    if len(labels) != len(p):
        raise ValueError(f"{len(labels)} labels for {len(p)} points")
    ax.scatter(p[:, 0], p[:, 1], s=12)
    for label, (x, y) in zip(labels, p):
        ax.annotate(str(label), (x, y), fontsize=7, xytext=(2, 2), textcoords="offset points")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_aspect("equal", adjustable="datalim")
    if title:
        ax.set_title(title, fontsize=9)
    return ax
