"""The induction-circuit and gate diagrams draw what their text says (chapters 5 and 6)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from deviating.diagrams.gate import draw_gate  # noqa: E402
from deviating.diagrams.induction_circuit import draw_induction_circuit  # noqa: E402
from headlab.viz.figures import MIN_FONT_SIZE  # noqa: E402


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _all_inside(fig, ax):
    fig.canvas.draw()
    box = fig.bbox
    for t in ax.texts:
        e = t.get_window_extent()
        assert box.x0 - 1 <= e.x0 and e.x1 <= box.x1 + 1 and box.y0 - 1 <= e.y0 and e.y1 <= box.y1 + 1, t.get_text()
        assert t.get_fontsize() >= MIN_FONT_SIZE, t.get_text()


def test_induction_circuit_marks_both_heads_and_k_composition():
    fig, ax = plt.subplots(figsize=(6.8, 3.6))
    assert draw_induction_circuit(ax, previous_head="0.0", induction_head="1.3") is ax
    texts = " | ".join(_texts(ax))
    assert "K-composition" in texts and "what 0.0 wrote" in texts
    assert "head 1.3" in texts and "head 0.0" in texts
    assert "predict B" in texts and "OV copies B" in texts
    assert [t for t in _texts(ax) if t in ("A", "B")] == ["A", "B", "A"]  # A B … A, in that order
    _all_inside(fig, ax)
    plt.close(fig)


def test_gate_diagram_shows_the_ablated_head_before_w_o():
    fig, ax = plt.subplots(figsize=(6.8, 3.3))
    draw_gate(ax, n_heads=4, ablated=3)
    texts = _texts(ax)
    assert "$g_3=0$" in texts and texts.count("$g_0=1$") == 1
    w_o = next(t for t in ax.texts if "W_O" in t.get_text())
    gate = next(t for t in ax.texts if t.get_text() == "$g_3=0$")
    assert gate.get_position()[1] < w_o.get_position()[1]  # the gate acts before the projection
    _all_inside(fig, ax)
    plt.close(fig)


@pytest.mark.parametrize(("kwargs", "message"), [({"n_heads": 1}, "n_heads=1"), ({"ablated": 7}, "got 7")])
def test_gate_diagram_refuses_bad_arguments(kwargs, message):
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=message):
        draw_gate(ax, **kwargs)
    plt.close(fig)
