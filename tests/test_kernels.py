"""Tests for headlab.kernels, against PyTorch's own attention as the anchor.

Anchors: ``torch.nn.functional.scaled_dot_product_attention`` (SDPA) for
``attention`` and ``flash_attention``; ``torch.nn.MultiheadAttention`` for
``multi_head_attention``. SDPA returns no pattern, but with the identity as
values, ``SDPA(q, k, I) = pattern @ I = pattern``: that is how patterns are checked.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deviating.memory import peak_memory
from deviating.kernels import (
    LOOPS_MAX_WORK,
    attention,
    causal_mask,
    flash_attention,
    merge_heads,
    multi_head_attention,
    softmax,
    split_heads,
)

HYPOTHESIS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny ops on a shared, loaded machine run faster (and steadier) on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------
# Random cases and the SDPA anchor
# ---------------------------------------------------------------------------

@st.composite
def attention_cases(draw, max_n=6, max_d=5, max_batch_dims=2, max_batch=3):
    """Random shapes (batch dims that broadcast), values, a broadcastable mask, causal or not."""
    batch = tuple(draw(st.lists(st.integers(1, max_batch), max_size=max_batch_dims)))
    n_q, n_k = draw(st.integers(1, max_n)), draw(st.integers(1, max_n))
    d, d_v = draw(st.integers(1, max_d)), draw(st.integers(1, max_d))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([0.5, 1.0, 4.0]))  # 4.0: peaky patterns

    def some_dims_one(shape):  # a shape that broadcasts to `shape`
        return tuple(1 if rng.random() < 0.3 else s for s in shape)

    q = rng.standard_normal(some_dims_one(batch) + (n_q, d)) * spread
    k = rng.standard_normal(some_dims_one(batch) + (n_k, d)) * spread
    v = rng.standard_normal(some_dims_one(batch) + (n_k, d_v))
    mask = None
    if draw(st.booleans()):
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])  # the mask may not enlarge it
        full = some_dims_one(batch + (n_q, n_k))
        drop = draw(st.integers(0, len(batch)))  # fewer leading dims also broadcast
        mask = rng.random(full[drop:]) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    return q, k, v, mask, draw(st.booleans())


def sdpa_anchor(q, k, v, mask, causal):
    """SDPA's output and pattern (as float64 numpy), empty rows set to zero explicitly."""
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    # SDPA cannot broadcast a mask beyond the batch of q @ k^T: expand (views) to the full batch
    q, k, v = (torch.as_tensor(x, dtype=torch.float64).expand(batch + x.shape[-2:]) for x in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    eye = torch.eye(n_k, dtype=torch.float64)
    if mask is None:  # is_causal is SDPA's own definition of causal
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        pattern = F.scaled_dot_product_attention(q, k, eye, is_causal=causal)
        return out.numpy(), pattern.numpy()
    allowed = torch.as_tensor(mask)
    if causal:
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    pattern = F.scaled_dot_product_attention(q, k, eye, attn_mask=allowed)
    has_key = allowed.any(-1, keepdim=True)
    return torch.where(has_key, out, 0.0).numpy(), torch.where(has_key, pattern, 0.0).numpy()


def to_family(family, *arrays):
    if family == "torch":
        return [None if a is None else torch.as_tensor(a) for a in arrays]
    if family == "lists":
        return [None if a is None else a.tolist() for a in arrays]
    return list(arrays)


def check_matches_sdpa(case, backend, family):
    q, k, v, mask, causal = case
    want_out, want_pattern = sdpa_anchor(q, k, v, mask, causal)
    out, pattern = attention(*to_family(family, q, k, v, mask), causal=causal, backend=backend,
                             empty_rows="zero")
    kind = {"lists": list, "numpy": np.ndarray, "torch": torch.Tensor}[family]
    assert isinstance(out, kind)
    out = np.asarray(out.numpy() if family == "torch" else out)
    assert out.shape == want_out.shape
    np.testing.assert_allclose(out, want_out, rtol=1e-9, atol=1e-12)
    if backend == "sdpa":
        assert pattern is None
        return
    assert isinstance(pattern, kind)
    pattern = np.asarray(pattern.numpy() if family == "torch" else pattern)
    np.testing.assert_allclose(pattern, want_pattern, rtol=1e-9, atol=1e-12)
    sums = pattern.sum(-1)
    assert np.all(np.isclose(sums, 1.0) | (sums == 0.0))  # zero only for empty rows


@settings(max_examples=60, **HYPOTHESIS)
@given(attention_cases())
def test_numpy_backend_matches_sdpa(case):
    check_matches_sdpa(case, "numpy", "numpy")


@settings(max_examples=60, **HYPOTHESIS)
@given(attention_cases())
def test_torch_backend_matches_sdpa(case):
    check_matches_sdpa(case, "torch", "torch")


@settings(max_examples=40, **HYPOTHESIS)
@given(attention_cases())
def test_sdpa_backend_matches_sdpa_and_returns_no_pattern(case):
    check_matches_sdpa(case, "sdpa", "torch")


@settings(max_examples=25, **HYPOTHESIS)
@given(attention_cases(max_n=4, max_d=3, max_batch_dims=1, max_batch=2), st.sampled_from(["lists", "numpy"]))
def test_loops_backend_matches_sdpa(case, family):
    check_matches_sdpa(case, "loops", family)


@pytest.mark.parametrize("n_q, n_k", [(3, 5), (5, 3), (4, 4)])
@pytest.mark.parametrize("backend", ["loops", "numpy", "torch", "sdpa"])
def test_causal_is_top_left_like_sdpa_is_causal(n_q, n_k, backend):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((n_q, 4)), rng.standard_normal((n_k, 4)), rng.standard_normal((n_k, 2))
    want = F.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=True).numpy()
    family = "torch" if backend in ("torch", "sdpa") else "numpy"
    out, pattern = attention(*to_family(family, q, k, v), causal=True, backend=backend)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-12, atol=1e-14)
    if pattern is not None:  # query i sees exactly keys 0..i
        np.testing.assert_array_equal(np.asarray(pattern) > 0, np.tri(n_q, n_k, dtype=bool))


