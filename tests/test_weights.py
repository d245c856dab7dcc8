"""HeadModel.W_Q/W_K/W_V/W_O and their biases, for every family: they reproduce the model's own attention."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.heads.model import HeadModel
from tiny_models import ADAPTER_FACTORIES, make_model, random_batch


def _rotary(hm: HeadModel):
    """The model's own rotary embedding and the function that applies it, where it has one."""
    if hm.arch.name == "gpt_neox":
        from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb
        return hm.model.gpt_neox.rotary_emb, apply_rotary_pos_emb
    if hm.arch.name == "llama":
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        return hm.model.model.rotary_emb, apply_rotary_pos_emb
    return None


def block_inputs(hm: HeadModel, batch: dict) -> tuple[list[torch.Tensor], object]:
    """The residual stream entering every block (captured with a hook), and the capture of the same pass."""
    seen: dict[int, torch.Tensor] = {}

    def keep(layer):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            seen.setdefault(layer, x.detach())
        return hook

    handles = [b.register_forward_pre_hook(keep(l), with_kwargs=True) for l, b in enumerate(hm.blocks)]
    try:
        _, cache = hm.run_with_cache(batch)
    finally:
        for h in handles:
            h.remove()
    return [seen[l] for l in range(hm.n_layers)], cache


def project(a: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``a @ W[h] + b[h]`` for every head: ``(batch, pos, d_model)`` -> ``(batch, head, pos, d_head)``."""
    out = torch.einsum("bpm,hmd->bhpd", a, W)
    return out if b is None else out + b[None, :, None, :]


@pytest.mark.parametrize("family", sorted(ADAPTER_FACTORIES))
def test_weights_reproduce_the_captured_pattern_and_z(family: str) -> None:
    """From W_Q, W_K, W_V, their biases and the adapter's norm alone (plus the model's own rotary
    embedding where it has one), recompute every head's pattern and output z: they equal what
    the model computed. For GQA this checks that each query head gets its key/value head."""
    hm = make_model(family)
    batch = random_batch(hm, n=2, seq=6)
    xs, cache = block_inputs(hm, batch)
    pos = batch["input_ids"].shape[1]
    for layer in range(hm.n_layers):
        norm = hm.attn_norm(layer)
        with torch.no_grad():
            a = norm(xs[layer]) if norm is not None else xs[layer]
            q = project(a, hm.W_Q(layer), hm.b_Q(layer))  # (batch, head, pos, d_head)
            k = project(a, hm.W_K(layer), hm.b_K(layer))
            v = project(a, hm.W_V(layer), hm.b_V(layer))
            rotary = _rotary(hm)
            assert hm.arch.rotary == (rotary is not None)
            if rotary is not None:
                embed, apply = rotary
                cos, sin = embed(a, torch.arange(pos)[None])
                q, k = apply(q, k, cos, sin)
            scores = q @ k.transpose(-1, -2) / math.sqrt(hm.d_head)  # (batch, head, q_pos, k_pos)
            if hm.causal:
                future = torch.ones(pos, pos, dtype=torch.bool).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            pattern = scores.softmax(-1)
        torch.testing.assert_close(pattern, cache.pattern(layer), atol=1e-5, rtol=1e-4)
        z = (pattern @ v).transpose(1, 2)  # (batch, pos, head, d_head)
        torch.testing.assert_close(z, cache.z(layer), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", sorted(ADAPTER_FACTORIES))
def test_shapes_biases_and_the_output_bias(family: str) -> None:
    hm = make_model(family)
    for W in (hm.W_Q(1), hm.W_K(1), hm.W_V(1)):
        assert W.shape == (hm.n_heads, hm.d_model, hm.d_head) and not W.requires_grad
    assert hm.W_O(1).shape == (hm.n_heads, hm.d_head, hm.d_model)
    has_bias = family in ("headlab", "gpt2", "bert", "gpt_neox")  # Llama has no attention bias
    for b in (hm.b_Q(1), hm.b_K(1), hm.b_V(1)):
        assert (b is not None) == has_bias
        if has_bias:
            assert b.shape == (hm.n_heads, hm.d_head) and float(b.abs().max()) > 0
    b_O = hm.b_O(1)
    assert (b_O is None) == (family == "llama_gqa")
    if b_O is not None:
        torch.testing.assert_close(b_O, hm.out_proj(1).bias.detach())


def test_grouped_query_attention_repeats_each_key_value_head_for_its_query_heads() -> None:
    hm = make_model("llama_gqa")  # 4 query heads, 2 key/value heads
    assert (hm.n_heads, hm.n_kv_heads) == (4, 2)
    for W in (hm.W_K(0), hm.W_V(0)):
        assert torch.equal(W[0], W[1]) and torch.equal(W[2], W[3]) and not torch.equal(W[1], W[2])
    Q = hm.W_Q(0)
    assert not torch.equal(Q[0], Q[1])
    assert make_model("gpt2").n_kv_heads == make_model("gpt2").n_heads


def test_neox_heads_are_interleaved_in_the_fused_projection() -> None:
    """GPT-NeoX's query_key_value output is (head, q|k|v, d_head), not (q|k|v, head, d_head)."""
    hm = make_model("gpt_neox")
    fused = hm.blocks[0].attention.query_key_value.weight.detach()  # (3 * n * d_head, d_model)
    d = hm.d_head
    for h in range(hm.n_heads):
        start = 3 * d * h
        assert torch.equal(hm.W_Q(0)[h], fused[start:start + d].T)
        assert torch.equal(hm.W_K(0)[h], fused[start + d:start + 2 * d].T)
        assert torch.equal(hm.W_V(0)[h], fused[start + 2 * d:start + 3 * d].T)


def test_norms_of_each_family() -> None:
    assert isinstance(make_model("headlab").attn_norm(0), torch.nn.LayerNorm)
    assert isinstance(make_model("gpt2").attn_norm(1), torch.nn.LayerNorm)
    assert make_model("bert").attn_norm(0) is None  # post-norm: heads read the normalised stream
    llama = make_model("llama_gqa")
    assert "RMSNorm" in type(llama.attn_norm(0)).__name__ and not llama.arch.norm_centres
    from deviating.planted import planted_model
    assert planted_model().attn_norm(0) is None  # no LayerNorm at all


@pytest.mark.parametrize("bad", [2, -1, 1.0, "0", True])
def test_bad_layers_are_refused_by_name(bad) -> None:
    """Out of range: a ValueError; not an int (a float, a string, a bool): a TypeError. Both name it."""
    hm = make_model("gpt2")
    error, message = ((ValueError, f"layer {bad!r} is out of range: gpt2 has layers 0..1")
                      if type(bad) is int else (TypeError, f"layer must be an int, got (the bool )?{bad!r}"))
    for fn in (hm.W_Q, hm.W_K, hm.W_V, hm.W_O, hm.b_Q, hm.out_proj, hm.attn_norm):
        with pytest.raises(error, match=message):
            fn(bad)
