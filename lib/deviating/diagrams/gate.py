"""Where an ablation acts: the gate on each head's output ``z``, before the output projection ``W_O``.

Each head of a layer writes its output ``z_h`` (``d_head`` numbers per position). The gate
replaces ``z_h`` by ``g_h z_h + (1 - g_h) r_h``: ``g_h = 1`` leaves the head alone, ``g_h = 0``
ablates it, with ``r_h = 0`` (zero ablation), its mean over a reference set (mean ablation) or
its output on another input (resample ablation). Only then are the heads concatenated and
projected by ``W_O`` into the residual stream, so removing a head changes nothing else.
"""

from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["draw_gate"]

_FONT = 9


def _box(ax, x, y, w, h, text, face="white", edge="0.3", size=_FONT, weight="normal", ls="-"):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.06",
                                facecolor=face, edgecolor=edge, lw=1.2, linestyle=ls))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight)


def _arrow(ax, start, end, colour="0.3", lw=1.3):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, color=colour, lw=lw,
                                 shrinkA=1, shrinkB=1))


def draw_gate(ax, n_heads: int = 4, ablated: int | None = 3):
    """Draw one attention block's heads, their gates, ``W_O`` and the residual stream on ``ax``.

    Args:
        ax: a matplotlib ``Axes`` (about 6.8 x 3.0 inches in the book's column).
        n_heads: how many heads to draw (2 to 6).
        ablated: the head drawn ablated (its gate at 0), or ``None``; the note on what replaces
            it is written to its right, so the last head reads best.

    Returns:
        ``ax``, with the axes themselves hidden.
    """
    if not 2 <= n_heads <= 6:
        raise ValueError(f"draw between 2 and 6 heads; got n_heads={n_heads}")
    if ablated is not None and not 0 <= ablated < n_heads:
        raise ValueError(f"ablated must be a head index in 0..{n_heads - 1} or None; got {ablated}")
    gap = 1.05
    xs = [i * gap for i in range(n_heads)]
    y_head, y_z, y_gate, y_wo, y_res = 0.0, 0.9, 1.75, 2.75, 3.55
    mid = (xs[0] + xs[-1]) / 2
    # the residual stream the block reads from and writes to
    ax.plot([xs[0] - 0.9, xs[-1] + 1.6], [y_res, y_res], color="0.75", lw=7, solid_capstyle="round", zorder=0)
    ax.text(xs[-1] + 1.6, y_res + 0.2, "residual stream", ha="right", va="bottom", fontsize=_FONT, color="0.35")
    for i, x in enumerate(xs):
        off = i == ablated
        _box(ax, x, y_head, 0.8, 0.5, f"head {i}\nattention", face="#eeeeee", size=8)
        _arrow(ax, (x, y_head + 0.27), (x, y_z - 0.2))
        _box(ax, x, y_z, 0.55, 0.36, f"$z_{i}$", size=10)
        _arrow(ax, (x, y_z + 0.2), (x, y_gate - 0.25))
        colour = "tab:red" if off else "tab:green"
        _box(ax, x, y_gate, 0.72, 0.46, f"$g_{i}={0 if off else 1}$", face="#f8dcdc" if off else "#dff3df",
             edge=colour, size=9.5)
        _arrow(ax, (x, y_gate + 0.25), (x, y_wo - 0.3), colour="tab:red" if off else "0.3")
    if ablated is not None:
        x = xs[ablated]
        ax.text(x + 0.45, y_gate, "$g = 0$: $z$ is replaced\nby $r$ = 0 (zero), its\nmean (mean), or its\n"
                "value on another\ninput (resample)", ha="left", va="center", fontsize=8, color="tab:red")
    width = xs[-1] - xs[0] + 0.9
    _box(ax, mid, y_wo, width, 0.5, r"concatenate the heads, then project: $W_O$",
         face="#fff2cc", size=9)
    _arrow(ax, (mid, y_wo + 0.27), (mid, y_res - 0.12), lw=1.6)
    ax.text(mid + 0.1, (y_wo + y_res) / 2 + 0.03, "+", fontsize=11, ha="left", va="center")
    ax.annotate("the gate: where an ablation acts", xy=(xs[0] - 0.38, y_gate), xytext=(xs[0] - 1.05, y_gate),
                fontsize=_FONT, ha="right", va="center", color="0.2",
                arrowprops={"arrowstyle": "-|>", "color": "0.2", "lw": 1.2})
    ax.set_xlim(xs[0] - 3.6, xs[-1] + 2.0)
    ax.set_ylim(-0.45, 3.95)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