@pytest.mark.parametrize("n_q, n_k", [(3, 5), (5, 3), (4, 4)])
@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # n_q > n_k: empty rows
def test_causal_mask_alignments(n_q, n_k):
    from torch.nn.attention.bias import causal_lower_right, causal_upper_left

    np.testing.assert_array_equal(causal_mask(n_q, n_k), causal_upper_left(n_q, n_k)._materialize().numpy())
    np.testing.assert_array_equal(causal_mask(n_q, n_k, align="bottom_right"),
                                  causal_lower_right(n_q, n_k)._materialize().numpy())


def test_torch_backend_gradients_match_sdpa():
    rng = np.random.default_rng(1)
    q, k, v = (torch.tensor(rng.standard_normal((2, 3, 5, 4)), requires_grad=True) for _ in range(3))
    mask = torch.as_tensor(rng.random((5, 5)) < 0.6)
    mask[1] = False  # an empty row: zero output, and its gradient must stay finite
    weight = torch.as_tensor(rng.standard_normal((2, 3, 5, 4)))
    allowed = mask & torch.ones(5, 5, dtype=torch.bool).tril()
    ours = attention(q, k, v, mask, causal=True, backend="torch", empty_rows="zero")[0]
    grads = torch.autograd.grad((ours * weight).sum(), (q, k, v))
    rows = allowed.any(-1)  # anchor: SDPA on the non-empty rows only
    anchor = F.scaled_dot_product_attention(q[..., rows, :], k, v, attn_mask=allowed[rows])
    want = torch.autograd.grad((anchor * weight[..., rows, :]).sum(), (q, k, v))
    for got, expected in zip(grads, want):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
    assert torch.count_nonzero(grads[0][..., 1, :]) == 0  # the empty query row does not matter


def test_flash_is_differentiable():
    rng = np.random.default_rng(2)
    q, k, v = (torch.tensor(rng.standard_normal((2, 9, 4)), requires_grad=True) for _ in range(3))
    got = torch.autograd.grad(flash_attention(q, k, v, causal=True, block_size=4).sum(), (q, k, v))
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), (q, k, v))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------
# Families and dtypes
# ---------------------------------------------------------------------------

