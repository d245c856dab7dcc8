"""Figures are drawn for the book's column: they fit it, their text stays legible, and heat maps
carry a colour bar."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from headlab.viz.figures import COLUMN_WIDTH, MIN_FONT_SIZE, new_axes  # noqa: E402
from headlab.viz.grids import plot_head_grid  # noqa: E402
from headlab.viz.patterns import plot_pattern  # noqa: E402


def test_a_wide_figure_is_scaled_to_the_column_keeping_its_aspect():
    fig, axes = new_axes(4, 1, size=(3.2, 3.0))
    w, h = fig.get_size_inches()
    assert abs(w - COLUMN_WIDTH) < 1e-9 and abs(h / w - 3.0 / 12.8) < 1e-9 and axes.shape == (1, 4)
    fig, _ = new_axes(2, 1, size=(3.0, 2.0))
    assert tuple(fig.get_size_inches()) == (6.0, 2.0)  # narrower than the column: as asked


def test_head_grid_writes_numbers_only_where_they_are_legible():
    values = np.arange(12 * 6, dtype=float).reshape(6, 12) / 72
    fig, ax = new_axes(1, 1, size=(6.5, 3.0))
    plot_head_grid(ax[0, 0], values)
    assert len(ax[0, 0].texts) == values.size and {t.get_fontsize() for t in ax[0, 0].texts} == {MIN_FONT_SIZE}
    fig, ax = new_axes(4, 1, size=(3.0, 3.0))  # four grids of 12 heads in one column: cells too narrow
    plot_head_grid(ax[0, 0], values)
    assert len(ax[0, 0].texts) == 0 and len(fig.axes) == 5  # no numbers, but the colour bar is there


def test_a_pattern_has_a_colour_bar_and_labelled_axes():
    fig, ax = new_axes(1, 1)
    plot_pattern(ax[0, 0], np.eye(4), tokens=list("abcd"))
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "attention weight"
    assert "key" in ax[0, 0].get_xlabel() and "query" in ax[0, 0].get_ylabel()
