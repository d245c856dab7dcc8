"""The induction circuit as a diagram: ``A B … A → B``, the two heads and where they compose.

Four token positions of one sequence, ``A B … A``, each a column of the residual stream. Layer 0:
the previous-token head copies each token into the next position, so the position of ``B``
also holds "the token before me was ``A``". Layer 1: the induction head's query at the second
``A`` matches that key (**K-composition**: its key reads what the layer-0 head wrote), attends to
``B``, and its OV circuit copies ``B`` to the output: the model predicts ``B``.
"""

from __future__ import annotations

from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["draw_induction_circuit", "PREVIOUS_COLOUR", "INDUCTION_COLOUR"]

PREVIOUS_COLOUR = "tab:blue"
INDUCTION_COLOUR = "tab:red"
_FONT = 9


def _box(ax, x: float, y: float, text: str, *, width: float = 0.62, height: float = 0.42, face: str = "white",
         edge: str = "0.3", size: float = _FONT, weight: str = "normal", style: str = "normal") -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=face, edgecolor=edge, lw=1.2))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight, style=style)


def _arrow(ax, start, end, colour: str, *, rad: float = 0.0, lw: float = 1.8, style: str = "-|>",
           ls: str = "-") -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=colour, lw=lw,
                                 linestyle=ls, connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2))


def draw_induction_circuit(ax, first: str = "A", second: str = "B", previous_head: str = "0.0",
                           induction_head: str = "1.3"):
    """Draw the two-head induction circuit on ``ax`` and return it.

    Args:
        ax: a matplotlib ``Axes`` (about 6.8 x 3.2 inches reads well in the book's column).
        first: the token that recurs (``A``).
        second: the token that followed it (``B``), which the circuit predicts.
        previous_head: the label of the layer-0 head.
        induction_head: the label of the layer-1 head.

    Returns:
        ``ax``, with the axes themselves hidden.
    """
    a, b = first, second
    xs = {"a1": 0.0, "b": 1.2, "dots": 2.4, "a2": 3.6, "out": 5.0}
    y_tok, y_l0, y_l1 = 0.0, 1.25, 2.55
    # the residual stream: one faint column per position
    for key in ("a1", "b", "dots", "a2"):
        ax.plot([xs[key], xs[key]], [y_tok + 0.25, y_l1 + 0.32], color="0.88", lw=6, solid_capstyle="round",
                zorder=0)
    ax.text(xs["dots"], y_l0 + 0.05, "residual\nstream", ha="center", va="center", fontsize=8, color="0.45",
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    # the tokens
    for key, text in (("a1", a), ("b", b), ("dots", "…"), ("a2", a)):
        _box(ax, xs[key], y_tok, text, weight="bold", size=11)
    for key, pos in (("a1", "position j"), ("b", "j + 1"), ("a2", "position i")):
        ax.text(xs[key], y_tok - 0.38, pos, ha="center", va="top", fontsize=8, color="0.35")
    # layer 0: the previous-token head writes "previous token: A" into B's position
    _box(ax, xs["b"], y_l0, f"before me: {a}", width=1.05, face="#dbe8f6", edge=PREVIOUS_COLOUR, size=8.5)
    _arrow(ax, (xs["a1"] + 0.1, y_tok + 0.22), (xs["b"] - 0.45, y_l0 - 0.05), PREVIOUS_COLOUR, rad=-0.25)
    ax.text(xs["a1"] - 0.35, y_l0 + 0.05, f"layer 0, head {previous_head}:\nprevious token",
            ha="center", va="center", fontsize=8.5, color=PREVIOUS_COLOUR)
    # layer 1: the query at the second A matches the key "before me: A" (K-composition) ...
    _box(ax, xs["a2"], y_l1, f"query: {a}", width=0.95, face="#f8dcdc", edge=INDUCTION_COLOUR, size=8.5)
    _box(ax, xs["b"], y_l1, f"key reads\n'before me: {a}'", width=1.25, height=0.6, face="#f8dcdc",
         edge=INDUCTION_COLOUR, size=8)
    _arrow(ax, (xs["a2"] - 0.5, y_l1 + 0.05), (xs["b"] + 0.65, y_l1 + 0.05), INDUCTION_COLOUR, rad=0.0)
    ax.text((xs["a2"] + xs["b"]) / 2 + 0.05, y_l1 + 0.42, f"layer 1, head {induction_head}: attends to {b}",
            ha="center", va="bottom", fontsize=8.5, color=INDUCTION_COLOUR)
    _arrow(ax, (xs["b"], y_l0 + 0.22), (xs["b"], y_l1 - 0.3), INDUCTION_COLOUR, rad=0.0, ls="--", lw=1.5)
    ax.text(xs["b"] + 0.08, (y_l0 + y_l1) / 2 - 0.05, f"K-composition:\nthe key reads\nwhat {previous_head} wrote",
            ha="left", va="center", fontsize=8, color=INDUCTION_COLOUR, style="italic")
    # ... and its OV circuit copies B to the output
    _arrow(ax, (xs["b"] + 0.2, y_tok + 0.22), (xs["out"] - 0.35, y_l1 - 0.1), "0.25", rad=-0.12, lw=1.4)
    ax.text(3.05, 0.78, f"OV copies {b}", ha="center", va="center", fontsize=8.5, color="0.25", rotation=27)
    _box(ax, xs["out"], y_l1, f"predict {b}", width=0.95, face="#fff2cc", edge="0.3", size=9, weight="bold")
    _arrow(ax, (xs["a2"] + 0.48, y_l1), (xs["out"] - 0.48, y_l1), "0.25", rad=0.0, lw=1.4)
    ax.set_xlim(-0.95, 5.6)
    ax.set_ylim(-0.75, 3.25)
    ax.set_aspect("equal")
    ax.axis("off")
    return ax
