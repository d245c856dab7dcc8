"""Scaled dot-product attention with one signature for every backend.

For queries ``q (..., n_q, d)``, keys ``k (..., n_k, d)`` and values
``v (..., n_k, d_v)``::

    scores  = q @ k^T / sqrt(d)                      # (..., n_q, n_k)
    pattern = softmax(scores over the allowed keys)  # each row sums to 1
    out     = pattern @ v                            # (..., n_q, d_v)

``"loops"``, ``"numpy"`` and ``"torch"`` return the pattern; ``"sdpa"``
(:func:`torch.nn.functional.scaled_dot_product_attention`) returns ``None`` in its place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from headlab.kernels.checks import (
    EMPTY_ROWS_CHOICES,
    check_backend,
    check_choice,
    check_finite,
    check_mask_dtype,
    check_mask_shape,
    check_numeric,
    check_qkv_shapes,
    check_same_dtype_device,
    common_family,
    empty_row_error,
    first_empty_row,
    list_shape,
    scores_may_overflow,
)
from deviating.kernels.loops import attention_loops, softmax_row

Array = Any  # np.ndarray | torch.Tensor | nested lists


# ---------------------------------------------------------------------------
# Softmax and the causal mask
# ---------------------------------------------------------------------------

def softmax(x: Array, axis: int = -1) -> Array:
    """Numerically stable softmax along ``axis``: ``exp(x - max x) / sum exp(x - max x)``.

    Numpy arrays (in their float dtype, at least float32), torch tensors and nested lists
    (``axis=-1`` only). ``-inf`` gets weight 0; NaN, ``+inf`` or an all ``-inf`` slice
    raise ``ValueError``.
    """
    family = common_family(x=x)
    if family == "lists":
        if axis != -1:
            raise ValueError("softmax on nested lists supports axis=-1 only; use a numpy array for other axes")
        list_shape(x, "x")
        return _softmax_lists(x)
    check_numeric(x, family, "x")
    xp, values = (torch, x.detach()) if family == "torch" else (np, x)
    if bool((xp.isnan(values) | xp.isposinf(values)).any()):
        raise ValueError("softmax input contains NaN or +inf; no weights are defined for it")
    if values.ndim == 0:
        raise ValueError("softmax needs at least one dimension; got a 0-d array")
    if values.shape[axis] > 0:
        all_neg_inf = xp.all(xp.isneginf(values), axis=axis)
        if bool(all_neg_inf.any()):
            first = tuple(int(i) for i in xp.argwhere(all_neg_inf)[0])
            raise ValueError(f"softmax slice {first} (along axis {axis}) is all -inf: no weights are defined for it")
    if family == "torch":
        return torch.softmax(x, dim=axis)
    out = x.astype(np.result_type(x.dtype, np.float32), copy=True)
    if out.shape[axis] == 0:  # nothing to normalise
        return out
    return np.moveaxis(_softmax_last_axis_(np.moveaxis(out, axis, -1)), -1, axis)


def _softmax_lists(x: list) -> list:
    if x and isinstance(x[0], (list, tuple)):
        return [_softmax_lists(row) for row in x]
    if x and all(value == -np.inf for value in x):
        raise ValueError("softmax row is all -inf: no weights are defined for it")
    if any(value != value or value == np.inf for value in x):
        raise ValueError("softmax input contains NaN or +inf; no weights are defined for it")
    return softmax_row(list(x)) if x else []


def _softmax_last_axis_(x: np.ndarray) -> np.ndarray:
    """Stable softmax over the last axis, in place (no n_q x n_k temporaries)."""
    x -= x.max(axis=-1, keepdims=True)  # every exponent <= 0 now
    np.exp(x, out=x)
    total = x.sum(axis=-1, keepdims=True)
    x *= np.reciprocal(total, out=total)  # one division per row, then multiplications
    return x


def causal_mask(n_q: int, n_k: int, *, align: str = "top_left") -> np.ndarray:
    """Boolean ``(n_q, n_k)`` mask, True where query i may attend to key j.

    ``align="top_left"`` (``causal=True``, SDPA's ``is_causal``): ``j <= i``.
    ``align="bottom_right"`` (decoding with a cache, the queries being the last ``n_q``
    keys): ``j <= i + (n_k - n_q)``; pass it as ``mask=``.
    """
    check_choice(align, "align", ("top_left", "bottom_right"))
    for name, n in (("n_q", n_q), ("n_k", n_k)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise (ValueError if isinstance(n, (int, np.integer)) and not isinstance(n, bool) else TypeError)(
                f"{name} must be a non-negative int (a number of positions), got {n!r}")
    offset = 0 if align == "top_left" else n_k - n_q
    return np.tri(n_q, n_k, k=offset, dtype=bool)


# ---------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------

def attention(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | None = None,
    *,
    causal: bool = False,
    backend: str = "numpy",
    empty_rows: str = "raise",
    need_pattern: bool = False,
) -> tuple[Array, Array | None]:
    """Scaled dot-product attention; returns ``(out, pattern)``.

    Args:
        q, k, v: queries ``(..., n_q, d)``, keys ``(..., n_k, d)``, values
            ``(..., n_k, d_v)``. Leading (batch) dims broadcast like NumPy.
        mask: boolean, broadcastable to ``(..., n_q, n_k)``; True = query i may attend to
            key j (the opposite of ``nn.MultiheadAttention``'s ``attn_mask``).
        causal: also require ``j <= i`` (:func:`causal_mask`, top left; AND with ``mask``).
        backend: ``"loops"`` (pure Python, at most ``LOOPS_MAX_WORK`` = 2e6 multiply-adds),
            ``"numpy"`` (in the float dtype, at least float32), ``"torch"`` (any device;
            float16/bfloat16 computed in float32; differentiable), ``"sdpa"``
            (``pattern=None``). The result has the family of the inputs.
        empty_rows: a query row with no allowed key: ``"raise"`` a ``ValueError`` naming
            it, or ``"zero"`` (zero output and pattern rows, never NaN). ``n_k == 0`` makes
            every row empty.
        need_pattern: True makes the ``"sdpa"`` backend raise instead of returning ``None``.

    Returns:
        ``out (..., n_q, d_v)`` and ``pattern (..., n_q, n_k)`` (non-empty rows sum to 1;
        masked keys weigh exactly 0).
    """
    family = common_family(q=q, k=k, v=v, mask=mask)
    check_backend(backend, family)
    check_choice(empty_rows, "empty_rows", EMPTY_ROWS_CHOICES)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False; got {causal!r}")
    if backend == "sdpa" and need_pattern:
        raise ValueError(
            "backend='sdpa' computes no attention pattern (scaled_dot_product_attention returns "
            "none); to read patterns use a reference backend: backend='torch' (or 'numpy', 'loops')"
        )
    if family == "numpy":
        for x, name in ((q, "q"), (k, "k"), (v, "v")):
            check_numeric(x, family, name)
        if mask is not None:
            check_mask_dtype(mask, family)
    if backend == "loops":
        return attention_loops(q, k, v, mask, causal, empty_rows)

    batch, n_q, n_k, d, d_v = check_qkv_shapes(q.shape, k.shape, v.shape)
    if family == "torch":
        for x, name in ((q, "q"), (k, "k"), (v, "v")):
            check_numeric(x, family, name)
        check_same_dtype_device({"q": q, "k": k, "v": v})
        if mask is not None:
            check_mask_dtype(mask, family, q.device)
    if mask is not None:
        check_mask_shape(tuple(mask.shape), batch + (n_q, n_k))
    check_finite({"q": q, "k": k, "v": v}, family)

    # One batch shape for all three (views, no copies): the pattern then has the full
    # (*batch, n_q, n_k) shape, and SDPA, which cannot broadcast a mask beyond the batch
    # of q @ k^T, gets what it needs.
    if family == "numpy":
        q, k, v = (np.broadcast_to(x, batch + x.shape[-2:]) for x in (q, k, v))
    else:
        q, k, v = (x.expand(batch + tuple(x.shape[-2:])) for x in (q, k, v))
    if n_q == 0 or n_k == 0:
        return _attention_empty(q, k, v, batch, n_q, n_k, d_v, family, backend, empty_rows)

    allowed = _allowed(mask, causal, n_q, n_k, family, q)
    has_key = None  # (..., n_q) bool, only when some row may attend to no key
    if allowed is not None:
        has_key = allowed.any(-1)
        if bool(has_key.all()):
            has_key = None
        elif empty_rows == "raise":
            np_has_key = has_key.cpu().numpy() if family == "torch" else has_key
            raise empty_row_error(first_empty_row(np_has_key, batch + (n_q,)), n_k, mask is not None, causal)
        else:  # let empty rows see every key (keeps the softmax finite), zero them after
            allowed = allowed | ~has_key[..., None]

    if backend == "numpy":
        kernel = _attention_numpy
    elif backend == "torch":
        kernel = _attention_torch
    else:
        def kernel(q, k, v, allowed, has_key):
            return _attention_sdpa(q, k, v, allowed, has_key, causal and mask is None)
    return overflow_safe(kernel, (q, k, v), allowed, has_key)


def overflow_safe(kernel, qkv: tuple, allowed, has_key):
    """``kernel(q, k, v, allowed, has_key)``, in float64 (cast back) when the scores may overflow
    the dtype; a ``ValueError`` when even float64 overflows or the result does not fit."""
    q, k, v = qkv
    if not scores_may_overflow(q, k):
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow here is handled below
            out, pattern = kernel(*qkv, allowed, has_key)
        if _all_finite(out):
            return out, pattern
    dtype = q.dtype
    wide = tuple(x.astype(np.float64) if isinstance(x, np.ndarray) else x.double() for x in qkv)
    out, pattern = kernel(*wide, allowed, has_key)
    if _all_finite(out):
        out = out.astype(dtype) if isinstance(out, np.ndarray) and dtype.kind == "f" else out
        out = out.to(dtype) if isinstance(out, torch.Tensor) else out
        if pattern is not None:
            pattern = (pattern.astype(dtype) if isinstance(pattern, np.ndarray) and dtype.kind == "f"
                       else pattern.to(dtype) if isinstance(pattern, torch.Tensor) else pattern)
        if _all_finite(out):
            return out, pattern
    largest = max(float(abs(x).max()) for x in (q, k))
    raise ValueError(
        f"attention overflows: the scores q . k / sqrt(d) of these inputs (|q| or |k| up to {largest:.3g}) "
        f"exceed the largest {dtype} even when computed in float64, so no softmax is defined; scale q and k down")


def _all_finite(x) -> bool:
    return bool(np.isfinite(x).all()) if isinstance(x, np.ndarray) else bool(torch.isfinite(x).all())


def _allowed(mask: Array | None, causal: bool, n_q: int, n_k: int, family: str, like: Array) -> Array | None:
    """The mask AND the causal mask, broadcast together; None when every key is allowed."""
    if not causal:
        return mask
    tri = causal_mask(n_q, n_k)
    if family == "torch":
        tri = torch.from_numpy(tri).to(like.device)
    return tri if mask is None else mask & tri


def _attention_empty(q, k, v, batch, n_q, n_k, d_v, family, backend, empty_rows):
    """n_q == 0 (empty result) or n_k == 0 (every row is empty: zero rows or an error)."""
    if n_k == 0 and n_q > 0 and 0 not in batch and empty_rows == "raise":
        raise empty_row_error((0,) * len(batch) + (0,), 0, False, False)
    if family == "torch":  # built from q and k so that autograd sees a graph
        pattern = q @ k.transpose(-2, -1)  # (..., n_q, n_k), no entries
        out = pattern @ v  # (..., n_q, d_v): zeros when n_k == 0
        return out, (None if backend == "sdpa" else pattern)
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    return np.zeros(batch + (n_q, d_v), dtype), np.zeros(batch + (n_q, n_k), dtype)


def _attention_numpy(q, k, v, allowed, has_key):
    """Vectorised reference: float32 matmuls stay float32, the softmax runs in place."""
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    q, k, v = (x.astype(dtype, copy=False) for x in (q, k, v))
    scale = dtype.type(q.shape[-1] ** -0.5)
    scores = np.matmul(q * scale, k.swapaxes(-1, -2))  # (..., n_q, n_k); scaling q is cheaper
    if allowed is not None:
        np.copyto(scores, -np.inf, where=~allowed)  # excluded keys: weight exp(-inf) = 0
    pattern = _softmax_last_axis_(scores)  # (..., n_q, n_k), in place
    if has_key is not None:
        pattern *= has_key[..., None]  # empty rows -> zero pattern -> zero output
    return np.matmul(pattern, v), pattern  # (..., n_q, d_v)


def _attention_torch(q, k, v, allowed, has_key):
    """Torch reference on q's device; differentiable."""
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):  # compute the softmax in float32
        q, k, v = q.float(), k.float(), v.float()
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (..., n_q, n_k)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    pattern = torch.softmax(scores, dim=-1)  # subtracts the row max internally
    if has_key is not None:
        pattern = pattern * has_key[..., None]  # empty rows -> zero pattern -> zero output
    out = pattern @ v  # (..., n_q, d_v)
    return out.to(dtype), pattern.to(dtype)


def _attention_sdpa(q, k, v, allowed, has_key, is_causal):
    """The fast path: SDPA picks a fused kernel (flash, memory-efficient or math)."""
    if is_causal:  # only causal: let SDPA use its own causal kernels
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    if has_key is not None:
        out = out * has_key[..., None].to(out.dtype)
    return out, None
