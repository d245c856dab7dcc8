"""Diagram: multi-head attention as split, attend, concatenate, project.

One position's vector of ``d_model`` numbers is projected to a query, a key and a value;
each is cut into ``n_heads`` slices of ``d_head``; head ``h`` attends with its own slices
(its own scores, softmax and pattern); the heads' outputs are laid end to end and mixed by
``W_O``. Each head keeps one colour throughout, so the reader can follow a slice.
"""

from __future__ import annotations

__all__ = ["draw_head_split"]


def _strip(ax, x0: float, y0: float, width: float, height: float, colors, label: str | None = None,
           fontsize: float = 8.0) -> None:
    """A row of ``len(colors)`` equal cells from ``(x0, y0)``, with a label on the left."""
    from matplotlib.patches import Rectangle

    cell = width / len(colors)
    for i, c in enumerate(colors):
        ax.add_patch(Rectangle((x0 + i * cell, y0), cell, height, facecolor=c, edgecolor="0.25", lw=0.8))
    if label:
        ax.text(x0 - 0.15, y0 + height / 2, label, ha="right", va="center", fontsize=fontsize)


def _arrow(ax, start, end) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "0.3", "lw": 1.0})


def draw_head_split(ax, n_heads: int = 4, fontsize: float = 8.0):
    """Draw the split of ``d_model`` into ``n_heads`` heads on ``ax`` and return ``ax``.

    Args:
        ax: a matplotlib Axes (its limits and frame are set here).
        n_heads: how many heads to draw (2 to 8; ``d_head = d_model / n_heads``).
        fontsize: the text size in points (at least the book's 7-point minimum).
    """
    import matplotlib.pyplot as plt

    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or not 2 <= n_heads <= 8:
        raise ValueError(f"n_heads must be an integer from 2 to 8 (a legible diagram), got {n_heads!r}")
    if fontsize < 7:
        raise ValueError(f"fontsize {fontsize} is below the book's 7-point minimum")
    colors = [plt.get_cmap("tab10")(h) for h in range(n_heads)]
    grey = ["0.85"] * n_heads
    width, h = 4.0, 0.32
    x0 = 1.6
    # 1. one position's vector x, then Q, K, V (each d_model wide), cut into heads
    _strip(ax, x0, 5.0, width, h, grey, "x  (d_model)", fontsize)
    for row, name in enumerate(("q = x W_Q", "k = x W_K", "v = x W_V")):
        y = 3.9 - row * 0.45
        _strip(ax, x0, y, width, h, colors, name, fontsize)
    _arrow(ax, (x0 + width / 2, 4.95), (x0 + width / 2, 4.28))
    ax.text(x0 + width + 0.1, 3.45, f"cut into {n_heads} heads\nof d_head = d_model / {n_heads}",
            va="center", ha="left", fontsize=fontsize)
    # 2. each head attends with its own slices
    cell = width / n_heads
    for i, c in enumerate(colors):
        cx = x0 + (i + 0.5) * cell
        _arrow(ax, (cx, 2.95), (cx, 2.35))
        ax.add_patch(plt.Rectangle((cx - cell * 0.42, 1.75), cell * 0.84, 0.55, facecolor=c, alpha=0.35,
                                   edgecolor=c, lw=1.2))
        ax.text(cx, 2.03, f"head {i}", ha="center", va="center", fontsize=fontsize)
    ax.text(x0 + width + 0.1, 2.03, "own scores,\nsoftmax, pattern", va="center", ha="left", fontsize=fontsize)
    # 3. concatenate the outputs z_h, then W_O
    for i in range(n_heads):
        cx = x0 + (i + 0.5) * cell
        _arrow(ax, (cx, 1.72), (cx, 1.18))
    _strip(ax, x0, 0.8, width, h, colors, "[z_0 ... z_H-1]", fontsize)
    _arrow(ax, (x0 + width / 2, 0.77), (x0 + width / 2, 0.42))
    _strip(ax, x0, 0.05, width, h, grey, "out = [z] W_O", fontsize)
    ax.text(x0 + width + 0.1, 0.6, "concatenate,\nthen mix by W_O", va="center", ha="left", fontsize=fontsize)
    ax.set_xlim(-0.2, x0 + width + 1.9)
    ax.set_ylim(-0.1, 5.5)
    ax.set_axis_off()
    return ax
