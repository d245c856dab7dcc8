"""Chapter 2's diagrams (the split into heads, the tiles of a fused kernel) render, legibly."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from deviating.diagrams.head_split import draw_head_split  # noqa: E402
from deviating.diagrams.tiles import draw_tiles  # noqa: E402
from headlab.viz.figures import MIN_FONT_SIZE, new_axes  # noqa: E402


def texts(ax):
    return [t for t in ax.texts] + [c for c in ax.get_children() if type(c).__name__ == "Annotation"]


def test_the_split_draws_one_colour_per_head_and_legible_text():
    fig, axes = new_axes(1, size=(6.4, 3.6))
    ax = draw_head_split(axes[0, 0], n_heads=3)
    colours = {p.get_facecolor() for p in ax.patches if isinstance(p, Rectangle)}
    assert len(colours) >= 4  # three heads' colours and the grey of x and out
    labels = [t.get_text() for t in ax.texts]
    assert {"head 0", "head 1", "head 2"} <= set(labels) and "head 3" not in labels
    assert all(t.get_fontsize() >= MIN_FONT_SIZE for t in ax.texts)
    fig.canvas.draw()  # renders without error
    with pytest.raises(ValueError, match="n_heads"):
        draw_head_split(axes[0, 0], n_heads=1)
    with pytest.raises(ValueError, match="7-point"):
        draw_head_split(axes[0, 0], fontsize=5)


def test_the_tiles_skip_the_causal_upper_triangle():
    fig, axes = new_axes(1, size=(6.4, 4.0))
    ax = draw_tiles(axes[0, 0], n_tiles=5, causal=True, program=2, step=1)
    grid = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 1 and p.get_height() == 1]
    hatched = [p for p in grid if p.get_hatch()]
    assert len(hatched) == 5 * 4 // 2  # the tiles above the diagonal
    assert any("program 2" in t.get_text() for t in ax.texts)
    fig.canvas.draw()
    ax = draw_tiles(new_axes(1)[1][0, 0], n_tiles=4, causal=False, program=1, step=3)
    assert not [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch()]
    with pytest.raises(ValueError, match="visits"):
        draw_tiles(new_axes(1)[1][0, 0], n_tiles=4, causal=True, program=1, step=2)


def test_patterns_by_head_count_fit_the_column_with_one_colour_bar():
    import numpy as np

    from headlab.viz.figures import COLUMN_WIDTH
    from deviating.figures.patterns import plot_patterns_by_head_count

    tokens = list("abcde")
    patterns = {h: np.full((h, 5, 5), 0.2) for h in (1, 2, 8)}
    fig = plot_patterns_by_head_count(patterns, tokens, layer=1)
    assert fig.get_size_inches()[0] <= COLUMN_WIDTH + 1e-9
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight"]
    assert len(bars) == 1
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert len(titled) == 1 + 2 + 8 and titled[-1].get_title() == "8 heads: 1.7"
    labelled = [ax for ax in titled if [t.get_text() for t in ax.get_yticklabels()] == tokens]
    assert len(labelled) == 4  # the first panel of each of the four rows
    with pytest.raises(ValueError, match="token labels"):
        plot_patterns_by_head_count(patterns, tokens[:3], layer=1)
