"""Diagram: how a fused attention kernel walks the ``n x n`` scores in tiles.

The score matrix (queries down, keys across) is cut into ``block x block`` tiles. Each row
of tiles is one **program** of the kernel (on a GPU, all of them run at once); a program
loads its query tile once, then loops over the key tiles from left to right, folding each
tile of scores into its running sums (``m``, ``l``, ``acc``: O(n) numbers in all) and
forgetting it. With a causal mask, the tiles above the diagonal are never visited.
"""

from __future__ import annotations

__all__ = ["draw_tiles"]


def draw_tiles(ax, n_tiles: int = 6, causal: bool = True, program: int = 3, step: int = 2,
               fontsize: float = 8.0):
    """Draw the tiles of one attention head's scores on ``ax`` and return ``ax``.

    Args:
        ax: a matplotlib Axes.
        n_tiles: tiles per side (3 to 10).
        causal: grey out the tiles above the diagonal, which a causal kernel skips.
        program: the row of tiles (one program) to highlight, from 0.
        step: which of its key tiles is in registers now (at most ``program`` when causal).
        fontsize: text size in points (at least 7).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    if isinstance(n_tiles, bool) or not isinstance(n_tiles, int) or not 3 <= n_tiles <= 10:
        raise ValueError(f"n_tiles must be an integer from 3 to 10, got {n_tiles!r}")
    if not 0 <= program < n_tiles:
        raise ValueError(f"program must be a row of tiles, 0 to {n_tiles - 1}; got {program}")
    last = program if causal else n_tiles - 1
    if not 0 <= step <= last:
        raise ValueError(f"step must be a key tile that program {program} visits, 0 to {last}; got {step}")
    if fontsize < 7:
        raise ValueError(f"fontsize {fontsize} is below the book's 7-point minimum")
    blue, orange = plt.get_cmap("tab10")(0), plt.get_cmap("tab10")(1)
    for i in range(n_tiles):  # row i: query tile i (drawn top to bottom)
        for j in range(n_tiles):
            y = n_tiles - 1 - i
            skipped = causal and j > i
            face = "0.93" if skipped else ("white" if i != program else (*blue[:3], 0.18))
            if i == program and j < step:
                face = (*blue[:3], 0.45)  # already folded into the running sums
            ax.add_patch(Rectangle((j, y), 1, 1, facecolor=face, edgecolor="0.55", lw=0.8,
                                   hatch="///" if skipped else None))
    y_prog = n_tiles - 1 - program
    ax.add_patch(Rectangle((step, y_prog), 1, 1, facecolor=orange, edgecolor="0.2", lw=1.5))
    ax.add_patch(FancyArrowPatch((0.05, -0.35), (last + 0.95, -0.35), arrowstyle="->", mutation_scale=10,
                                 color="0.2", lw=1.2))
    ax.text(0.05, -0.6, f"program {program}'s loop over key tiles", ha="left", va="top", fontsize=fontsize)
    # the running state of the program's rows: a column of n numbers beside the matrix
    ax.add_patch(Rectangle((n_tiles + 0.4, y_prog), 0.45, 1, facecolor=blue, alpha=0.6, edgecolor="0.2"))
    ax.text(n_tiles + 1.0, y_prog + 0.5, "m, l, acc:\nits rows' state", va="center", ha="left",
            fontsize=fontsize)
    ax.annotate("this tile's scores:\nin registers, then gone", xy=(step + 0.9, y_prog + 0.9),
                xytext=(n_tiles + 0.4, y_prog + 2.2), ha="left", va="center", fontsize=fontsize,
                arrowprops={"arrowstyle": "->", "color": "0.2", "lw": 1.0})
    ax.text(-0.2, y_prog + 0.5, f"program {program}", ha="right", va="center", fontsize=fontsize)
    ax.text(n_tiles / 2, n_tiles + 0.2, "keys →", ha="center", va="bottom", fontsize=fontsize)
    ax.text(-0.2, n_tiles - 0.5, "queries ↓", ha="right", va="center", fontsize=fontsize)
    if causal:
        ax.text(n_tiles - 1.0, n_tiles - 1.0, "skipped\n(causal)", ha="center", va="center", fontsize=fontsize,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})
    ax.set_xlim(-2.6, n_tiles + 4.4)
    ax.set_ylim(-1.4, n_tiles + 0.8)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax
