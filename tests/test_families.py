"""The families of 2026 (issue 37): Gemma-2, Gemma-3, Qwen3, OLMo-2 and Phi-3, each a random-weight
model of its own config built offline (2 layers, 4 query heads sharing 2 key/value heads, a vocabulary
of 61). Each family is one entry in ``headlab/heads/adapters.py``; these tests hold each to:

- the gate == zeroing the head's columns of ``W_O``;
- captured patterns == the model's own ``output_attentions`` under eager attention, with the
  sliding window and the attention-logit soft-cap in force (the tiny configs make both bind);
- activation patching and attribution patching == plain-PyTorch references (hooks on ``o_proj``);
- the readout: the logit lens ends at the model's logits (soft-cap included), direct logit
  attribution's shares sum to the logit before the cap, the post-attention norm frozen;
- a clear error where a method cannot apply (path patching's recomputation; the fused kernel under
  sliding windows or a soft-cap).
"""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from headlab.analysis.lens import direct_logit_attribution, logit_lens  # noqa: E402
from headlab.analysis.patching import activation_patch, path_patch  # noqa: E402
from headlab.analysis.streaming import streamed  # noqa: E402
from headlab.heads.model import HeadModel  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402
from tiny_models import reference_attribution, reference_patch  # noqa: E402

SMALL = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=8,
             intermediate_size=64, vocab_size=61, max_position_embeddings=32, pad_token_id=0, bos_token_id=0,
             eos_token_id=0)
WINDOW = 3  # Gemma's sliding window, shorter than the inputs so that it binds
GEMMA = dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=8)


def _config(family: str):
    import transformers as tf

    return {
        "gemma2": lambda: tf.Gemma2Config(**SMALL, **GEMMA, attn_logit_softcapping=1.5, final_logit_softcapping=2.0),
        "gemma3": lambda: tf.Gemma3TextConfig(**SMALL, **GEMMA),  # q/k RMSNorms in place of Gemma-2's soft-cap
        "qwen3": lambda: tf.Qwen3Config(**SMALL),
        "olmo2": lambda: tf.Olmo2Config(**SMALL),
        "phi3": lambda: tf.Phi3Config(**SMALL),
    }[family]()


FAMILIES = {"gemma2": "gemma", "gemma3": "gemma", "qwen3": "llama", "olmo2": "olmo2", "phi3": "phi3"}


def make(family: str, seed: int = 0) -> HeadModel:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(family), attn_implementation="eager")
    with torch.no_grad():  # norms' gains away from their initial 1 (0 for Gemma's 1 + weight)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
            elif p.dim() == 2:
                p.normal_(0, 0.3)  # scores large enough for the soft-cap to bind
    return HeadModel(model.eval(), name=family)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param, make(request.param)


