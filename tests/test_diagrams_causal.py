"""The causal-positions diagram and the atlas figure's stable labels."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from headlab.analysis.detect.calibration import StableLabels  # noqa: E402
from headlab.viz.atlas import plot_atlas, plot_lift_vs_effect  # noqa: E402
from deviating.diagrams.causal_positions import plot_causal_positions  # noqa: E402
from headlab.viz.figures import new_axes  # noqa: E402


def test_one_box_per_token_and_the_predicted_word_under_the_query() -> None:
    _, axes = new_axes(1, 1)
    ax = plot_causal_positions(axes[0, 0], ("a", "b", "c", "d"), word=3, source=0)
    texts = [t.get_text() for t in ax.texts]
    for w in "abcd":
        assert w in texts
    # position i predicts i + 1: three "predicts" labels, the query's in bold
    bold = [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]
    assert bold == ["d"]


@pytest.mark.parametrize(("word", "source"), [(0, 0), (4, 1), (2, 2), (2, -1)])
def test_bad_indices_are_refused(word: int, source: int) -> None:
    _, axes = new_axes(1, 1)
    with pytest.raises(ValueError):
        plot_causal_positions(axes[0, 0], ("a", "b", "c", "d"), word=word, source=source)


def _atlas() -> dict:
    heads = [{"head": [l, h], "label": lab, "strength": 1.0, "lift": {"previous_token": x}, "effect": e,
              "scores": {}} for (l, h), lab, x, e in
             (((0, 0), "previous_token", 0.9, 0.1), ((0, 1), "first_token", 0.5, 0.2),
              ((1, 0), "orphan", 0.1, 0.9), ((1, 1), "diffuse", 0.0, 0.0))]
    return {"model": "toy", "n_layers": 2, "n_heads": 2, "n_texts": 3, "heads": heads,
            "label_counts": {"previous_token": 1, "first_token": 1, "orphan": 1, "diffuse": 1},
            "effect": {"kind": "ablation", "metric": "loss"}, "thresholds": {"lift": 0.4}}


def test_unstable_heads_are_hatched_and_named_in_brackets() -> None:
    atlas = _atlas()
    stable = StableLabels([["previous_token", "first_token"], ["orphan", "diffuse"]],
                          np.array([[1.0, 0.5], [0.95, 1.0]]), 0.9, 100)
    fig = plot_atlas(atlas, printed=stable)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "(first)" in texts and "prev" in texts and len(texts) == 4
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "unstable (1)" in legend and "first_token (1)" not in legend


def test_lift_vs_effect_names_the_heads_asked_for() -> None:
    _, axes = new_axes(1, 1)
    ax = plot_lift_vs_effect(axes[0, 0], _atlas(), threshold=0.2, annotate_heads=[(0, 1)])
    assert [t.get_text() for t in ax.texts] == ["0.1"]
    assert ax.lines[-1].get_xdata()[0] == 0.2
