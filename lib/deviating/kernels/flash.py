"""Tiled attention with an online softmax: the idea behind FlashAttention.

Only one ``block_size x block_size`` tile of scores exists at a time. Per query row keep the
largest score ``m``, ``l = sum_j exp(s_j - m)`` and ``acc = sum_j exp(s_j - m) v_j``; a tile
that raises the maximum to ``m'`` rescales them by ``exp(m - m')``. ``out = acc / l``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from headlab.kernels.checks import (
    check_finite,
    check_numeric,
    check_qkv_shapes,
    check_same_dtype_device,
    common_family,
)
from deviating.kernels.reference import attention, overflow_safe

Array = Any  # np.ndarray | torch.Tensor


def flash_attention(q: Array, k: Array, v: Array, *, causal: bool = False, block_size: int = 64) -> Array:
    """Scaled dot-product attention, tiled, without the ``n_q x n_k`` matrix; returns ``out`` only.

    Same inputs and result as ``attention(q, k, v, causal=causal)[0]`` (up to
    float rounding): q ``(..., n_q, d)``, k ``(..., n_k, d)``, v ``(..., n_k, d_v)``
    as numpy arrays or torch tensors (any device, differentiable), ``out`` of
    shape ``(..., n_q, d_v)`` in the same family and dtype rules as the numpy and
    torch backends of :func:`attention`.

    It returns **no pattern**: the pattern is never held in memory, which is
    the point. Anything that reads patterns must use :func:`attention`.
    ``causal`` is SDPA's top-left alignment (key j <= query i); there is no
    ``mask`` argument. ``n_k == 0`` (no key for any query) raises ``ValueError``.
    """
    family = common_family(q=q, k=k, v=v)
    if family == "lists":
        raise TypeError("flash_attention takes numpy arrays or torch tensors; "
                        "for nested lists use attention(..., backend='loops')")
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        check_numeric(x, family, name)
    if family == "torch":
        check_same_dtype_device({"q": q, "k": k, "v": v})
    batch, n_q, n_k, _, _ = check_qkv_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape))
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer; got {block_size!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False; got {causal!r}")
    check_finite({"q": q, "k": k, "v": v}, family)
    if n_k == 0 and n_q > 0 and 0 not in batch:
        raise ValueError("flash_attention: there are no keys (n_k = 0), so no query has anything to "
                         "attend to; attention(..., empty_rows='zero') gives zero rows instead")
    if n_q == 0 or n_k == 0:  # nothing to compute: the reference returns the empty result
        return attention(q, k, v, backend=family)[0]

    def kernel(q, k, v, allowed, has_key):
        if family == "numpy":
            dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
            return online_softmax_loop(*(x.astype(dtype, copy=False) for x in (q, k, v)), causal, block_size, np), None
        if q.dtype in (torch.float16, torch.bfloat16):  # accumulate in float32
            return online_softmax_loop(q.float(), k.float(), v.float(), causal, block_size, torch).to(q.dtype), None
        return online_softmax_loop(q, k, v, causal, block_size, torch), None

    # scores beyond the float range (q * 1e30 in float32) are recomputed in float64
    return overflow_safe(kernel, (q, k, v), None, None)[0]


def online_softmax_loop(q: Array, k: Array, v: Array, causal: bool,
                        block_size: int, xp: Any) -> Array:
    """The online-softmax loop over tiles of queries and keys (chapter 2).

    ``xp`` is ``numpy`` or ``torch``: the same spelling works for both."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    out_blocks = []
    for i0 in range(0, n_q, block_size):
        i1 = min(i0 + block_size, n_q)
        q_blk = q[..., i0:i1, :] * scale  # (..., bq, d)
        # (..., bq, 1), (..., bq, 1), (..., bq, d_v)
        row_max = row_sum = acc = None
        # causal: only keys j <= i < i1 matter
        stop = min(n_k, i1) if causal else n_k
        for j0 in range(0, stop, block_size):
            j1 = min(j0 + block_size, stop)
            # (..., bq, bk): one tile of scores
            s = q_blk @ k[..., j0:j1, :].swapaxes(-1, -2)
            if causal and j1 - 1 > i0:  # the tile crosses the diagonal
                s = xp.where(_tile_causal(i0, i1, j0, j1, s), s, -xp.inf)
            # Tile 0 holds key 0, which every causal row may see, so row_max
            # is finite from then on.
            tile_max = xp.amax(s, axis=-1, keepdims=True)
            new_max = (tile_max if row_max is None
                       else xp.maximum(row_max, tile_max))
            p = xp.exp(s - new_max)  # (..., bq, bk), relative to new_max
            p_v = p @ v[..., j0:j1, :]  # (..., bq, d_v)
            if acc is None:
                row_sum, acc = xp.sum(p, axis=-1, keepdims=True), p_v
            else:
                # the old sums were relative to the old max
                rescale = xp.exp(row_max - new_max)
                tile_sum = xp.sum(p, axis=-1, keepdims=True)
                row_sum = row_sum * rescale + tile_sum
                acc = acc * rescale + p_v
            row_max = new_max
        out_blocks.append(acc / row_sum)  # (..., bq, d_v)
    return xp.concatenate(out_blocks, axis=-2)  # (..., n_q, d_v)


def _tile_causal(i0: int, i1: int, j0: int, j1: int, like: Array) -> Array:
    """(bq, bk) bool: key j <= query i for queries i0..i1-1 and keys j0..j1-1."""
    if isinstance(like, torch.Tensor):
        rows = torch.arange(i0, i1, device=like.device)
        cols = torch.arange(j0, j1, device=like.device)
    else:
        rows, cols = np.arange(i0, i1), np.arange(j0, j1)
    return rows[:, None] >= cols[None, :]