def test_results_keep_the_family_and_the_documented_dtype():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 4))
    out, pattern = attention(q.tolist(), q.tolist(), q.tolist(), backend="loops")
    assert isinstance(out, list) and isinstance(pattern[0][0][0], float)
    out, pattern = attention(q, q, q, backend="loops")
    assert out.dtype == pattern.dtype == np.float64
    for dtype, want in [(np.float32, np.float32), (np.float64, np.float64), (np.float16, np.float32),
                        (np.int64, np.float64)]:
        x = (q * 3).astype(dtype)
        out, pattern = attention(x, x, x)
        assert out.dtype == pattern.dtype == want, dtype
    t = torch.tensor(q, dtype=torch.bfloat16)
    out, pattern = attention(t, t, t, backend="torch")
    assert out.dtype == pattern.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), F.scaled_dot_product_attention(*(t.double(),) * 3),
                               rtol=2e-2, atol=2e-2)


def test_huge_logits_give_exact_weights_not_nan():
    e = math.exp(-1.0)
    want = np.array([1 / (1 + e), e / (1 + e), 0.0])
    logits = [1e4, 1e4 - 1, -1e4]
    np.testing.assert_allclose(softmax(np.array(logits)), want, rtol=1e-12, atol=0)
    np.testing.assert_allclose(softmax(torch.tensor(logits, dtype=torch.float64)).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(softmax(logits), want, rtol=1e-12)
    np.testing.assert_allclose(softmax(np.array(logits, dtype=np.float32)), want, rtol=1e-6)
    # attention with scores of about 1e4: still finite and equal to SDPA
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((3, 2, 4)) * 100, rng.standard_normal((3, 5, 4)) * 100, rng.standard_normal((3, 5, 2))
    for backend, family in [("numpy", "numpy"), ("torch", "torch"), ("loops", "lists")]:
        out, pattern = attention(*to_family(family, q, k, v), backend=backend)
        out = np.asarray(out)
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out, sdpa_anchor(q, k, v, None, False)[0], rtol=1e-9, atol=1e-9)


def test_softmax_axis_and_minus_inf():
    x = np.array([[0.0, -np.inf, 1.0], [2.0, 2.0, -np.inf]])
    np.testing.assert_allclose(softmax(x, axis=0), softmax(x.T).T)
    got = softmax(x)
    assert got[0, 1] == 0.0 and got[1, 2] == 0.0
    np.testing.assert_allclose(got.sum(-1), 1.0)
    np.testing.assert_allclose(softmax(torch.tensor(x)).numpy(), got)
    np.testing.assert_allclose(softmax(np.array([0, 1])), [1 / (1 + math.e), math.e / (1 + math.e)])
    assert softmax(np.array([0, 1])).dtype == np.float64  # integers give float64
    assert softmax(np.zeros((2, 0))).shape == (2, 0)


# ---------------------------------------------------------------------------
# Empty rows and empty sequences
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["loops", "numpy", "torch", "sdpa"])
def test_fully_masked_row_raises_by_default_and_is_zero_on_request(backend):
    mask = np.ones((2, 3, 4), dtype=bool)
    mask[1, 2] = False  # batch element 1, query row 2 sees nothing
    q, k, v = np.ones((2, 3, 5)), np.ones((2, 4, 5)), np.arange(40.0).reshape(2, 4, 5)
    family = "torch" if backend in ("torch", "sdpa") else "numpy"
    args = to_family(family, q, k, v, mask)
    with pytest.raises(ValueError, match=r"query row 2 of batch element \(1,\) has no key.*the mask excludes all 4"):
        attention(*args, backend=backend)
    out, pattern = attention(*args, backend=backend, empty_rows="zero")
    out = np.asarray(out)
    assert np.all(out[1, 2] == 0) and np.isfinite(out).all()
    np.testing.assert_allclose(out[0], np.broadcast_to(np.arange(20.0).reshape(4, 5).mean(0), (3, 5)))
    if pattern is not None:
        assert np.all(np.asarray(pattern)[1, 2] == 0)


