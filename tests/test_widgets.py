"""Live ablation: the computation behind the widget, and the widget's wiring."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.metrics import Metric
from headlab.viz.live import ablation_widget
from headlab.viz.widgets import LiveAblation
from tiny_models import make_model


class IdTokenizer:
    """Whitespace 'tokenizer' over integer tokens, enough for HeadModel.tokenize on texts."""

    pad_token = "0"
    eos_token = "0"
    padding_side = "right"

    def __call__(self, texts, padding=True, return_tensors="pt"):
        rows = [[int(t) for t in text.split()] for text in texts]
        n = max(map(len, rows))
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": mask}

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]


@pytest.fixture
def causal():
    hm = make_model("gpt2")
    hm.tokenizer = IdTokenizer()
    return hm


def test_live_ablation_matches_direct_ablation(causal):
    live = LiveAblation(causal, ["5 9 3 7 2", "4 4 8"])
    clean = live.view()
    torch.testing.assert_close(clean.metric, clean.clean)
    view = live.view([(0, 1), (1, 3)], selected=(1, 0))
    batch = causal.tokenize(["5 9 3 7 2", "4 4 8"])
    with torch.no_grad(), causal.ablate([(0, 1), (1, 3)]):
        direct = Metric().bound(causal).score(causal(batch), batch)
    torch.testing.assert_close(view.metric, direct)
    assert view.pattern.shape == (5, 5) and view.tokens == ["t5", "t9", "t3", "t7", "t2"]
    assert len(view.top) == 5 and all(0 <= a <= 1 and 0 <= b <= 1 for _, a, b in view.top)
    assert view.top[0][1] >= view.top[-1][1]  # clean ranking
    with pytest.raises(ValueError, match="unknown ablation mode"):
        live.view([(0, 0)], mode="drop")


def test_encoder_view_reports_embedding_change():
    hm = make_model("bert")
    hm.tokenizer = IdTokenizer()
    live = LiveAblation(hm, ["5 9 3 7", "4 4 8 1"])
    assert torch.all(live.view().metric.abs() < 1e-5)
    view = live.view([(1, 2)], mode="mean")
    assert torch.all(view.metric > 0) and view.similarity.shape == (2, 2) and view.top == []


def test_widget_toggles_recompute(causal):
    w = ablation_widget(causal, ["5 9 3 7 2", "4 4 8"], preset=[(1, 1)])
    assert w.view["ablated"] == [[1, 1]] and w.onnx == "" and w.tokenizer is None  # a kernel computes it
    w.ablated = [[0, 2], [1, 1]]  # as the front-end sets it on a click
    assert w.view["ablated"] == [[0, 2], [1, 1]]
    np.testing.assert_allclose(w.view["metric"], LiveAblation(causal, ["5 9 3 7 2", "4 4 8"]).view(
        [(0, 2), (1, 1)]).metric.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        ablation_widget(causal, ["1 2 3"], preset=[(7, 0)])


def test_the_widget_shows_an_encoder_too():
    """One live-ablation widget for every model: an encoder's view is 1 - cos of its pooled
    embedding to the clean one, with no next tokens."""
    hm = make_model("bert")
    hm.tokenizer = IdTokenizer()
    w = ablation_widget(hm, ["5 9 3 7", "4 4 8 1"])
    assert w.view["what"].startswith("1 - cos") and w.view["top"] == [] and max(w.view["metric"]) < 1e-5
    w.ablated = [[1, 2]]
    assert min(w.view["metric"]) > 0
    w.texts = ["5 9 3 7 | 4 | 8"]
    assert "is an encoder: it predicts no next token" in w.view["error"]


def test_bad_calls_get_an_error_that_names_the_value(causal):
    """The four calls of issue 28 that used to end in an IndexError, an AttributeError, a TraitError
    and torch's "selected index k out of range": each now names the value and what to give."""
    texts = ["1 2 3 4", "4 3 2 1"]
    live = LiveAblation(causal, texts)
    with pytest.raises(ValueError, match=r"selected=\(0, 99\): head 0\.99 is out of range: .* heads 0\.\.\d"):
        live.view(selected=(0, 99))
    with pytest.raises(TypeError, match="text 0 is int 3; give the words themselves"):
        LiveAblation(causal, [3, 4])
    with pytest.raises(TypeError, match="one string '1 2 3'"):
        LiveAblation(causal, "1 2 3")
    with pytest.raises(ValueError, match="unknown ablation mode 'bogus': choose from zero, mean"):
        ablation_widget(causal, texts, mode="bogus")
    with torch.no_grad():
        vocab = causal(texts).shape[-1]
    with pytest.raises(ValueError, match=rf"top_k=1000000 is more than the model's {vocab} tokens: give 1\.\.{vocab}"):
        LiveAblation(causal, texts, top_k=10**6)
    with pytest.raises(ValueError, match="top_k must be a positive integer .* got 0"):
        LiveAblation(causal, texts, top_k=0)
    with pytest.raises(ValueError, match="head 0.99 is out of range"):
        ablation_widget(causal, texts, selected=(0, 99))
