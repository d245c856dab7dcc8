"""The adjustable-heads widget of chapter 2: its computation (HeadCountPatterns). Its front-end,
deviating.figures.widgets.heads_widget, is tested in test_live_widgets.py and, clicked, in test_site_widgets.py."""

from __future__ import annotations

import pytest
import torch

from headlab import HeadModel
from headlab.models.gpt import GPT, GPTConfig
from deviating.data.windows import LanguageWindows
from deviating.figures.widgets import HeadCountPatterns

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