def test_mask_and_causal_together_can_empty_a_row():
    mask = np.array([[False, True, True]] * 3)
    with pytest.raises(ValueError, match=r"query row 0 has no key.*the mask and causal=True exclude all 3"):
        attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)), mask, causal=True)


@pytest.mark.parametrize("family", ["numpy", "torch"])
def test_empty_sequences(family):
    backend = family
    q, k, v = to_family(family, np.ones((2, 0, 3)), np.ones((2, 4, 3)), np.ones((2, 4, 5)))
    out, pattern = attention(q, k, v, backend=backend)
    assert tuple(out.shape) == (2, 0, 5) and tuple(pattern.shape) == (2, 0, 4)
    assert tuple(flash_attention(q, k, v).shape) == (2, 0, 5)
    q, k, v = to_family(family, np.ones((2, 3, 3)), np.ones((2, 0, 3)), np.ones((2, 0, 5)))
    with pytest.raises(ValueError, match=r"no keys \(n_k = 0\)"):
        attention(q, k, v, backend=backend)
    with pytest.raises(ValueError, match=r"no keys \(n_k = 0\)"):
        flash_attention(q, k, v)
    out, pattern = attention(q, k, v, backend=backend, empty_rows="zero")
    assert tuple(out.shape) == (2, 3, 5) and np.all(np.asarray(out) == 0)
    assert tuple(pattern.shape) == (2, 3, 0)


# ---------------------------------------------------------------------------
# Every bad input gets its documented error
# ---------------------------------------------------------------------------

