"""Multi-head attention as four visible steps: project, split, attend, merge and project.

Weights follow ``nn.Linear``, ``y = x @ w.T + b``: ``nn.MultiheadAttention``'s
``in_proj_weight`` is ``[w_q; w_k; w_v]`` and ``out_proj`` is ``(w_o, b_o)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.nn.functional as F

from headlab.kernels.checks import (
    check_backend,
    check_finite,
    check_numeric,
    check_same_dtype_device,
    common_family,
    shape_of,
)
from deviating.kernels.loops import check_loops_size, linear_lists, merge_heads_lists, split_heads_lists
from deviating.kernels.reference import attention

Array = Any


def _check_n_heads(d_model: int, n_heads: Any) -> int:
    if isinstance(n_heads, bool) or not isinstance(n_heads, (int, np.integer)) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive integer; got {n_heads!r}")
    if d_model % n_heads:
        raise ValueError(
            f"d_model = {d_model} is not divisible by n_heads = {n_heads}: each head gets "
            f"d_head = d_model / n_heads columns, which must be a whole number"
        )
    return d_model // n_heads


def split_heads(x: Array, n_heads: int) -> Array:
    """``(batch, seq, d_model) -> (batch, n_heads, seq, d_head)``, ``d_head = d_model / n_heads``.

    ``split_heads(x, H)[b, h, s] == x[b, s, h * d_head:(h + 1) * d_head]``; tensors, arrays
    or nested lists. :func:`~deviating.kernels.merge_heads` inverts it.
    """
    family = common_family(x=x)
    shape = shape_of(x, family, "x")
    if len(shape) != 3:
        raise ValueError(f"split_heads expects x of shape (batch, seq, d_model); got shape {shape}")
    batch, seq, d_model = shape
    d_head = _check_n_heads(d_model, n_heads)
    if family == "lists":
        return split_heads_lists(x, n_heads)
    return x.reshape(batch, seq, n_heads, d_head).swapaxes(1, 2)  # (batch, head, seq, d_head)


def merge_heads(x: Array) -> Array:
    """``(batch, n_heads, seq, d_head) -> (batch, seq, n_heads * d_head)``: the inverse of :func:`~deviating.kernels.split_heads`."""
    family = common_family(x=x)
    shape = shape_of(x, family, "x")
    if len(shape) != 4:
        raise ValueError(f"merge_heads expects x of shape (batch, n_heads, seq, d_head); got shape {shape}")
    batch, n_heads, seq, d_head = shape
    if family == "lists":
        return merge_heads_lists(x)
    return x.swapaxes(1, 2).reshape(batch, seq, n_heads * d_head)  # (batch, seq, d_model)


def _linear(x: Array, w: Array, b: Array | None, family: str) -> Array:
    """``x @ w.T + b`` (PyTorch ``Linear``)."""
    if family == "lists":
        return linear_lists(x, w, b)
    if family == "torch":
        return F.linear(x, w, b)
    y = np.matmul(x, w.T)
    return y if b is None else y + b


def multi_head_attention(
    x: Array,
    w_q: Array,
    w_k: Array,
    w_v: Array,
    w_o: Array,
    n_heads: int,
    b_q: Array | None = None,
    b_k: Array | None = None,
    b_v: Array | None = None,
    b_o: Array | None = None,
    mask: Array | None = None,
    *,
    causal: bool = False,
    backend: str = "numpy",
    empty_rows: str = "raise",
    need_pattern: bool = False,
) -> tuple[Array, Array | None]:
    """Multi-head self-attention; returns ``(out, patterns)``.

    ``x`` ``(batch, seq, d_model)``; weights ``(d_model, d_model)``, biases ``(d_model,)``.
    Each head attends in its own ``d_head`` columns; the outputs ``z`` are concatenated and
    projected by ``w_o``. ``patterns``: ``(batch, n_heads, seq, seq)`` (``None`` for
    ``"sdpa"``). ``mask`` broadcasts to ``(batch, n_heads, seq, seq)``; the other options are
    as in :func:`deviating.kernels.attention`.
    """
    named = {"x": x, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o,
             "b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": b_o}
    family = common_family(**named, mask=mask)
    check_backend(backend, family)
    present = {name: value for name, value in named.items() if value is not None}
    shapes = {name: shape_of(value, family, name) for name, value in present.items()}
    if len(shapes["x"]) != 3:
        raise ValueError(f"x must have shape (batch, seq, d_model); got shape {shapes['x']}")
    batch, seq, d_model = shapes["x"]
    _check_n_heads(d_model, n_heads)
    for name, shape in shapes.items():
        want = (d_model, d_model) if name.startswith("w_") else (d_model,) if name.startswith("b_") else shape
        if shape != want:
            raise ValueError(f"{name} must have shape {want} for d_model = {d_model} "
                             f"(PyTorch Linear convention, x @ w.T + b); got shape {shape}")
    for name, value in present.items():
        check_numeric(value, family, name)
    if family == "torch":
        check_same_dtype_device(present)
    check_finite(present, family)
    if backend == "loops":
        check_loops_size(4 * batch * seq * d_model * d_model, "4 projections: 4 * batch * seq * d_model^2")
        if family == "numpy":  # pure Python throughout; numpy in, numpy out
            out, patterns = multi_head_attention(
                *(None if a is None else a.tolist() for a in (x, w_q, w_k, w_v, w_o)), n_heads,
                *(None if a is None else a.tolist() for a in (b_q, b_k, b_v, b_o, mask)),
                causal=causal, backend="loops", empty_rows=empty_rows)
            return (np.array(out, dtype=np.float64).reshape(batch, seq, d_model),
                    np.array(patterns, dtype=np.float64).reshape(batch, n_heads, seq, seq))
    if family == "numpy":  # one float dtype throughout (see attention's numpy backend)
        dtype = np.result_type(*(value.dtype for value in present.values()), np.float32)
        x, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o = (
            None if a is None else a.astype(dtype, copy=False) for a in (x, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o))

    q = split_heads(_linear(x, w_q, b_q, family), n_heads)  # (batch, head, seq, d_head)
    k = split_heads(_linear(x, w_k, b_k, family), n_heads)  # (batch, head, seq, d_head)
    v = split_heads(_linear(x, w_v, b_v, family), n_heads)  # (batch, head, seq, d_head)
    z, patterns = attention(q, k, v, mask, causal=causal, backend=backend,
                            empty_rows=empty_rows, need_pattern=need_pattern)
    # z: (batch, head, seq, d_head); patterns: (batch, head, q_pos, k_pos)
    z = merge_heads(z)  # (batch, seq, d_model)
    return _linear(z, w_o, b_o, family), patterns  # (batch, seq, d_model)
