"""Wrong solutions students really write for chapter 02's building exercises (the layer, its
statistics, the losses, the tiled loop); chapter 02's first exercises are in ``ch02.py``."""

from __future__ import annotations

import numpy as np


# --------------------------------------------------------------------------- merge_heads


def merge_direct_reshape(z):
    b, h, s, d = z.shape
    return z.reshape(b, s, h * d)


def merge_interleaved(z):
    b, h, s, d = z.shape
    return z.transpose(0, 2, 3, 1).reshape(b, s, h * d)


def merge_heads_reversed(z):
    b, h, s, d = z.shape
    return z[:, ::-1].transpose(0, 2, 1, 3).reshape(b, s, h * d)


def merge_positions_stacked(z):
    b, h, s, d = z.shape
    return z.reshape(b, h * s, d)


# --------------------------------------------------------------------------- a whole layer


def _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, *, split="right", scale="d_head", mask=True, w_o_t=True,
         merge="right"):
    b, n, d_model = x.shape
    d_head = d_model // n_heads

    def cut(y):
        if split == "direct":
            return y.reshape(b, n_heads, n, d_head)
        return y.reshape(b, n, n_heads, d_head).transpose(0, 2, 1, 3)

    q, k, v = (cut(x @ w.T) for w in (w_q, w_k, w_v))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(d_head if scale == "d_head" else d_model)
    if causal and mask:
        s = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    p = w / w.sum(-1, keepdims=True)
    z = p @ v
    merged = z.reshape(b, n, d_model) if merge == "direct" else z.transpose(0, 2, 1, 3).reshape(b, n, d_model)
    return merged @ (w_o.T if w_o_t else w_o), p


def mha_direct_split(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, split="direct")


def mha_sqrt_d_model(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, scale="d_model")


def mha_never_masks(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, mask=False)


def mha_w_o_untransposed(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, w_o_t=False)