X = np.ones((2, 3, 4))
T = torch.ones(2, 3, 4)
BAD_INPUTS = [
    (lambda: attention(X, np.ones((2, 3, 5)), X), ValueError, r"same last dimension d.*\(2, 3, 4\).*\(2, 3, 5\)"),
    (lambda: attention(X, X, np.ones((2, 4, 4))), ValueError, r"same length n_k.*\(2, 3, 4\).*\(2, 4, 4\)"),
    (lambda: attention(X, X, X, np.ones((3, 2), dtype=bool)), ValueError, r"mask of shape \(3, 2\) does not broadcast.*\(2, 3, 3\)"),
    (lambda: attention(X, X, X, np.ones((5, 3, 3), dtype=bool)), ValueError, r"mask of shape \(5, 3, 3\)"),
    (lambda: attention(X, X, X, np.ones((3, 3))), TypeError, r"mask must be boolean"),
    (lambda: attention(T, T, T, torch.ones(3, 3), backend="torch"), TypeError, r"mask must be boolean"),
    (lambda: attention(np.ones((3, 2, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 4))), ValueError, r"batch dimensions.*do not broadcast"),
    (lambda: attention(np.ones(4), X, X), ValueError, r"q must have shape \(\.\.\., n, d\)"),
    (lambda: attention(np.ones((2, 3, 0)), np.ones((2, 3, 0)), X), ValueError, r"d must be at least 1"),
    (lambda: attention(np.where(np.eye(3, 4) > 0, np.nan, 1.0), np.ones((3, 4)), np.ones((3, 4))), ValueError,
     r"q contains 3 non-finite value\(s\).*first at index \(0, 0\)"),
    (lambda: attention(X, X, np.full((2, 3, 4), np.inf)), ValueError, r"v contains 24 non-finite"),
    (lambda: attention(T, T, T.clone().index_put_((torch.tensor([1]),), torch.tensor(np.nan)), backend="torch"),
     ValueError, r"v contains .* non-finite value.*\(1, 0, 0\)"),
    (lambda: attention([[1.0, math.nan]], [[1.0, 1.0]], [[1.0]], backend="loops"), ValueError, r"q contains 1 non-finite.*\(0, 1\)"),
    (lambda: attention(X, T, X), TypeError, r"mix array types.*k is torch tensors"),
    (lambda: attention(T, T, T, np.ones((3, 3), dtype=bool), backend="torch"), TypeError, r"mix array types.*mask is numpy"),
    (lambda: attention(T, T, T), TypeError, r"backend='numpy' takes numpy arrays.*use backend='torch'"),
    (lambda: attention(X, X, X, backend="torch"), TypeError, r"backend='torch' takes torch tensors"),
    (lambda: attention(X.tolist(), X.tolist(), X.tolist()), TypeError, r"use backend='loops'"),
    (lambda: attention(X, X, X, backend="cuda"), ValueError, r"unknown backend 'cuda'"),
    (lambda: attention(X, X, X, empty_rows="nan"), ValueError, r"empty_rows must be one of"),
    (lambda: attention(T, T, T, backend="sdpa", need_pattern=True), ValueError, r"no attention pattern.*reference backend"),
    (lambda: attention(T, T.double(), T, backend="torch"), TypeError, r"k has dtype torch.float64 but q has torch.float32"),
    (lambda: attention(T.long(), T.long(), T.long(), backend="torch"), TypeError, r"floating-point tensor"),
    (lambda: attention(X.astype(bool), X, X), TypeError, r"q must hold real numbers"),
    (lambda: attention([[1.0, 2.0], [3.0]], [[1.0]], [[1.0]], backend="loops"), ValueError, r"ragged"),
    (lambda: attention(*(np.ones((1, 200, 200, 60)),) * 3, backend="loops"), ValueError,
     rf"LOOPS_MAX_WORK = {LOOPS_MAX_WORK:,}; use backend='numpy'"),
    (lambda: attention(X, X, X, causal=1), TypeError, r"causal must be True or False"),
    (lambda: softmax(np.array([[0.0, -np.inf], [-np.inf, -np.inf]])), ValueError, r"slice \(1,\).*all -inf"),
    (lambda: softmax(torch.tensor([1.0, np.nan])), ValueError, r"NaN or \+inf"),
    (lambda: softmax([-math.inf, -math.inf]), ValueError, r"all -inf"),
    (lambda: split_heads(np.ones((2, 3, 10)), 3), ValueError, r"d_model = 10 is not divisible by n_heads = 3"),
    (lambda: split_heads(np.ones((3, 10)), 2), ValueError, r"\(batch, seq, d_model\); got shape \(3, 10\)"),
    (lambda: merge_heads(np.ones((3, 10, 2))), ValueError, r"\(batch, n_heads, seq, d_head\)"),
    (lambda: multi_head_attention(X, *(np.eye(4),) * 4, n_heads=3), ValueError, r"d_model = 4 is not divisible by n_heads = 3"),
    (lambda: multi_head_attention(X, *(np.eye(4),) * 4, n_heads=0), ValueError, r"n_heads must be a positive integer"),
    (lambda: multi_head_attention(X, np.eye(4), np.eye(4), np.ones((4, 3)), np.eye(4), 2), ValueError, r"w_v must have shape \(4, 4\).*\(4, 3\)"),
    (lambda: multi_head_attention(X, *(np.eye(4),) * 4, 2, b_o=np.ones(3)), ValueError, r"b_o must have shape \(4,\)"),
    (lambda: multi_head_attention(X, *(np.eye(4),) * 3, np.full((4, 4), np.nan), 2), ValueError, r"w_o contains 16 non-finite"),
    (lambda: multi_head_attention(X, *(torch.eye(4),) * 4, 2), TypeError, r"mix array types"),
    (lambda: flash_attention(X, X, X, block_size=0), ValueError, r"block_size must be a positive integer"),
    (lambda: flash_attention(X.tolist(), X.tolist(), X.tolist()), TypeError, r"backend='loops'"),
    (lambda: flash_attention(X, X, np.ones((2, 5, 4))), ValueError, r"same length n_k"),
    (lambda: peak_memory(lambda: None, method="rss"), ValueError, r"method must be"),
]


@pytest.mark.parametrize("call, error, message", BAD_INPUTS, ids=[m[:40] for _, _, m in BAD_INPUTS])
def test_bad_input_raises_the_documented_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------------------
# Multi-head attention against nn.MultiheadAttention
# ---------------------------------------------------------------------------