def batch(seed: int = 0, n: int = 3, seq: int = 7) -> dict:
    ids = torch.randint(1, 61, (n, seq), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_each_family_is_its_own_entry(family):
    name, hm = family
    assert hm.arch.name == FAMILIES[name]
    assert (hm.n_layers, hm.n_heads, hm.n_kv_heads, hm.d_head) == (2, 4, 2, 8)


def test_the_gate_is_zeroing_the_heads_columns_of_W_O(family):
    _, hm = family
    b = batch()
    with torch.no_grad():
        clean = hm(b)
    for layer, head in [(0, 1), (1, 3)]:
        with torch.no_grad(), hm.ablate([(layer, head)]):
            gated = hm(b)
        surgery = copy.deepcopy(hm.model)
        with torch.no_grad():
            hm.arch.out_proj(hm.arch.blocks(surgery)[layer]).weight[:, head * 8:(head + 1) * 8] = 0.0
            ref = surgery(**b, use_cache=False).logits
        torch.testing.assert_close(gated, ref, atol=1e-5, rtol=1e-5)
        assert (gated - clean).abs().max() > 1e-3


def test_capture_is_the_models_own_eager_pattern(family):
    name, hm = family
    b = batch(seq=8)
    out, cache = hm.run_with_cache(b)
    with torch.no_grad():
        own = hm.model(**b, use_cache=False, output_attentions=True)
    torch.testing.assert_close(out, own.logits, atol=1e-5, rtol=1e-5)
    for layer in range(hm.n_layers):
        pattern = cache.pattern(layer)
        torch.testing.assert_close(pattern, own.attentions[layer], atol=1e-6, rtol=0)
        assert torch.all(pattern.triu(1) == 0)
        window = getattr(hm.model.config, "layer_types", [None] * 2)[layer] == "sliding_attention"
        far = torch.ones(8, 8, dtype=torch.bool).tril(-WINDOW)  # keys WINDOW or more before the query
        assert bool((pattern[..., far] == 0).all()) == window, (name, layer)  # the window binds, and only there
    if name == "gemma2":  # the soft-cap binds: without it the global layer's pattern differs
        uncapped = copy.deepcopy(hm.model)
        for block in uncapped.model.layers:
            block.self_attn.attn_logit_softcapping = None
        with torch.no_grad():
            other = uncapped(**b, use_cache=False, output_attentions=True).attentions[1]
        assert (other - cache.pattern(1)).abs().max() > 1e-2


def test_activation_patching_equals_a_plain_pytorch_reference(family):
    _, hm = family
    clean, corrupted = batch(1), batch(2)
    score = LogitMetric("logit_diff", (3, 5))
    values = activation_patch(hm, clean, corrupted, metric=Metric(score))  # (n, layer, head)
    for layer, head in [(0, 0), (0, 3), (1, 2)]:
        ref = reference_patch(hm, clean, corrupted, layer, head, score)
        torch.testing.assert_close(values[:, layer, head], ref.float(), atol=1e-5, rtol=1e-5)
    assert values.std() > 1e-3


def test_attribution_patching_equals_a_plain_pytorch_reference(family):
    attribution = pytest.importorskip("headlab.analysis.attribution", reason="attribution patching not merged yet")
    _, hm = family
    clean, corrupted = batch(1), batch(2)
    score = LogitMetric("logit_diff", (3, 5))
    ours = attribution.attribution_patch(hm, clean, corrupted, metric=Metric(score))  # (n, layer, head)
    torch.testing.assert_close(ours.float(), reference_attribution(hm, clean, corrupted, score).float(),
                               atol=1e-4, rtol=1e-4)


def test_the_readout_ends_at_the_logits_and_attribution_sums_to_them(family):
    name, hm = family
    b = batch()
    readout = hm.readout()
    with torch.no_grad(), hm.residual_stream() as stream:
        logits = hm(b)
    torch.testing.assert_close(logit_lens(hm, b)[-1], logits, atol=1e-5, rtol=1e-5)
    uncapped = hm.model.model.norm(stream[-1]) @ hm.model.lm_head.weight.T  # by hand, before any cap
    if name == "gemma2":  # the cap binds: the model's logits are the capped ones
        assert readout.softcap == 2.0 and logits.abs().max() < 2.0 < uncapped.abs().max()
        torch.testing.assert_close(logits, 2.0 * torch.tanh(uncapped / 2.0), atol=1e-5, rtol=1e-5)
    else:
        assert readout.softcap is None
    att = direct_logit_attribution(hm, b, (3, 5))
    torch.testing.assert_close(att.logits, (uncapped[..., 3] - uncapped[..., 5]).double(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(att.total(), att.logits, atol=1e-5, rtol=0)
    assert float(att.heads.abs().max()) > 1e-3


def test_a_post_attention_norm_is_frozen_in_each_heads_share(family):
    """Gemma and OLMo-2 normalise the attention's output before it joins the stream: a head's share is
    its write through that norm with the scale frozen, so the heads and b_O add up to the norm's output."""
    name, hm = family
    post = hm.arch.attn_out_norm(hm.blocks[1])
    assert (post is not None) == (name in ("gemma2", "gemma3", "olmo2"))
    if post is None:
        return
    b = batch()
    with torch.no_grad(), hm.outputs_of(post) as written, hm.capture(("z",)) as cache:
        hm(b)
    att = direct_logit_attribution(hm, b, 3)
    readout = hm.readout()
    with torch.no_grad(), hm.residual_stream() as stream:
        hm(b)
    lin = readout.linear
    u = readout.W_U[:, 3].double()
    share = lin.apply(written[0].double(), lin.scale(stream[-1].double())) @ u  # what the attention wrote
    torch.testing.assert_close(att.heads[..., 1, :].sum(-1) + att.attn_bias[..., 1], share, atol=1e-6, rtol=1e-6)
    naive = lin.apply(hm.head_results(1, cache.z(1)).double(), lin.scale(stream[-1].double())) @ u
    assert (naive.sum(-1) - share).abs().max() > 1e-3  # z @ W_O alone would be wrong


def test_the_fused_qkv_splits_into_the_three_projections():
    hm = make("phi3")
    block = hm.blocks[0]
    x = torch.randn(2, 5, 32)
    q, k, v = hm.arch.qkv(block)[:3]
    with torch.no_grad():
        torch.testing.assert_close(block.self_attn.qkv_proj(x), torch.cat([x @ q, x @ k, x @ v], -1))
    assert q.shape == (32, 32) and k.shape == v.shape == (32, 16)


def test_what_cannot_apply_says_so(family):
    name, hm = family
    clean, corrupted = batch(1), batch(2)
    with pytest.raises(NotImplementedError, match="rotates queries and keys"):
        path_patch(hm, clean, corrupted, (0, 1), (1, 2))
    if name.startswith("gemma"):  # sliding windows (and Gemma-2's soft-cap) are not in the fused kernel
        with pytest.raises(NotImplementedError, match="sliding_window|softcap|sliding window"):
            with torch.no_grad(), streamed(hm):
                hm(clean)
    else:
        with torch.no_grad():
            plain = hm(clean)
            with streamed(hm):
                fused = hm(clean)
        torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-4)
    assert hm.model.config._attn_implementation == "eager" and hm.hooks_installed == 0
