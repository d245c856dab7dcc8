"""Wrong solutions students really write for the exercises of chapter 02."""

from __future__ import annotations

import numpy as np


def split_direct_reshape(x, n_heads):
    b, s, d = x.shape
    return x.reshape(b, n_heads, s, d // n_heads)


def split_interleaved(x, n_heads):
    b, s, d = x.shape
    return x.reshape(b, s, d // n_heads, n_heads).transpose(0, 3, 1, 2)


def split_wrong_transpose(x, n_heads):
    b, s, d = x.shape
    return x.reshape(b, s, n_heads, d // n_heads).transpose(0, 2, 3, 1)


def _head_cols(w, h, n_heads):
    d_head = w.shape[1] // n_heads
    return w[:, h * d_head:(h + 1) * d_head]


def ranks_min_of_factors(w_q, w_k, n_heads):
    return np.array([min(np.linalg.matrix_rank(_head_cols(w_q, h, n_heads)),
                         np.linalg.matrix_rank(_head_cols(w_k, h, n_heads))) for h in range(n_heads)])


def ranks_small_product(w_q, w_k, n_heads):
    return np.array([np.linalg.matrix_rank(_head_cols(w_q, h, n_heads).T @ _head_cols(w_k, h, n_heads))
                     for h in range(n_heads)])


def ranks_no_tolerance(w_q, w_k, n_heads):
    return np.array([int((np.linalg.svd(_head_cols(w_q, h, n_heads) @ _head_cols(w_k, h, n_heads).T,
                                        compute_uv=False) > 0).sum()) for h in range(n_heads)])


def ranks_query_only(w_q, w_k, n_heads):
    return np.array([np.linalg.matrix_rank(_head_cols(w_q, h, n_heads)) for h in range(n_heads)])


def cost_three_projections(n, d_model, n_heads):
    d_head = d_model // n_heads
    return {"projections": 3 * n * d_model**2, "scores": n_heads * n * n * d_head,
            "mixing": n_heads * n * n * d_head, "softmax_exps": n_heads * n * n}


def cost_one_softmax(n, d_model, n_heads):
    d_head = d_model // n_heads
    return {"projections": 4 * n * d_model**2, "scores": n_heads * n * n * d_head,
            "mixing": n_heads * n * n * d_head, "softmax_exps": n * n}


def cost_scores_per_head_full_width(n, d_model, n_heads):
    return {"projections": 4 * n * d_model**2, "scores": n_heads * n * n * d_model,
            "mixing": n_heads * n * n * d_model, "softmax_exps": n_heads * n * n}


def cost_one_head_mixing(n, d_model, n_heads):
    d_head = d_model // n_heads
    return {"projections": 4 * n * d_model**2, "scores": n_heads * n * n * d_head,
            "mixing": n * n * d_head, "softmax_exps": n_heads * n * n}


CATALOGUE: dict[str, list] = {
    "ex-02-split-heads": [split_direct_reshape, split_interleaved, split_wrong_transpose],
    "ex-02-qk-ranks": [ranks_min_of_factors, ranks_small_product, ranks_no_tolerance, ranks_query_only],
    "ex-02-cost": [cost_three_projections, cost_one_softmax, cost_scores_per_head_full_width, cost_one_head_mixing],
}
