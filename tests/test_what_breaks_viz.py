"""Chapter 7's figures: the pruning-with-tolerance diagram and ROC curves, on known inputs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from deviating.figures.comparisons import plot_roc, roc_points  # noqa: E402
from deviating.diagrams.pruning import STEPS, draw_pruning_pipeline  # noqa: E402


def test_the_pipeline_has_its_four_steps_and_a_tolerance_band():
    fig, (top, bottom) = plt.subplots(2, 1)
    draw_pruning_pipeline(top, bottom, tolerance=0.05)
    texts = [t.get_text() for t in top.texts]
    assert [s[0] for s in STEPS] == ["1. rank", "2. remove", "3. evaluate", "4. compare"]
    assert all(title in texts for title, _ in STEPS)
    assert len(top.patches) == 4
    assert any(abs(line.get_ydata()[0] - 0.05) < 1e-12 for line in bottom.lines if len(set(line.get_ydata())) == 1)
    fails = sorted(t.get_text() for t in bottom.texts if t.get_text().startswith("fails at"))
    assert fails == ["fails at 12", "fails at 8"]  # the sketch's tail fails first
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        draw_pruning_pipeline(top, bottom, tolerance=0)
    plt.close(fig)


def test_roc_points_and_the_area_in_the_legend():
    fpr, tpr = roc_points([2.0, 3.0], [1.0, 2.0])
    assert fpr.tolist() == [0.0, 0.0, 0.5, 1.0] and tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    fig, ax = plt.subplots()
    plot_roc(ax, {"perfect": (np.array([2.0, 3.0]), np.array([0.0, 1.0]))}, mark_fpr=0.05)
    assert "AUC 1.00" in ax.get_legend().get_texts()[0].get_text()
    with pytest.raises(ValueError, match="at least one positive"):
        roc_points([], [1.0])
    plt.close(fig)
