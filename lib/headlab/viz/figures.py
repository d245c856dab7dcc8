"""What every figure of the book shares: a new figure, arrays from tensors, the layers x heads axes.

Figure functions take a matplotlib ``Axes`` (or create a figure) and return what they drew;
none changes global matplotlib settings.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["as_array", "new_axes", "layer_head_axes", "COLUMN_WIDTH", "MIN_FONT_SIZE"]

# The book's text column is 688 px wide at 1280 px, and notebook figures are saved at 100 dpi:
# a figure up to this wide is shown at its own size, so a 7-point label stays ~10 px tall.
# A wider figure would be shrunk to fit, and its text with it.
#: The column's width in inches (688 px at 100 dpi).
COLUMN_WIDTH = 6.8
#: The smallest text a figure of the book draws, in points (about 10 px at 100 dpi).
MIN_FONT_SIZE = 7


def as_array(x) -> np.ndarray:
    """``x`` as a float numpy array; a tensor is detached and moved to the CPU first."""
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def new_axes(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (3.2, 3.0), **kwargs):
    """A figure with ``nrows x ncols`` axes of about ``size`` inches each, scaled down (aspect
    kept) to fit :data:`COLUMN_WIDTH`. Returns ``(figure, axes)``, ``axes`` always 2-d."""
    import matplotlib.pyplot as plt

    width, height = size[0] * ncols, size[1] * nrows
    scale = min(1.0, COLUMN_WIDTH / width)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * scale, height * scale), squeeze=False,
                             constrained_layout=True, **kwargs)
    return fig, axes


def layer_head_axes(ax, n_layers: int, n_heads: int, line: str, linewidth: float) -> None:
    """Label a layers x heads image (head on x, layer on y) and draw lines between its cells.

    Args:
        ax: the axes holding the image.
        n_layers: number of rows.
        n_heads: number of columns.
        line: colour of the lines between cells.
        linewidth: their width.
    """
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks([x - 0.5 for x in range(1, n_heads)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, n_layers)], minor=True)
    ax.grid(which="minor", color=line, linewidth=linewidth)
    ax.tick_params(which="minor", length=0)
