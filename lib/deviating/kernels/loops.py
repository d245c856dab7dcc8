"""Attention in pure Python: lists and loops, for reading, not for speed.

The ``backend="loops"`` of :func:`deviating.kernels.attention`: nested lists (numpy arrays are
converted), Python floats, at most :data:`LOOPS_MAX_WORK` multiply-adds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from headlab.kernels.checks import (
    broadcast_get,
    check_finite,
    check_mask_shape,
    check_qkv_shapes,
    empty_row_error,
    iter_batch,
    list_shape,
)

#: Largest ``batch * n_q * n_k * (d + d_v)`` the loops backend accepts (about a second of Python).
LOOPS_MAX_WORK = 2_000_000

Matrix = list[list[float]]


def softmax_row(scores: list[float]) -> list[float]:
    """Stable softmax of one row: ``exp(s_j - max s) / sum_j exp(s_j - max s)``.

    ``-inf`` gets weight exactly 0; the row needs one finite entry.
    """
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def check_loops_size(work: int, what: str) -> None:
    if work > LOOPS_MAX_WORK:
        raise ValueError(
            f"backend='loops' is pure Python, for teaching on small inputs: this call needs about "
            f"{work:,} multiply-adds ({what}), above LOOPS_MAX_WORK = {LOOPS_MAX_WORK:,}; "
            "use backend='numpy'"
        )


def attention_2d(
    q: Matrix,
    k: Matrix,
    v: Matrix,
    allowed: list[list[bool]],
    *,
    d: int,
    d_v: int,
    empty_rows: str = "raise",
    row_index: tuple[int, ...] = (),
    masked: bool = True,
    causal: bool = False,
) -> tuple[Matrix, Matrix]:
    """One attention head on 2-D lists: q ``(n_q, d)``, k ``(n_k, d)``,
    v ``(n_k, d_v)``.

    ``allowed[i][j]``: query i may attend to key j;
    ``s_j = (q_i . k_j) / sqrt(d)``, softmax, output row ``sum_j w_j v_j``.
    Returns ``(out, pattern)``.
    """
    n_k = len(k)
    scale = d ** -0.5
    out, pattern = [], []
    for i, q_row in enumerate(q):
        scores = [
            scale * sum(a * b for a, b in zip(q_row, k_row))
            if allowed[i][j] else -math.inf
            for j, k_row in enumerate(k)
        ]
        if not any(allowed[i]):  # nothing to attend to: no softmax
            if empty_rows == "raise":
                raise empty_row_error(row_index + (i,), n_k, masked, causal)
            out.append([0.0] * d_v)
            pattern.append([0.0] * n_k)
            continue
        weights = softmax_row(scores)
        out.append([sum(w * v_row[t] for w, v_row in zip(weights, v))
                    for t in range(d_v)])
        pattern.append(weights)
    return out, pattern


def attention_loops(q: Any, k: Any, v: Any, mask: Any, causal: bool, empty_rows: str) -> tuple[Any, Any]:
    """``attention(..., backend="loops")``: any batch dims, broadcast like NumPy."""
    as_numpy = isinstance(q, np.ndarray)
    if as_numpy:  # numpy in, numpy out; the arithmetic below stays pure Python
        q_shape, k_shape, v_shape = q.shape, k.shape, v.shape
        mask_shape = None if mask is None else mask.shape
        q, k, v = q.tolist(), k.tolist(), v.tolist()
        mask = None if mask is None else mask.tolist()
    else:
        q_shape, k_shape, v_shape = (list_shape(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        mask_shape = None if mask is None else list_shape(mask, "mask", boolean=True)
    batch, n_q, n_k, d, d_v = check_qkv_shapes(q_shape, k_shape, v_shape)
    if mask_shape is not None:
        check_mask_shape(mask_shape, batch + (n_q, n_k))
    check_loops_size(math.prod(batch) * n_q * n_k * (d + d_v), "batch * n_q * n_k * (d + d_v)")
    check_finite({"q": q, "k": k, "v": v}, "lists")

    outs, patterns = [], []
    for b in iter_batch(batch):
        # allowed[i][j]: the mask (broadcast like NumPy) and, if causal, key j <= query i.
        allowed = [
            [(mask is None or broadcast_get(mask, mask_shape, b + (i, j))) and (not causal or j <= i)
             for j in range(n_k)]
            for i in range(n_q)
        ]
        out, pattern = attention_2d(
            broadcast_get(q, q_shape[:-2], b), broadcast_get(k, k_shape[:-2], b),
            broadcast_get(v, v_shape[:-2], b), allowed,
            empty_rows=empty_rows, d=d, d_v=d_v, row_index=b, masked=mask is not None, causal=causal,
        )
        outs.append(out)
        patterns.append(pattern)
    out, pattern = _nest(outs, batch), _nest(patterns, batch)
    if as_numpy:
        return (np.array(out, dtype=np.float64).reshape(batch + (n_q, d_v)),
                np.array(pattern, dtype=np.float64).reshape(batch + (n_q, n_k)))
    return out, pattern


def _nest(flat: list, batch: tuple[int, ...]) -> Any:
    """Regroup a flat C-order list of per-batch results into nested lists of shape ``batch``."""
    for size in reversed(batch[1:]):
        flat = [flat[i:i + size] for i in range(0, len(flat), size)]
    return flat if batch else flat[0]


# ---------------------------------------------------------------------------
# Helpers for multi-head attention on lists
# ---------------------------------------------------------------------------

def linear_lists(x: list, w: Matrix, b: list[float] | None) -> list:
    """``x @ w.T + b`` on lists, x ``(batch, seq, d_in)``, w ``(d_out, d_in)`` (PyTorch ``Linear``)."""
    return [
        [[sum(xi * wi for xi, wi in zip(row, w_row)) + (b[o] if b is not None else 0.0)
          for o, w_row in enumerate(w)]
         for row in seq]
        for seq in x
    ]


def split_heads_lists(x: list, n_heads: int) -> list:
    """``(batch, seq, d_model) -> (batch, n_heads, seq, d_head)``: head h owns columns h*d_head ... (h+1)*d_head - 1."""
    d_head = len(x[0][0]) // n_heads if x and x[0] else 0
    return [[[row[h * d_head:(h + 1) * d_head] for row in seq] for h in range(n_heads)] for seq in x]


def merge_heads_lists(x: list) -> list:
    """``(batch, n_heads, seq, d_head) -> (batch, seq, n_heads * d_head)``: concatenate each position's heads."""
    return [[[value for head in heads for value in head[pos]] for pos in range(len(heads[0]))]
            for heads in x]
