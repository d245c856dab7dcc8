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


def split_no_transpose(x, n_heads):
    """Reshaped to (batch, seq, n_heads, d_head) and returned there: the head axis never moves forward."""
    b, s, d = x.shape
    return x.reshape(b, s, n_heads, d // n_heads)


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


def cost_library(n, d_model, n_heads):
    from deviating.experiments.split_cost import attention_work

    return attention_work(n, d_model, n_heads)  # the count the chapter prints


def _fold(m, l, acc, scores, values, *, rescale=True, invert=False, tile_max_only=False, shift=True,
          guard=True, mask_as_zero=False):
    """One tile of the online softmax, with one of the mistakes students make switched on."""
    scores = np.where(np.isneginf(scores), 0.0, scores) if mask_as_zero else scores
    m_new = float(np.max(scores)) if tile_max_only else max(m, float(np.max(scores)))
    if guard and m_new == -np.inf:
        return m, l, acc
    base = m_new if shift else 0.0
    if not rescale:
        alpha = 1.0
    elif invert:
        alpha = np.exp(m_new - m) if np.isfinite(m) else 0.0
    else:
        alpha = np.exp(m - base) if shift else 1.0
    p = np.exp(scores - base)
    return m_new, alpha * l + p.sum(), alpha * acc + p @ values


def online_no_rescale(m, l, acc, scores, values):
    return _fold(m, l, acc, scores, values, rescale=False)


def online_inverted_rescale(m, l, acc, scores, values):
    return _fold(m, l, acc, scores, values, invert=True)


def online_tile_max_only(m, l, acc, scores, values):
    return _fold(m, l, acc, scores, values, tile_max_only=True)


def online_no_shift(m, l, acc, scores, values):
    with np.errstate(over="ignore", invalid="ignore"):
        return _fold(m, l, acc, scores, values, shift=False)


def online_nan_on_empty_tile(m, l, acc, scores, values):
    with np.errstate(invalid="ignore"):
        return _fold(m, l, acc, scores, values, guard=False)


def online_mask_as_zero(m, l, acc, scores, values):
    return _fold(m, l, acc, scores, values, mask_as_zero=True)


def online_rescale_l_only(m, l, acc, scores, values):
    m_new = max(m, float(np.max(scores)))
    if m_new == -np.inf:
        return m, l, acc
    p = np.exp(scores - m_new)
    return m_new, np.exp(m - m_new) * l + p.sum(), acc + p @ values  # acc kept against the old max


def online_kernel(m, l, acc, scores, values):
    import torch

    from deviating.kernels import flash_attention

    flash_attention(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1))  # the library's tiled loop
    return m, l, acc


# --------------------------------------------------------------------------- zeroed_logits


def _zeroed(model, input_ids, heads, hook_for, kind="pre", remove=True):
    import torch

    out = []
    for layer, head in heads:
        module = model.transformer.h[layer].attn.c_proj
        register = module.register_forward_pre_hook if kind == "pre" else module.register_forward_hook
        handle = register(hook_for(model, head))
        try:
            with torch.no_grad():
                out.append(model(input_ids=input_ids).logits)
        finally:
            if remove:
                handle.remove()
    return torch.stack(out).numpy()


def zero_output_slice(model, input_ids, heads):
    """Zeroes the head's columns of W_O's *output* (d_model space), not of its input."""
    d = model.config.n_embd // model.config.n_head

    def hook_for(model, head):
        def hook(module, args, output):
            output = output.clone()
            output[..., head * d:(head + 1) * d] = 0.0
            return output
        return hook
    return _zeroed(model, input_ids, heads, hook_for, kind="post")


def zero_slice_without_d_head(model, input_ids, heads):
    """Columns head to head + d_head: the slice of head 0 is right, every other head's is not."""
    d = model.config.n_embd // model.config.n_head

    def hook_for(model, head):
        def hook(module, args):
            z = args[0].clone()
            z[..., head:head + d] = 0.0
            return (z,)
        return hook
    return _zeroed(model, input_ids, heads, hook_for)


def zero_every_head(model, input_ids, heads):
    """Zeroes W_O's whole input: every head of the layer at once."""
    def hook_for(model, head):
        def hook(module, args):
            return (args[0] * 0.0,)
        return hook
    return _zeroed(model, input_ids, heads, hook_for)


def hook_left_in_place(model, input_ids, heads):
    """Never removes a hook: the second head's logits still have the first head zeroed."""
    d = model.config.n_embd // model.config.n_head

    def hook_for(model, head):
        def hook(module, args):
            z = args[0].clone()
            z[..., head * d:(head + 1) * d] = 0.0
            return (z,)
        return hook
    return _zeroed(model, input_ids, heads, hook_for, remove=False)


def hook_left_after_last(model, input_ids, heads):
    """Removes each hook when the next head begins: the logits are right, the last hook stays on."""
    import torch

    d = model.config.n_embd // model.config.n_head
    out, handle = [], None
    for layer, head in heads:
        if handle is not None:
            handle.remove()

        def hook(module, args, head=head):
            z = args[0].clone()
            z[..., head * d:(head + 1) * d] = 0.0
            return (z,)
        handle = model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(hook)
        with torch.no_grad():
            out.append(model(input_ids=input_ids).logits)
    return torch.stack(out).numpy()


def subtract_head_and_bias(model, input_ids, heads):
    """Subtracts the head's write *and* W_O's bias after W_O: the bias is not the head's."""
    d = model.config.n_embd // model.config.n_head

    def hook_for(model, head):
        def hook(module, args, output):
            z = args[0][..., head * d:(head + 1) * d]
            return output - z @ module.weight[head * d:(head + 1) * d] - module.bias
        return hook
    return _zeroed(model, input_ids, heads, hook_for, kind="post")


CATALOGUE: dict[str, list] = {
    "ex-02-split-heads": [split_direct_reshape, split_interleaved, split_wrong_transpose, split_no_transpose],
    "ex-02-zero-head": [zero_output_slice, zero_slice_without_d_head, zero_every_head, hook_left_in_place,
                        hook_left_after_last, subtract_head_and_bias],
    "ex-02-qk-ranks": [ranks_min_of_factors, ranks_small_product, ranks_no_tolerance, ranks_query_only],
    "ex-02-cost": [cost_three_projections, cost_one_softmax, cost_scores_per_head_full_width, cost_one_head_mixing,
                   cost_library],
    "ex-02-online-softmax": [online_no_rescale, online_inverted_rescale, online_tile_max_only, online_no_shift,
                             online_nan_on_empty_tile, online_mask_as_zero, online_rescale_l_only, online_kernel],
}
