"""The book's teaching figures of attention patterns: one query's row as bars (chapter 0), every
head of models that differ only in their number of heads (chapter 2), and the 2-d values a
rank-2 head writes (chapter 2). One head's pattern as a heat map is the library's
(:func:`headlab.viz.patterns.plot_pattern`)."""

from __future__ import annotations

from typing import Sequence

from headlab.heads.head import format_head
from headlab.viz.figures import COLUMN_WIDTH, MIN_FONT_SIZE, as_array

__all__ = ["plot_patterns_by_head_count", "plot_labelled_points", "plot_row"]


def plot_patterns_by_head_count(patterns, tokens: Sequence[str], layer: int, max_cols: int = 4,
                                size: float | None = None):
    """The patterns ``(head, q_pos, k_pos)`` of every head of several models on one text.

    ``patterns`` maps a head count to that model's pattern array for ``layer``. Models are
    drawn in increasing head count, each on as many rows of ``max_cols`` panels as it
    needs, drawn for the book's column (``size``: the panels' side in inches, by default
    what fits :data:`~headlab.viz.figures.COLUMN_WIDTH`). Only the outer panels carry the
    text's tokens (queries on the left of each row, keys under the last panel of each
    column), and one colour bar serves them all. Returns the figure.
    """
    import matplotlib.pyplot as plt


    if not patterns:
        raise ValueError("no patterns to draw")
    counts = sorted(patterns)
    rows_of = {h: -(-h // max_cols) for h in counts}
    n_rows, n_cols = sum(rows_of.values()), min(max_cols, max(counts))
    side = (COLUMN_WIDTH - 0.9) / n_cols if size is None else size
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(side * n_cols + 0.9, side * n_rows), squeeze=False,
                             constrained_layout=True)
    row, image = 0, None
    last_row_of_col = {}
    for n_heads in counts:
        for i in range(n_heads):
            last_row_of_col[i % n_cols] = row + i // n_cols
        row += rows_of[n_heads]
    row = 0
    for n_heads in counts:
        p = as_array(patterns[n_heads])
        if p.ndim != 3 or p.shape[0] != n_heads:
            raise ValueError(f"the {n_heads}-head model's patterns must be (head={n_heads}, q_pos, k_pos), "
                             f"got shape {p.shape}")
        if len(tokens) != p.shape[-1]:
            raise ValueError(f"{len(tokens)} token labels for {p.shape[-1]} keys")
        for head in range(rows_of[n_heads] * n_cols):
            ax = axes[row + head // n_cols, head % n_cols]
            if head >= n_heads:
                ax.axis("off")
                continue
            image = ax.imshow(p[head], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
            plural = "s" if n_heads > 1 else ""
            ax.set_title(f"{n_heads} head{plural}: {format_head((layer, head))}", fontsize=8)
            at = range(len(tokens))
            left, bottom = head % n_cols == 0, row + head // n_cols == last_row_of_col[head % n_cols]
            ax.set_yticks(at, [str(t) for t in tokens] if left else [], fontsize=MIN_FONT_SIZE)
            ax.set_xticks(at, [str(t) for t in tokens] if bottom else [], fontsize=MIN_FONT_SIZE, rotation=90)
            ax.tick_params(length=0)
        row += rows_of[n_heads]
    fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight")
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


def plot_row(ax, weights, keys: Sequence[str], title: str | None = None):
    """One query's attention row as bars: the weight on each key (``weights`` sum to 1)."""
    w = as_array(weights)
    if w.ndim != 1 or len(keys) != w.shape[0]:
        raise ValueError(f"need one weight per key: {w.shape} weights for {len(keys)} keys")
    bars = ax.bar(range(len(keys)), w, color="tab:blue")
    ax.set_xticks(range(len(keys)), [str(k) for k in keys], rotation=45, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_xlabel("key")
    ax.set_ylabel("attention weight")
    if title:
        ax.set_title(title, fontsize=9)
    return bars
