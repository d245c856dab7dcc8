"""The adjustable-heads widget of chapter 2: its computation (HeadCountPatterns) and its wiring."""

from __future__ import annotations

import pytest
import torch

from headlab import HeadModel
from headlab.models.gpt import GPT, GPTConfig
from deviating.data.windows import LanguageWindows
from headlab.viz.widgets import HeadCountPatterns, heads_widget

TEXT = "the loud hunter sleeps . he smiles ."


@pytest.fixture(scope="module")
def tokenizer():
    return LanguageWindows(n_ctx=16).tokenizer()


def tiny(tokenizer, n_heads: int, d_model: int = 8, seed: int = 0) -> HeadModel:
    torch.manual_seed(seed)
    config = GPTConfig(d_vocab=len(tokenizer.get_vocab()), n_ctx=16, d_model=d_model, n_layers=2,
                       n_heads=n_heads, d_mlp=16)
    return HeadModel(GPT(config).eval(), tokenizer, name=f"tiny-{n_heads}")


@pytest.fixture(scope="module")
def models(tokenizer):
    return {h: tiny(tokenizer, h, seed=h) for h in (1, 2, 4)}


def direct_pattern(hm: HeadModel, ids: list[int], layer: int) -> torch.Tensor:
    """The pattern of ``layer`` read straight off the GPT's hook point."""
    out = []
    handle = hm.model.blocks[layer].attn.hook_pattern.register_forward_hook(lambda m, i, o: out.append(o))
    try:
        with torch.no_grad():
            hm.model(torch.tensor([ids]))
    finally:
        handle.remove()
    return out[0][0]  # (head, q_pos, k_pos)


def test_view_is_the_model_pattern_with_bos_first(models, tokenizer):
    core = HeadCountPatterns(models)
    assert core.head_counts == [1, 2, 4] and core.n_layers == 2
    ids = [tokenizer.bos_token_id] + tokenizer(TEXT)["input_ids"]
    for n_heads, hm in models.items():
        for layer in (0, 1):
            view = core.view(n_heads, TEXT, layer)
            assert view.n_heads == n_heads and view.d_head == 8 // n_heads and view.layer == layer
            assert view.tokens == ["<bos>", *TEXT.split()]
            assert view.pattern.shape == (n_heads, len(ids), len(ids))
            torch.testing.assert_close(view.pattern, direct_pattern(hm, ids, layer))
    # a text that already starts with <bos> gets no second one
    assert core.view(2, "<bos> " + TEXT).tokens == ["<bos>", *TEXT.split()]


def test_bad_inputs_are_named(models, tokenizer):
    core = HeadCountPatterns(models)
    with pytest.raises(ValueError, match="no model with 3 heads"):
        core.view(3, TEXT)
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        core.view(1, TEXT, layer=2)
    with pytest.raises(ValueError, match="'xylophones'"):
        core.view(1, "the xylophones sleep .")
    with pytest.raises(ValueError, match="non-empty"):
        core.view(1, "   ")
    with pytest.raises(ValueError, match="n_ctx = 16"):
        core.view(1, " ".join(["the"] * 20))
    with pytest.raises(ValueError, match="key each model by its head count"):
        HeadCountPatterns({2: models[1]})
    with pytest.raises(ValueError, match="differ"):
        HeadCountPatterns({1: models[1], 2: tiny(tokenizer, 2, d_model=12)})
    with pytest.raises(TypeError, match="HeadModel"):
        HeadCountPatterns({1: models[1].model})


def test_widget_draws_its_default_and_follows_the_controls(models):
    box = heads_widget(models, [TEXT, "some lions smile ."], n_heads=2, layer=1, notes={2: "loss 1.0"})
    (heads_box, layer_box), text_box, caption, _figure = box.children[0].children, *box.children[1:]
    assert "2 heads of d_head = 4" in caption.value and "layer 1" in caption.value and "loss 1.0" in caption.value
    # (the figure goes into the Output only inside a kernel; the notebook build checks that)
    heads_box.value = 4
    assert "4 heads of d_head = 2" in caption.value
    layer_box.value = 0
    assert "layer 0" in caption.value
    text_box.value = "the zzz sleeps ."
    assert "error" in caption.value and "zzz" in caption.value
    text_box.value = "some lions smile ."
    assert caption.value.startswith("<b>4 heads")
    with pytest.raises(ValueError, match="no model with 8 heads"):
        heads_widget(models, [TEXT], n_heads=8)