@st.composite
def mha_cases(draw, max_seq=5):
    batch, seq = draw(st.integers(1, 2)), draw(st.integers(1, max_seq))
    n_heads, d_head = draw(st.sampled_from([1, 2, 4])), draw(st.integers(1, 3))
    mask_kind = draw(st.sampled_from(["none", "attn_mask", "per_head", "key_padding"]))
    return batch, seq, n_heads, d_head, draw(st.booleans()), mask_kind, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def check_mha_matches_torch(case, backend, family):
    batch, seq, n_heads, d_model_per_head, bias, mask_kind, causal, seed = case
    d_model = n_heads * d_model_per_head
    torch.manual_seed(seed % 2**31)
    rng = np.random.default_rng(seed)
    mha = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=torch.float64)
    if bias:  # torch initialises biases to 0: make them matter
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    x = torch.as_tensor(rng.standard_normal((batch, seq, d_model)))

    # Our mask: True = may attend. Torch's boolean masks: True = may NOT attend.
    allowed = rng.random((batch, n_heads, seq, seq)) < 0.6
    allowed |= np.eye(seq, dtype=bool)  # every row keeps one key (torch gives NaN rows otherwise)
    torch_kwargs, ours = {}, None
    if mask_kind == "attn_mask":  # (seq, seq), shared by batch and heads
        ours = allowed[0, 0]
        torch_kwargs["attn_mask"] = torch.as_tensor(~ours)
    elif mask_kind == "per_head":  # torch wants (batch * n_heads, seq, seq)
        ours = allowed
        torch_kwargs["attn_mask"] = torch.as_tensor(~allowed).reshape(batch * n_heads, seq, seq)
    elif mask_kind == "key_padding":  # (batch, seq), True = padding; key 0 is never padding
        padding = rng.random((batch, seq)) < 0.4
        padding[:, 0] = False
        ours = ~padding[:, None, None, :]  # (batch, 1, 1, k_pos)
        torch_kwargs["key_padding_mask"] = torch.as_tensor(padding)
    if causal:  # torch's own causal mask: -inf above the diagonal
        causal_float = torch.nn.Transformer.generate_square_subsequent_mask(seq, dtype=torch.float64)
        given_mask = torch_kwargs.get("attn_mask")
        torch_kwargs["attn_mask"] = causal_float if given_mask is None else causal_float.masked_fill(given_mask, -math.inf)
        if "key_padding_mask" in torch_kwargs:  # torch wants both masks of one type
            padding = torch_kwargs["key_padding_mask"]
            torch_kwargs["key_padding_mask"] = torch.zeros(padding.shape, dtype=torch.float64).masked_fill(padding, -math.inf)
    want_out, want_patterns = mha(x, x, x, need_weights=True, average_attn_weights=False, **torch_kwargs)

    w_q, w_k, w_v = mha.in_proj_weight.detach().chunk(3)
    weights = [w_q, w_k, w_v, mha.out_proj.weight.detach()]
    biases = [None] * 4
    if bias:
        biases = [*mha.in_proj_bias.detach().chunk(3), mha.out_proj.bias.detach()]
    as_family = {"torch": lambda a: a, "numpy": lambda a: a.numpy(), "lists": lambda a: a.numpy().tolist()}[family]
    conv = lambda a: None if a is None else as_family(a)  # noqa: E731
    mask_arg = None if ours is None else conv(torch.as_tensor(ours))
    out, patterns = multi_head_attention(conv(x), *map(conv, weights), n_heads, *map(conv, biases),
                                         mask=mask_arg, causal=causal, backend=backend)
    to_np = (lambda a: a.detach().numpy()) if family == "torch" else np.asarray
    np.testing.assert_allclose(to_np(out), want_out.detach().numpy(), rtol=1e-9, atol=1e-11)
    if backend == "sdpa":
        assert patterns is None
    else:
        np.testing.assert_allclose(to_np(patterns), want_patterns.detach().numpy(), rtol=1e-9, atol=1e-11)


@settings(max_examples=30, **HYPOTHESIS)
@given(mha_cases(), st.sampled_from([("numpy", "numpy"), ("torch", "torch"), ("sdpa", "torch")]))
def test_multi_head_attention_matches_torch(case, backend_family):
    check_mha_matches_torch(case, *backend_family)


@settings(max_examples=10, **HYPOTHESIS)
@given(mha_cases(max_seq=4), st.sampled_from(["lists", "numpy"]))
def test_multi_head_attention_loops_matches_torch(case, family):
    check_mha_matches_torch(case, "loops", family)


