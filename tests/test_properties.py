"""Properties of the kernels and of ablation, checked on inputs hypothesis draws.

Kernels: every backend (numpy, torch, SDPA, loops, the tiled flash kernel, the streamed fused
kernel) gives the float64 reference's output on random shapes, masks and causal flags; finite
inputs never give a non-finite output, even when the scores overflow float32.

Ablation, on the book's GPT with random weights: ablating a head whose output is zero changes
nothing; the order of heads in an ablation set does not matter; nested ablations equal the
ablation of their union, in either nesting order (bitwise: gates multiply by exactly 0 or 1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headlab.heads.ablation import Ablation
from deviating.kernels import attention, flash_attention
from headlab.kernels import fused_attention
from tiny_models import make_model, random_batch

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def self_attention(draw, max_n=9, max_d=6):
    """q, k, v ``(batch, head, n, d)`` float64, a key-padding mask ``(batch, n)`` whose first key is
    real, and a causal flag."""
    batch, heads = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n, d = draw(st.integers(1, max_n)), draw(st.integers(1, max_d))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([0.3, 1.0, 5.0]))
    q, k, v = (torch.from_numpy(rng.standard_normal((batch, heads, n, d)) * spread) for _ in range(3))
    real = torch.from_numpy(rng.random((batch, n)) < draw(st.sampled_from([0.5, 0.8, 1.0])))
    real[:, 0] = True  # every query has a key it may attend to
    return q, k, v, real, draw(st.booleans())


def reference(q, k, v, real, causal):
    """The float64 numpy backend: ``(batch, head, n, d)``."""
    mask = np.broadcast_to(real.numpy()[:, None, None, :], q.shape[:2] + (q.shape[2], q.shape[2]))
    return attention(q.numpy(), k.numpy(), v.numpy(), mask, causal=causal, backend="numpy")[0]


@settings(max_examples=60, **SETTINGS)
@given(self_attention(), st.sampled_from(["torch", "sdpa", "loops"]), st.sampled_from([torch.float32, torch.float64]))
def test_every_reference_backend_agrees_on_random_shapes_and_masks(case, backend, dtype):
    q, k, v, real, causal = case
    expected = reference(q, k, v, real, causal)
    mask = real[:, None, None, :].expand(q.shape[:2] + (q.shape[2], q.shape[2]))
    if backend == "loops":
        got = attention(q.numpy(), k.numpy(), v.numpy(), mask.numpy(), causal=causal, backend="loops")[0]
    else:
        got = attention(*(x.to(dtype) for x in (q, k, v)), mask, causal=causal, backend=backend)[0].double().numpy()
    tol = 1e-10 if dtype == torch.float64 or backend == "loops" else 2e-5
    np.testing.assert_allclose(got, expected, atol=tol * 10, rtol=tol)


@settings(max_examples=60, **SETTINGS)
@given(self_attention(), st.integers(1, 5), st.sampled_from([torch.float32, torch.float64]))
def test_the_tiled_and_the_streamed_kernels_agree_with_the_reference(case, block, dtype):
    q, k, v, real, causal = case
    expected = reference(q, k, v, real, causal)
    fused, _ = fused_attention(*(x.to(dtype) for x in (q, k, v)), causal=causal, key_mask=real, backend="tiled",
                               block_size=block)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    np.testing.assert_allclose(fused.double().numpy(), expected, atol=tol * 10, rtol=tol)
    if bool(real.all()):  # flash_attention has no mask argument
        flash = flash_attention(*(x.to(dtype) for x in (q, k, v)), causal=causal, block_size=block)
        np.testing.assert_allclose(flash.double().numpy(), expected, atol=tol * 10, rtol=tol)


@settings(max_examples=40, **SETTINGS)
@given(self_attention(max_n=6), st.floats(1e15, 1e35), st.sampled_from(["numpy", "torch", "sdpa", "flash", "fused"]))
def test_finite_inputs_whose_scores_overflow_float32_give_the_float64_answer(case, scale, backend):
    """``q * 1e30`` in float32: the scores overflow, yet the output is finite and right (the
    pattern is the float64 one, a near one-hot softmax)."""
    q, k, v, real, causal = case
    q32, k32, v32 = (x.float() for x in (q * scale, k * scale, v))
    if not all(bool(torch.isfinite(x).all()) for x in (q32, k32)):
        return  # the inputs themselves do not fit float32: not this property
    expected = attention(q32.double().numpy(), k32.double().numpy(), v32.double().numpy(), causal=causal)[0]
    if backend == "numpy":
        got = attention(q32.numpy(), k32.numpy(), v32.numpy(), causal=causal)[0]
    elif backend in ("torch", "sdpa"):
        got = attention(q32, k32, v32, causal=causal, backend=backend)[0].numpy()
    elif backend == "flash":
        got = flash_attention(q32, k32, v32, causal=causal, block_size=2).numpy()
    else:
        got = fused_attention(q32, k32, v32, causal=causal, backend="tiled", block_size=2)[0].numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected.astype(np.float32), atol=1e-5, rtol=1e-5)


# -------------------------------------------------------------------------- ablation

@pytest.fixture(scope="module")
def gpt():
    return make_model("headlab")


HEADS = st.tuples(st.integers(0, 1), st.integers(0, 3))


def run(hm, batch, *blocks):
    """The output under nested ablations, ``blocks`` from the outermost in."""
    import contextlib
    with torch.no_grad(), contextlib.ExitStack() as stack:
        for heads, mode in blocks:
            stack.enter_context(hm.ablate(heads, Ablation(mode, reference=batch if mode != "zero" else None)))
        return hm(batch)


@settings(max_examples=30, **SETTINGS)
@given(HEADS, st.sampled_from(["zero", "mean"]), st.integers(0, 1000))
def test_ablating_a_head_whose_output_is_zero_changes_nothing(head, mode, seed):
    hm = make_model("headlab", seed=seed % 7)
    layer, h = head
    attn = hm.blocks[layer].attn
    rows = slice(h * hm.d_head, (h + 1) * hm.d_head)
    with torch.no_grad():  # head h of this layer reads nothing into its values: z_h = 0
        attn.W_V.weight[rows] = 0.0
        attn.W_V.bias[rows] = 0.0
    batch = random_batch(hm, seed=seed)
    with torch.no_grad():
        clean = hm(batch)
    assert torch.equal(run(hm, batch, ([head], mode)), clean)


@settings(max_examples=30, **SETTINGS)
@given(st.lists(HEADS, min_size=1, max_size=6), st.randoms(use_true_random=False),
       st.sampled_from(["zero", "mean", "resample"]))
def test_the_order_of_heads_in_an_ablation_set_does_not_matter(gpt, heads, rng, mode):
    batch = random_batch(gpt)
    shuffled = list(heads)
    rng.shuffle(shuffled)
    assert torch.equal(run(gpt, batch, (heads, mode)), run(gpt, batch, (shuffled, mode)))


@settings(max_examples=40, **SETTINGS)
@given(st.lists(HEADS, min_size=1, max_size=4), st.lists(HEADS, min_size=1, max_size=4),
       st.sampled_from(["zero", "mean"]))
def test_nested_ablation_equals_the_ablation_of_the_union(gpt, a, b, mode):
    batch = random_batch(gpt, n=2)
    union = run(gpt, batch, (sorted(set(a) | set(b)), mode))
    assert torch.equal(run(gpt, batch, (a, mode), (b, mode)), union)
    assert torch.equal(run(gpt, batch, (b, mode), (a, mode)), union)
    assert gpt.hooks_installed == 0 and gpt.dispatcher.idle
