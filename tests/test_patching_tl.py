"""Parity with TransformerLens (run where it is installed; skipped elsewhere): the patching grids,
direct logit attribution and the logit lens of headlab equal TransformerLens's on the same weights,
a tiny random Hugging Face GPT-2 that TransformerLens 4 wraps in its ``TransformerBridge``.

TransformerLens is not a dependency of the book; to run these::

    /usr/bin/python3 -m venv /tmp/venv-tl && /tmp/venv-tl/bin/pip install torch -e .[test] "transformer-lens>=4.3,<5"
    /tmp/venv-tl/bin/python -m pytest -n0 tests/test_patching_tl.py
"""

from __future__ import annotations

import pytest
import torch

tl = pytest.importorskip("transformer_lens")
tl_patching = pytest.importorskip("transformer_lens.patching")

from headlab.analysis.lens import direct_logit_attribution, logit_lens  # noqa: E402
from headlab.analysis.patching import activation_patch  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402
from tiny_models import make_model, random_batch  # noqa: E402

A, B = 3, 5  # the logit difference scored at the last position


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The same weights as a HeadModel and as a TransformerBridge (with a word-level tokenizer saved
    to disk, since TransformerLens reloads its tokenizer by name)."""
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformer_lens.model_bridge import TransformerBridge

    hm = make_model("gpt2")
    words = Tokenizer(tok_models.WordLevel({f"w{i}": i for i in range(61)}, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path_factory.mktemp("tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=words, bos_token="w0", eos_token="w0", pad_token="w0",
                            unk_token="w0").save_pretrained(folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, add_bos_token=True)
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hm.model, tokenizer=tokenizer, device="cpu")
    return hm, bridge


def tl_diff(logits: torch.Tensor) -> torch.Tensor:
    return (logits[:, -1, A] - logits[:, -1, B]).mean()


def test_the_bridge_runs_the_same_model(models):
    hm, bridge = models
    ids = random_batch(hm)["input_ids"]
    torch.testing.assert_close(bridge(ids), hm.forward(ids), atol=1e-5, rtol=0)


def test_head_by_position_grid_equals_transformer_lens(models):
    hm, bridge = models
    clean, corrupted = random_batch(hm, seed=0), random_batch(hm, seed=1)
    _, clean_cache = bridge.run_with_cache(clean["input_ids"])
    theirs = tl_patching.get_act_patch_attn_head_out_by_pos(bridge, corrupted["input_ids"], clean_cache, tl_diff)
    ours = activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("logit_diff", (A, B))),
                            direction="denoising", positions=True)  # (n, layer, head, pos)
    assert theirs.shape == (2, 7, 4)  # (layer, pos, head)
    torch.testing.assert_close(ours.mean(0).permute(0, 2, 1), theirs.float(), atol=1e-5, rtol=0)
    all_pos = tl_patching.get_act_patch_attn_head_out_all_pos(bridge, corrupted["input_ids"], clean_cache, tl_diff)
    ours = activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("logit_diff", (A, B))),
                            direction="denoising")
    torch.testing.assert_close(ours.mean(0), all_pos.float(), atol=1e-5, rtol=0)


def test_residual_grid_equals_transformer_lens(models):
    hm, bridge = models
    clean, corrupted = random_batch(hm, seed=0), random_batch(hm, seed=1)
    _, clean_cache = bridge.run_with_cache(clean["input_ids"])
    theirs = tl_patching.get_act_patch_resid_pre(bridge, corrupted["input_ids"], clean_cache, tl_diff)  # (layer, pos)
    ours = activation_patch(hm, clean, corrupted, "resid", metric=Metric(LogitMetric("logit_diff", (A, B))),
                            direction="denoising").mean(0)  # after layer l = before layer l + 1
    torch.testing.assert_close(ours[:-1], theirs[1:].float(), atol=1e-5, rtol=0)


def test_dla_equals_transformer_lens(models):
    hm, bridge = models
    ids = random_batch(hm)["input_ids"]
    _, cache = bridge.run_with_cache(ids)
    stack = cache.stack_head_results(layer=-1, pos_slice=-1)  # (layer * head, batch, d_model)
    stack = cache.apply_ln_to_stack(stack, layer=-1, pos_slice=-1)  # centred, divided by the frozen scale
    readout = hm.readout()
    theirs = stack @ (readout.norm.weight.detach() * (readout.W_U[:, A] - readout.W_U[:, B]))  # the LayerNorm's gain, unfolded
    ours = direct_logit_attribution(hm, ids, (A, B), pos=-1).heads  # (batch, layer, head)
    torch.testing.assert_close(ours.flatten(1).T.float(), theirs, atol=1e-5, rtol=0)


def test_logit_lens_equals_transformer_lens(models):
    hm, bridge = models
    ids = random_batch(hm)["input_ids"]
    _, cache = bridge.run_with_cache(ids)
    theirs = torch.stack([bridge.unembed(bridge.ln_final(cache[f"blocks.{l}.hook_resid_post"]))
                          for l in range(hm.n_layers)])
    torch.testing.assert_close(logit_lens(hm, ids), theirs, atol=1e-5, rtol=0)