@pytest.mark.parametrize("family", ["numpy", "torch", "lists"])
def test_split_heads_gives_each_head_its_columns_and_merge_inverts_it(family):
    x = np.arange(2 * 3 * 6.0).reshape(2, 3, 6)
    arg = to_family(family, x)[0]
    split = split_heads(arg, 3)
    split_np = np.asarray(split)
    assert split_np.shape == (2, 3, 3, 2)
    for h in range(3):  # head h owns columns 2h, 2h+1 at every position
        np.testing.assert_array_equal(split_np[:, h], x[:, :, 2 * h:2 * h + 2])
    merged = merge_heads(split)
    assert type(merged) is type(arg)
    np.testing.assert_array_equal(np.asarray(merged), x)


# ---------------------------------------------------------------------------
# The tiled kernel
# ---------------------------------------------------------------------------

@settings(max_examples=40, **HYPOTHESIS)
@given(attention_cases(max_n=20), st.integers(1, 8), st.sampled_from(["numpy", "torch"]))
def test_flash_matches_reference(case, block_size, family):
    q, k, v, _, causal = case
    want = sdpa_anchor(q, k, v, None, causal)[0]
    got = flash_attention(*to_family(family, q, k, v), causal=causal, block_size=block_size)
    assert isinstance(got, np.ndarray if family == "numpy" else torch.Tensor)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q, n_k", [(100, 100), (70, 130), (130, 70)])
def test_flash_default_blocks_with_ragged_last_block(causal, n_q, n_k):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, n, 16)).astype(np.float32) for n in (n_q, n_k, n_k))
    want = attention(q, k, v, causal=causal)[0]
    np.testing.assert_allclose(flash_attention(q, k, v, causal=causal), want, rtol=1e-5, atol=1e-6)
    got = flash_attention(*map(torch.from_numpy, (q, k, v)), causal=causal)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def _growth(fn, make, sizes):
    """Peak bytes of fn at each size, and the ratio between the last two."""
    peaks = [peak_memory(fn, *make(n)) for n in sizes]
    return peaks, peaks[-1] / peaks[-2]


def test_reference_memory_grows_as_n_squared_and_flash_as_n_numpy():
    make = lambda n: [np.ones((1, 2, n, 16), np.float32)] * 3  # noqa: E731
    ref, ref_growth = _growth(lambda q, k, v: attention(q, k, v), make, [512, 1024])
    tiled, tiled_growth = _growth(lambda q, k, v: flash_attention(q, k, v), make, [512, 1024])
    assert 3.5 < ref_growth < 4.5, ref  # the (2, 1024, 1024) float32 pattern dominates: 8 MiB
    assert 1.5 < tiled_growth < 2.5, tiled
    assert ref[-1] >= 2 * 1024 * 1024 * 4 and tiled[-1] < ref[-1] / 8


def test_torch_cpu_peak_memory_counts_tensor_bytes():
    assert peak_memory(lambda: torch.empty(1000, 1000), method="torch_cpu") == 4_000_000

    def make_and_drop():  # 8 MB held at once, then 4 MB: the peak is 8 MB
        a = torch.empty(1_000_000)
        b = torch.empty(1_000_000)
        del a, b
        return torch.empty(1_000_000)

    assert peak_memory(make_and_drop, method="torch_cpu") == 8_000_000
    make = lambda n: [torch.ones(1, 2, n, 32)] * 3  # noqa: E731
    ref, ref_growth = _growth(lambda q, k, v: attention(q, k, v, backend="torch"), make, [512, 1024])
    tiled, tiled_growth = _growth(lambda q, k, v: flash_attention(q, k, v, block_size=32), make, [512, 1024])
    assert 3.5 < ref_growth < 4.5 and 1.5 < tiled_growth < 2.5, (ref, tiled)


# ---------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------