def mha_merge_without_transpose(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    return _mha(x, w_q, w_k, w_v, w_o, n_heads, causal, merge="direct")


def mha_library(x, w_q, w_k, w_v, w_o, n_heads, causal=True):
    from deviating.kernels import multi_head_attention

    return multi_head_attention(x, w_q, w_k, w_v, w_o, n_heads, causal=causal)


# --------------------------------------------------------------------------- per-head statistics


def _stats(pattern, *, first_query=1, log=np.log, own=False, mean_row=False):
    p = np.asarray(pattern, dtype=float)
    qs = np.arange(first_query, p.shape[1])
    rows = p[:, first_query:, :]
    if mean_row:
        rows = rows.mean(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = log(np.where(rows > 0, rows, 1.0)) if log is not None else np.log(rows)
        entropy = -(rows * logs).sum(-1).mean(-1)
    prev_keys = qs if own else qs - 1
    return {"entropy": entropy, "max_weight": p[:, first_query:].max(-1).mean(-1),
            "previous_token": p[:, qs, prev_keys].mean(-1), "first_token": p[:, qs, 0].mean(-1)}


def stats_with_query_0(pattern):
    return _stats(pattern, first_query=0)


def stats_log2(pattern):
    return _stats(pattern, log=np.log2)


def stats_nan_from_masked_keys(pattern):
    return _stats(pattern, log=None)


def stats_own_token_as_previous(pattern):
    return _stats(pattern, own=True)


def stats_entropy_of_mean_row(pattern):
    return _stats(pattern, mean_row=True)


def uniform_with_query_0(n_pos):
    seen = np.arange(1, n_pos + 1)
    even = float(np.mean(1.0 / seen))
    return {"entropy": float(np.mean(np.log(seen))), "max_weight": even, "previous_token": even, "first_token": even}


def uniform_every_key(n_pos):
    even = 1.0 / n_pos
    return {"entropy": float(np.log(n_pos)), "max_weight": even, "previous_token": even, "first_token": even}


def uniform_sum_not_mean(n_pos):
    seen = np.arange(2, n_pos + 1)
    even = float(np.sum(1.0 / seen))
    return {"entropy": float(np.sum(np.log(seen))), "max_weight": even, "previous_token": even, "first_token": even}


def uniform_log2(n_pos):
    seen = np.arange(2, n_pos + 1)
    even = float(np.mean(1.0 / seen))
    return {"entropy": float(np.mean(np.log2(seen))), "max_weight": even, "previous_token": even,
            "first_token": even}


# --------------------------------------------------------------------------- tiled_attention


def _tiled(q, k, v, block, causal, *, count_all=False, rescale=True, drop_rest=False, mask_inside=True,
           per_tile=False):
    n, d = q.shape
    out, visited = np.zeros((n, v.shape[1])), 0
    stop = n - n % block if drop_rest else n
    for q0 in range(0, n, block):
        rows = np.arange(q0, min(q0 + block, n))
        m, l, acc = np.full(len(rows), -np.inf), np.zeros(len(rows)), np.zeros((len(rows), v.shape[1]))
        outs = []
        for k0 in range(0, stop, block):
            if causal and k0 > rows[-1]:
                if count_all:
                    visited += 1
                continue
            visited += 1
            keys = np.arange(k0, min(k0 + block, n))
            s = q[rows] @ k[keys].T / np.sqrt(d)
            if causal and mask_inside:
                s = np.where(keys[None, :] > rows[:, None], -np.inf, s)
            if per_tile:  # a softmax per tile, the tiles' outputs averaged
                with np.errstate(invalid="ignore"):
                    w = np.exp(s - s.max(1, keepdims=True))
                    outs.append(np.nan_to_num(w / w.sum(1, keepdims=True)) @ v[keys])
                continue
            m_new = np.maximum(m, s.max(axis=1))
            scale = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = (scale if rescale else 1.0) * l + p.sum(axis=1)
            acc = (scale[:, None] if rescale else 1.0) * acc + p @ v[keys]
            m = m_new
        out[rows] = np.mean(outs, axis=0) if per_tile else acc / l[:, None]
    return out, visited


def tiled_counts_skipped_tiles(q, k, v, block, causal=True):
    return _tiled(q, k, v, block, causal, count_all=True)


def tiled_no_rescale(q, k, v, block, causal=True):
    with np.errstate(over="ignore", invalid="ignore"):
        return _tiled(q, k, v, block, causal, rescale=False)


def tiled_drops_short_tile(q, k, v, block, causal=True):
    with np.errstate(invalid="ignore"):
        return _tiled(q, k, v, block, causal, drop_rest=True)


def tiled_no_mask_in_diagonal_tile(q, k, v, block, causal=True):
    return _tiled(q, k, v, block, causal, mask_inside=False)


def tiled_softmax_per_tile(q, k, v, block, causal=True):
    return _tiled(q, k, v, block, causal, per_tile=True)


def tiled_kernel(q, k, v, block, causal=True):
    import torch

    from deviating.kernels import flash_attention

    out = flash_attention(torch.tensor(q)[None, None], torch.tensor(k)[None, None], torch.tensor(v)[None, None],
                          causal=causal, block_size=block)
    t = -(-len(q) // block)
    return out[0, 0].numpy(), t * (t + 1) // 2 if causal else t * t


# --------------------------------------------------------------------------- head_singular_values


def _svals(m):
    return np.linalg.svd(m, compute_uv=False)


def sv_of_a_alone(A, B):
    return _svals(np.asarray(A))


def sv_of_a_transpose_b(A, B):
    return _svals(np.asarray(A).swapaxes(-1, -2) @ np.asarray(B))


def sv_r_b_not_transposed(A, B):
    return _svals(np.linalg.qr(A)[1] @ np.linalg.qr(B)[1])


def sv_smallest_first(A, B):
    return _svals(np.linalg.qr(A)[1] @ np.linalg.qr(B)[1].swapaxes(-1, -2))[..., ::-1]


def sv_no_refusal(A, B):
    """Right on factors of one shape; factors of two d_model pass through without an error."""
    return _svals(np.linalg.qr(A)[1] @ np.linalg.qr(B)[1].swapaxes(-1, -2))


def sv_eigenvalues(A, B):
    eig = np.abs(np.linalg.eigvals(np.linalg.qr(A)[1] @ np.linalg.qr(B)[1].swapaxes(-1, -2)))
    return -np.sort(-eig, axis=-1)


# --------------------------------------------------------------------------- next_token_losses


def _losses(logits, ids, *, shift=1, stable=True, log=np.log, per_window=True):
    logits, ids = np.asarray(logits, dtype=float), np.asarray(ids)
    n = logits.shape[1]
    scores, targets = logits[:, :n - shift], ids[:, shift:]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if stable:
            top = scores.max(-1, keepdims=True)
            logp = scores - top - np.log(np.exp(scores - top).sum(-1, keepdims=True))
        else:
            logp = np.log(np.exp(scores) / np.exp(scores).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0] / (np.log(2) if log is np.log2 else 1.0)
    return nll.mean(-1) if per_window else np.full(len(logits), nll.mean())


def losses_same_position(logits, ids):
    """Scores each position's logits against its own token, not the next one."""
    return _losses(logits, ids, shift=0)


def losses_unstable(logits, ids):
    return _losses(logits, ids, stable=False)


def losses_in_bits(logits, ids):
    return _losses(logits, ids, log=np.log2)


def losses_one_mean_for_all(logits, ids):
    """The mean over every window, repeated: no loss per window."""
    return _losses(logits, ids, per_window=False)


def losses_no_refusal(logits, ids):
    """Right on matching shapes; ids of another length are cut or padded silently."""
    import warnings

    logits, ids = np.asarray(logits), np.asarray(ids)
    n = min(logits.shape[1], ids.shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window of one position has no prediction left
        return _losses(logits[:, :n], ids[:, :n])


def losses_library(logits, ids):
    import torch

    from headlab.metrics import next_token_loss

    return next_token_loss(torch.tensor(logits), torch.tensor(ids), reduction="input").numpy()


CATALOGUE: dict[str, list] = {
    "ex-02-merge-heads": [merge_direct_reshape, merge_interleaved, merge_heads_reversed, merge_positions_stacked],
    "ex-02-multi-head": [mha_direct_split, mha_sqrt_d_model, mha_never_masks, mha_w_o_untransposed,
                         mha_merge_without_transpose, mha_library],
    "ex-02-singular-values": [sv_of_a_alone, sv_of_a_transpose_b, sv_r_b_not_transposed, sv_smallest_first,
                              sv_eigenvalues, sv_no_refusal],
    "ex-02-next-token-losses": [losses_same_position, losses_unstable, losses_in_bits, losses_one_mean_for_all,
                                losses_no_refusal, losses_library],
    "ex-02-head-statistics": [stats_with_query_0, stats_log2, stats_nan_from_masked_keys, stats_own_token_as_previous,
                              stats_entropy_of_mean_row],
    "ex-02-uniform-baseline": [uniform_with_query_0, uniform_every_key, uniform_sum_not_mean, uniform_log2],
    "ex-02-tiled": [tiled_counts_skipped_tiles, tiled_no_rescale, tiled_drops_short_tile,
                    tiled_no_mask_in_diagonal_tile, tiled_softmax_per_tile, tiled_kernel],
}