@pytest.mark.gpu
@requires_cuda
# float32: SDPA's fused CUDA kernels may use TF32 tensor cores (~1e-3 relative); logic errors are ~1e-1.
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 3e-3), (torch.float16, 2e-2)])
def test_cuda_torch_backend_and_flash_match_sdpa(dtype, tol):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 32, device="cuda", dtype=dtype, generator=gen) for n in (70, 90, 90))
    mask = torch.rand(2, 1, 70, 90, device="cuda", generator=gen) < 0.7
    mask[..., 0] = True  # no empty rows
    for causal in (False, True):
        allowed = mask & torch.ones(70, 90, dtype=torch.bool, device="cuda").tril() if causal else mask
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        out, pattern = attention(q, k, v, mask, causal=causal, backend="torch")
        assert out.device.type == "cuda" and pattern.device.type == "cuda" and out.dtype == dtype
        torch.testing.assert_close(out, want, rtol=tol, atol=tol)
        eye = torch.eye(90, device="cuda", dtype=dtype)
        torch.testing.assert_close(pattern, F.scaled_dot_product_attention(q, k, eye, attn_mask=allowed),
                                   rtol=tol, atol=tol)
        sdpa_out, none = attention(q, k, v, mask, causal=causal, backend="sdpa")
        assert none is None
        torch.testing.assert_close(sdpa_out, want, rtol=tol, atol=tol)
        flash = flash_attention(q, k, v, causal=causal, block_size=32)
        want_flash = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert flash.device.type == "cuda" and flash.dtype == dtype
        torch.testing.assert_close(flash, want_flash, rtol=tol, atol=tol)


@pytest.mark.gpu
@requires_cuda
def test_cuda_gradients_and_device_errors():
    q, k, v = (torch.randn(2, 3, 16, 8, device="cuda", dtype=torch.float64, requires_grad=True) for _ in range(3))
    got = torch.autograd.grad(attention(q, k, v, causal=True, backend="torch")[0].sum(), (q, k, v))
    want = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), (q, k, v))
    for a, b in zip(got, want):
        assert a.device.type == "cuda"
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match=r"k is on cpu but q is on cuda"):
        attention(q, k.detach().cpu(), v, backend="torch")
    with pytest.raises(ValueError, match=r"mask is on cpu but q is on cuda"):
        attention(q, k, v, torch.ones(16, 16, dtype=torch.bool), backend="torch")


@pytest.mark.gpu
@requires_cuda
def test_cuda_peak_memory_reference_quadratic_flash_linear():
    make = lambda n: [torch.randn(1, 8, n, 64, device="cuda")] * 3  # noqa: E731
    ref, ref_growth = _growth(lambda q, k, v: attention(q, k, v, backend="torch"), make, [1024, 2048])
    tiled, tiled_growth = _growth(lambda q, k, v: flash_attention(q, k, v), make, [1024, 2048])
    assert ref_growth > 3.0 and tiled_growth < 2.5 and tiled[-1] < ref[-1] / 8, (ref, tiled)


@pytest.mark.parametrize("backend", ["numpy", "torch", "sdpa", "flash", "fused"])
def test_scores_beyond_float32_give_the_exact_pattern_not_nan(backend):
    """``attention(q * 1e30, k * 1e30, v)``: finite inputs whose scores (1e60) overflow float32.
    Each query matches only its own key, so the pattern is the identity and ``out == v``."""
    from deviating.kernels import flash_attention
    from headlab.kernels import fused_attention

    eye = np.eye(3, dtype=np.float32)[None] * 1e30  # (1, 3, 3): query i == key i
    v = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    if backend == "numpy":
        out, pattern = attention(eye, eye, v)
        np.testing.assert_array_equal(pattern, np.eye(3, dtype=np.float32)[None])
    elif backend in ("torch", "sdpa"):
        out, _ = attention(torch.from_numpy(eye), torch.from_numpy(eye), torch.from_numpy(v), backend=backend)
    elif backend == "flash":
        out = flash_attention(torch.from_numpy(eye), torch.from_numpy(eye), torch.from_numpy(v), block_size=2)
    else:
        q = torch.from_numpy(eye)[None]  # (1, 1, 3, 3)
        out = fused_attention(q, q, torch.from_numpy(v)[None], backend="tiled", block_size=2)[0][0]
    np.testing.assert_array_equal(np.asarray(out), v)
