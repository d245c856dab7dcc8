"""The catalogue of plausible wrong solutions: every one of them must fail its exercise's check.

For each exercise of the book, at least three wrong answers that students really write (wrong
scaling, wrong range, max for mean, ties, one layer, the first input only, mean for zero
ablation, no mask, no abs, an answer hard-coded from a message, the library's own function...),
each asserted to be rejected by the check, while the notebook's own solution passes
(tests/test_exercises.py). So a check cannot quietly weaken again. Each check also keeps at
least one case whose expected value it never prints.
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections import Counter

import nbformat
import numpy as np
import pytest
import torch

from conftest import chapter_notebooks
from make_student import find_exercises

from headlab.analysis.detect import induction_score
from headlab.exercises import ExerciseFailed, ForbiddenCall, NotImplementedYet, recording

# --------------------------------------------------------------------------- ch00


def sm_naive(scores):
    e = np.exp(np.asarray(scores, dtype=float))
    with np.errstate(invalid="ignore", over="ignore"):
        return e / e.sum(axis=-1, keepdims=True)


def sm_global_max(scores):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max())
    with np.errstate(invalid="ignore"):
        return e / e.sum(axis=-1, keepdims=True)


def sm_min_shift(scores):
    s = np.asarray(scores, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.min(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def sm_mask_as_zero(scores):
    s = np.asarray(scores, dtype=float)
    s = np.where(np.isinf(s), 0.0, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sm_axis0(scores):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def sm_library(scores):
    from headlab.kernels.reference import softmax

    return softmax(np.asarray(scores, dtype=float))


# --------------------------------------------------------------------------- ch01


def _attend(q, K, V, scale):
    s = K @ q / scale
    w = np.exp(s - s.max())
    return (w / w.sum()) @ V


def one_query_unscaled(q, K, V):
    return _attend(q, K, V, 1.0)


def one_query_sqrt_nk(q, K, V):
    return _attend(q, K, V, np.sqrt(K.shape[0]))


def one_query_sqrt_dv(q, K, V):
    return _attend(q, K, V, np.sqrt(V.shape[1]))


def one_query_by_d(q, K, V):
    return _attend(q, K, V, q.shape[0])


def one_query_unstable(q, K, V):
    s = K @ q / np.sqrt(q.shape[0])
    w = np.exp(s)
    with np.errstate(invalid="ignore"):
        return (w / w.sum()) @ V


def _causal(Q, K, V, scale, mask_k=1, renorm=True):
    n = Q.shape[0]
    s = Q @ K.T / scale
    future = np.triu(np.ones((n, n), dtype=bool), k=mask_k)
    if renorm:
        s = np.where(future, -np.inf, s)
        with np.errstate(invalid="ignore"):
            w = np.exp(s - s.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
    else:
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        w = np.where(future, 0.0, w)
    return w @ V


def causal_unscaled(Q, K, V):
    return _causal(Q, K, V, 1.0)


def causal_sqrt_n(Q, K, V):
    return _causal(Q, K, V, np.sqrt(Q.shape[0]))


def causal_mask_after_softmax(Q, K, V):
    return _causal(Q, K, V, np.sqrt(Q.shape[1]), renorm=False)


def causal_strict(Q, K, V):
    return _causal(Q, K, V, np.sqrt(Q.shape[1]), mask_k=0)


def causal_kernel(Q, K, V):
    from headlab.kernels import attention

    out = attention(Q, K, V, causal=True)
    return out[0] if isinstance(out, tuple) else out


def _name(pattern, queries, reduce=np.mean, strict=True):
    labels = []
    for head in np.asarray(pattern):
        prev = reduce(head[queries, queries - 1])
        topic = reduce(head[queries, 1])
        above = (lambda x: x > 0.5) if strict else (lambda x: x >= 0.5)
        labels.append("previous" if above(prev) else "topic" if above(topic) else "other")
    return labels


def names_from_query_1(pattern):
    return _name(pattern, np.arange(1, np.shape(pattern)[1]))


def names_from_query_2(pattern):
    return _name(pattern, np.arange(2, np.shape(pattern)[1]))


def names_max(pattern):
    return _name(pattern, np.arange(3, np.shape(pattern)[1]), reduce=np.max)


def names_at_least(pattern):
    return _name(pattern, np.arange(3, np.shape(pattern)[1]), strict=False)


def names_topic_is_first(pattern):
    labels = []
    for head in np.asarray(pattern):
        q = np.arange(3, head.shape[0])
        labels.append("previous" if head[q, q - 1].mean() > 0.5 else "topic" if head[q, 0].mean() > 0.5 else "other")
    return labels


def ceiling_three_quarters(n_letters):
    return 0.75


def ceiling_hard_coded(n_letters):
    return 0.765625  # the value the chapter prints for 32 letters


def ceiling_n_squared(n_letters):
    equal = 1 / n_letters**2
    return 0.5 + equal + (0.5 - equal) / 2


def ceiling_plus_one_over_n(n_letters):
    return 0.75 + 1 / n_letters


# --------------------------------------------------------------------------- ch02


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


# --------------------------------------------------------------------------- ch03


def punct_all_queries(pattern, is_punct):
    return float(np.mean([pattern[i, : i + 1][is_punct[: i + 1]].sum() for i in range(len(is_punct))]))


def punct_max_not_sum(pattern, is_punct):
    w = [pattern[i, : i + 1][is_punct[: i + 1]].max() for i in range(len(is_punct)) if is_punct[: i + 1].any()]
    return float(np.mean(w))


def punct_not_causal(pattern, is_punct):
    return float(np.mean([pattern[i][is_punct].sum() for i in range(len(is_punct))]))


def punct_first_key_only(pattern, is_punct):
    first = int(np.argmax(is_punct))
    return float(np.mean([pattern[i, first] for i in range(first, len(is_punct))]))


def sink_sharpest_entry(patterns):
    return int(np.unravel_index(np.argmax(patterns), patterns.shape)[-1])


def sink_last_layer(patterns):
    return int(patterns[-1].sum(axis=(0, 1)).argmax())


def sink_first_layer(patterns):
    return int(patterns[0].sum(axis=(0, 1)).argmax())


def sink_wrong_axis(patterns):
    return int(patterns.sum(axis=(0, 1, 3)).argmax())


def _relation(patterns, targets, hit, pick_offset):
    hits, n, offsets = 0, 0, {}
    for b, q in zip(*np.nonzero(targets >= 0)):
        t, row = targets[b, q], patterns[b, q]
        n += 1
        hits += hit(row, t)
        offsets[t - q] = offsets.get(t - q, 0) + 1
    best = pick_offset(offsets)
    return hits / n, int(best), offsets.get(best, 0) / n


def _strict(row, t):
    return row[t] > np.delete(row, t).max()


def _smallest(offsets):
    return min(offsets, key=lambda k: (-offsets[k], abs(k), k))


def relation_argmax(patterns, targets):
    return _relation(patterns, targets, lambda row, t: row.argmax() == t, _smallest)


def relation_hard_coded_offset(patterns, targets):
    acc, _, _ = _relation(patterns, targets, _strict, _smallest)
    n = int((targets >= 0).sum())
    right = sum(targets[b, q] - q == -2 for b, q in zip(*np.nonzero(targets >= 0)))
    return acc, -2, right / n


def relation_first_seen(patterns, targets):
    return _relation(patterns, targets, _strict, lambda offsets: Counter(offsets).most_common(1)[0][0])


def relation_sign_flipped(patterns, targets):
    acc, best, rate = _relation(patterns, targets, _strict, _smallest)
    return acc, -best, rate


def relation_positive_first(patterns, targets):
    return _relation(patterns, targets, _strict, lambda o: min(o, key=lambda k: (-o[k], abs(k), -k)))


def _nearest(patterns, targets, is_noun, hit, noun_at):
    head, noun, n = 0, 0, 0
    for b, q in zip(*np.nonzero(targets >= 0)):
        t, row = targets[b, q], patterns[b, q]
        n += 1
        head += hit(row, t)
        found = noun_at(is_noun[b], q)
        noun += found is not None and found == t
    return head / n, noun / n


def _at_or_before(nouns, q):
    found = np.nonzero(nouns[: q + 1])[0]
    return found[-1] if len(found) else None


def nearest_either_direction(patterns, targets, is_noun):
    def noun_at(nouns, q):
        found = np.nonzero(nouns)[0]
        return found[np.argmin(np.abs(found - q))] if len(found) else None

    return _nearest(patterns, targets, is_noun, _strict, noun_at)


def nearest_first_noun(patterns, targets, is_noun):
    def noun_at(nouns, q):
        found = np.nonzero(nouns[: q + 1])[0]
        return found[0] if len(found) else None

    return _nearest(patterns, targets, is_noun, _strict, noun_at)


def nearest_strictly_before(patterns, targets, is_noun):
    return _nearest(patterns, targets, is_noun, _strict, lambda nouns, q: _at_or_before(nouns, q - 1) if q else None)


def nearest_argmax(patterns, targets, is_noun):
    return _nearest(patterns, targets, is_noun, lambda row, t: row.argmax() == t, _at_or_before)


# --------------------------------------------------------------------------- ch04


def _induction(pattern, tokens, earliest=False, gap=2, target_shift=1, all_queries=False):
    weights = []
    for i in range(len(tokens)):
        earlier = [j for j in range(i - gap + 1) if tokens[j] == tokens[i]]
        if earlier:
            j = earlier[0] if earliest else earlier[-1]
            weights.append(pattern[i, j + target_shift])
        elif all_queries:
            weights.append(0.0)
    return float(np.mean(weights))


def induction_first_occurrence(pattern, tokens):
    return _induction(pattern, tokens, earliest=True)


def induction_includes_previous(pattern, tokens):
    return _induction(pattern, tokens, gap=1)


def induction_all_positions(pattern, tokens):
    return _induction(pattern, tokens, all_queries=True)


def induction_the_token_itself(pattern, tokens):
    return _induction(pattern, tokens, target_shift=0)


def _prev_scores(patterns):
    return np.diagonal(patterns, offset=-1, axis1=-2, axis2=-1)


def prev_head_max(patterns):
    s = _prev_scores(patterns).max(axis=-1)
    return tuple(int(x) for x in np.unravel_index(np.argmax(s), s.shape))


def prev_head_first_layer(patterns):
    return 0, int(_prev_scores(patterns)[0].mean(axis=-1).argmax())


def prev_head_swapped(patterns):
    s = _prev_scores(patterns).mean(axis=-1)
    layer, head = np.unravel_index(np.argmax(s), s.shape)
    return int(head), int(layer)


def prev_head_diagonal(patterns):
    s = np.diagonal(patterns, axis1=-2, axis2=-1).mean(axis=-1)
    return tuple(int(x) for x in np.unravel_index(np.argmax(s), s.shape))


def _composition(W_QK, W_OV, norm=None):
    return float(np.linalg.norm(W_QK @ W_OV, norm) / (np.linalg.norm(W_QK, norm) * np.linalg.norm(W_OV, norm)))


def k_comp_q_composition(W_Q, W_K, W_V, W_O):
    return _composition((W_V @ W_O).T, (W_Q @ W_K.T).T)  # W_OV W_QK: the query side


def k_comp_no_transpose(W_Q, W_K, W_V, W_O):
    return _composition(W_Q @ W_K.T, W_V @ W_O)


def k_comp_spectral(W_Q, W_K, W_V, W_O):
    return _composition(W_Q @ W_K.T, (W_V @ W_O).T, norm=2)


def k_comp_unnormalised(W_Q, W_K, W_V, W_O):
    return float(np.linalg.norm(W_Q @ W_K.T @ (W_V @ W_O).T))


def _after(hm, tokens, ablated, head, mode="zero", first_only=False, outside=False, whole_layer=False,
           pooled=False):
    if whole_layer and ablated:
        ablated = [(layer, h) for layer in {l for l, _ in ablated} for h in range(hm.n_heads)]
    kwargs = {"mode": "mean", "reference": tokens} if mode == "mean" else {}
    context = hm.ablate(ablated, **kwargs) if ablated else contextlib.nullcontext()
    with context:
        out = hm.run_with_cache(tokens)
    _, cache = (hm.run_with_cache(tokens) if outside else out)
    layer, h = head
    if pooled:  # one mean over every eligible query of the batch
        from headlab.analysis.detect import induction_score as _score  # noqa: F401 (same metric, pooled)

        pattern = cache.pattern(layer)[:, h]
        weights = [float(pattern[b, i, j + 1]) for b, row in enumerate(tokens.tolist())
                   for i in range(len(row)) for j in [max((k for k in range(i - 1) if row[k] == row[i]), default=None)]
                   if j is not None]
        return float(np.mean(weights))
    scores = induction_score(cache.pattern(layer), cache.input_ids)
    return float(scores[0, h] if first_only else scores[:, h].mean())


def after_mean_ablation(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, mode="mean")


def after_first_input(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, first_only=True)


def after_patterns_outside(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, outside=True)


def after_whole_layer(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, whole_layer=True)


def after_pooled_queries(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, pooled=True)


# --------------------------------------------------------------------------- ch05


def mean_ablation_in_place(z, reference, head):
    z[:, :, head, :] = reference[:, head, :].mean(axis=0)
    return z


def mean_ablation_over_heads(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = reference.mean(axis=(0, 1))
    return out


def mean_ablation_of_z(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = z[:, :, head, :].mean(axis=(0, 1))
    return out


def mean_ablation_zero(z, reference, head):
    out = z.copy()
    out[:, :, head, :] = 0.0
    return out


def pair_largest_effect(singles, pairs):
    return max(pairs, key=pairs.get)


def pair_largest_abs(singles, pairs):
    return max(pairs, key=lambda ab: abs(pairs[ab] - singles[ab[0]] - singles[ab[1]]))


def pair_smallest(singles, pairs):
    return min(pairs, key=lambda ab: pairs[ab] - singles[ab[0]] - singles[ab[1]])


def pair_one_single(singles, pairs):
    return max(pairs, key=lambda ab: pairs[ab] - singles[ab[0]])


def gini_no_abs(effects):
    x = np.clip(np.asarray(effects, dtype=float), 0, None)
    return float((x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean()))


def gini_no_clip(effects):
    x = np.asarray(effects, dtype=float)
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean()))


def gini_n_n_minus_1(effects):
    x = np.clip(np.asarray(effects, dtype=float), 0, None)
    n = x.size
    return float(np.abs(x[:, None] - x[None, :]).sum() / (2 * n * (n - 1) * x.mean()))


def gini_library(effects):
    from headlab.analysis.importance import gini

    return gini(np.clip(np.asarray(effects, dtype=float), 0, None))


# --------------------------------------------------------------------------- ch06


def _order(score, stable=True):
    idx = np.argsort(score.ravel(), kind="stable" if stable else None)
    return [divmod(int(i), score.shape[1]) for i in idx]


def order_by_mean(effects):
    return _order(effects.mean(axis=-1))


def order_unstable(effects):
    return _order(effects.max(axis=-1), stable=False)


def order_by_abs(effects):
    return _order(np.abs(effects).max(axis=-1))


def order_descending(effects):
    return _order(effects.max(axis=-1))[::-1]


def mean_z_with_batch(z):
    return np.broadcast_to(z.mean(axis=(0, 2), keepdims=True), z.shape).copy()


def mean_z_in_place(z):
    z[...] = z.mean(axis=2, keepdims=True)
    return z


def mean_z_over_positions(z):
    return np.broadcast_to(z.mean(axis=(1, 2), keepdims=True), z.shape).copy()


def mean_z_keepdims_only(z):
    return z.mean(axis=2, keepdims=True)


def hijack_with_sink(rows, x):
    return (rows.max(axis=-1) > x).reshape(len(rows), -1).any(axis=1)


def hijack_at_least(rows, x):
    return (rows[..., 1:].max(axis=-1) >= x).reshape(len(rows), -1).any(axis=1)


def hijack_head_mean(rows, x):
    return (rows.mean(axis=2)[..., 1:].max(axis=-1) > x).any(axis=1)


def hijack_first_layer(rows, x):
    return (rows[:, 0, :, 1:].max(axis=-1) > x).any(axis=1)


# --------------------------------------------------------------------------- ch07


def topk_no_relu(pre, k):
    idx = pre.topk(k, dim=-1).indices
    return torch.zeros_like(pre).scatter(-1, idx, pre.gather(-1, idx))


def topk_wrong_dim(pre, k):
    if pre.dim() == 1:
        return torch.relu(torch.zeros_like(pre).scatter(-1, pre.topk(k).indices, pre.topk(k).values))
    idx = pre.topk(min(k, pre.shape[0]), dim=0).indices
    return torch.relu(torch.zeros_like(pre).scatter(0, idx, pre.gather(0, idx)))


def topk_smallest(pre, k):
    idx = pre.topk(k, dim=-1, largest=False).indices
    return torch.relu(torch.zeros_like(pre).scatter(-1, idx, pre.gather(-1, idx)))


def topk_values_only(pre, k):
    return torch.relu(pre.topk(k, dim=-1).values)


def recovered_complement(clean, replaced, floor):
    return (replaced - clean) / (floor - clean)


def recovered_clipped(clean, replaced, floor):
    return min(1.0, max(0.0, (floor - replaced) / (floor - clean)))


def recovered_over_floor(clean, replaced, floor):
    return (floor - replaced) / floor


def match_abs(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    return (a @ b.T).abs().max(dim=1).values


def match_dot(dec_a, dec_b):
    return (dec_a @ dec_b.T).max(dim=1).values


def match_same_row(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    n = min(len(a), len(b))
    return torch.cat([(a[:n] * b[:n]).sum(dim=1), torch.zeros(len(a) - n)])


def match_over_b(dec_a, dec_b):
    a = dec_a / dec_a.norm(dim=1, keepdim=True)
    b = dec_b / dec_b.norm(dim=1, keepdim=True)
    return (a @ b.T).max(dim=0).values


def match_library(dec_a, dec_b):
    from headlab.analysis.sae.compare import match_features

    return match_features(dec_a, dec_b)


def _units(contributions, mass, sort=True, strict=True, per_row=True):
    c = np.asarray(contributions, dtype=float)
    if sort:
        c = -np.sort(-c, axis=1)
    cum = np.cumsum(c, axis=1)
    total = cum[:, -1:] if per_row else np.full((len(c), 1), cum[:, -1].mean())
    needed = ((cum < mass * total) if strict else (cum <= mass * total)).sum(axis=1) + 1
    return np.where(cum[:, -1] > 0, np.minimum(needed, c.shape[1]), 0)


def units_unsorted(contributions, mass):
    return _units(contributions, mass, sort=False)


def units_at_most(contributions, mass):
    return _units(contributions, mass, strict=False)


def units_global_total(contributions, mass):
    return _units(contributions, mass, per_row=False)


def units_zero_row_one(contributions, mass):
    c = -np.sort(-np.asarray(contributions, dtype=float), axis=1)
    cum = np.cumsum(c, axis=1)
    return (cum < mass * cum[:, -1:]).sum(axis=1) + 1


# --------------------------------------------------------------------------- ch08


def redundant_no_abs(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(np.mean(pair) - singles > margin * singles)


def redundant_at_least(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(np.mean(pair) - singles >= margin * abs(singles))


def redundant_per_input_any(single_a, single_b, pair, margin=0.1):
    singles = np.asarray(single_a) + np.asarray(single_b)
    return bool(np.any(np.asarray(pair) - singles > margin * np.abs(singles)))


def redundant_ratio(single_a, single_b, pair, margin=0.1):
    singles = float(np.mean(single_a) + np.mean(single_b))
    return bool(singles != 0 and np.mean(pair) / singles > 1 + margin) or (singles == 0 and np.mean(pair) > 0)


def orphans_mean(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm > 0) & (write_norm >= factor * np.mean(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_strict(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy > diffuse) & (write_norm > 0) & (write_norm > factor * np.median(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_any_write(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm >= factor * np.median(write_norm))
    return [(int(a), int(b)) for a, b in zip(*np.nonzero(found))]


def orphans_column_major(entropy, write_norm, diffuse=0.8, factor=1.5):
    found = (entropy >= diffuse) & (write_norm > 0) & (write_norm >= factor * np.median(write_norm))
    return [(int(a), int(b)) for b, a in zip(*np.nonzero(found.T))]


def _keep(effects, circuit_heads, backup_pairs, factor, score, bar):
    effects = np.asarray(effects, dtype=float)
    threshold = factor * bar(effects)
    keep = {(int(l), int(h)) for l, h in zip(*np.nonzero(score(effects) >= threshold))}
    keep |= {(int(l), int(h)) for l, h in circuit_heads}
    for removed, backup in backup_pairs:
        keep |= {tuple(map(int, removed)), tuple(map(int, backup))}
    return sorted(keep)


def keep_by_mean(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, backup_pairs, factor, lambda e: e.mean(-1), lambda e: e.mean(-1).max())


def keep_abs(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, backup_pairs, factor, lambda e: np.abs(e).max(-1),
                 lambda e: np.abs(e).mean(-1).max())


def keep_no_backups(effects, circuit_heads, backup_pairs, factor=1.0):
    return _keep(effects, circuit_heads, [], factor, lambda e: e.max(-1), lambda e: e.mean(-1).max())


def keep_per_layer_mean(effects, circuit_heads, backup_pairs, factor=1.0):
    effects = np.asarray(effects, dtype=float)
    bars = effects.mean(-1).max(axis=1, keepdims=True)
    keep = {(int(l), int(h)) for l, h in zip(*np.nonzero(effects.max(-1) >= factor * bars))}
    keep |= {(int(l), int(h)) for l, h in circuit_heads}
    for removed, backup in backup_pairs:
        keep |= {tuple(map(int, removed)), tuple(map(int, backup))}
    return sorted(keep)


def _drop(hm, prev_head, induction_head, batch, mode="zero", mask=True, first_only=False):
    layer, head = induction_head
    inputs = batch if mask else batch["input_ids"]

    def score():
        _, cache = hm.run_with_cache(inputs, names=("pattern",))
        per_input = induction_score(cache.pattern(layer), batch["input_ids"],
                                    batch["attention_mask"] if mask else None)
        return float(per_input[0, head] if first_only else per_input[:, head].mean())

    clean = score()
    kwargs = {"mode": "mean", "reference": batch} if mode == "mean" else {}
    with hm.ablate([prev_head], **kwargs):
        ablated = score()
    return clean - ablated


def drop_mean_ablation(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, mode="mean")


def drop_no_mask(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, mask=False)


def drop_first_input(hm, prev_head, induction_head, batch):
    return _drop(hm, prev_head, induction_head, batch, first_only=True)


def drop_absolute(hm, prev_head, induction_head, batch):
    return abs(_drop(hm, prev_head, induction_head, batch))


# --------------------------------------------------------------------------- the catalogue

CATALOGUE: dict[str, list] = {
    "ex-00-softmax": [sm_naive, sm_global_max, sm_min_shift, sm_mask_as_zero, sm_axis0, sm_library],
    "ex-01-one-query": [one_query_unscaled, one_query_sqrt_nk, one_query_sqrt_dv, one_query_by_d,
                        one_query_unstable],
    "ex-01-causal": [causal_unscaled, causal_sqrt_n, causal_mask_after_softmax, causal_strict, causal_kernel],
    "ex-01-name-heads": [names_from_query_1, names_from_query_2, names_max, names_at_least, names_topic_is_first],
    "ex-01-ceiling": [ceiling_three_quarters, ceiling_hard_coded, ceiling_n_squared, ceiling_plus_one_over_n],
    "ex-02-split-heads": [split_direct_reshape, split_interleaved, split_wrong_transpose],
    "ex-02-qk-ranks": [ranks_min_of_factors, ranks_small_product, ranks_no_tolerance, ranks_query_only],
    "ex-02-cost": [cost_three_projections, cost_one_softmax, cost_scores_per_head_full_width, cost_one_head_mixing],
    "ex-03-punctuation": [punct_all_queries, punct_max_not_sum, punct_not_causal, punct_first_key_only],
    "ex-03-sink": [sink_sharpest_entry, sink_last_layer, sink_first_layer, sink_wrong_axis],
    "ex-03-relation": [relation_argmax, relation_hard_coded_offset, relation_first_seen, relation_sign_flipped,
                       relation_positive_first],
    "ex-03-nearest-noun": [nearest_either_direction, nearest_first_noun, nearest_strictly_before, nearest_argmax],
    "ex-04-induction-score": [induction_first_occurrence, induction_includes_previous, induction_all_positions,
                              induction_the_token_itself],
    "ex-04-previous-token-head": [prev_head_max, prev_head_first_layer, prev_head_swapped, prev_head_diagonal],
    "ex-04-k-composition": [k_comp_q_composition, k_comp_no_transpose, k_comp_spectral, k_comp_unnormalised],
    "ex-04-ablated-induction": [after_mean_ablation, after_first_input, after_patterns_outside, after_whole_layer,
                                after_pooled_queries],
    "ex-05-mean-ablation": [mean_ablation_in_place, mean_ablation_over_heads, mean_ablation_of_z, mean_ablation_zero],
    "ex-05-redundant-pair": [pair_largest_effect, pair_largest_abs, pair_smallest, pair_one_single],
    "ex-05-gini": [gini_no_abs, gini_no_clip, gini_n_n_minus_1, gini_library],
    "ex-06-worst-case-order": [order_by_mean, order_unstable, order_by_abs, order_descending],
    "ex-06-layer-mean-z": [mean_z_with_batch, mean_z_in_place, mean_z_over_positions, mean_z_keepdims_only],
    "ex-06-flag-hijacked": [hijack_with_sink, hijack_at_least, hijack_head_mean, hijack_first_layer],
    "ex-07-topk": [topk_no_relu, topk_wrong_dim, topk_smallest, topk_values_only],
    "ex-07-recovered": [recovered_complement, recovered_clipped, recovered_over_floor],
    "ex-07-match": [match_abs, match_dot, match_same_row, match_over_b, match_library],
    "ex-07-units": [units_unsorted, units_at_most, units_global_total, units_zero_row_one],
    "ex-08-redundant": [redundant_no_abs, redundant_at_least, redundant_per_input_any, redundant_ratio],
    "ex-08-orphans": [orphans_mean, orphans_strict, orphans_any_write, orphans_column_major],
    "ex-08-keep": [keep_by_mean, keep_abs, keep_no_backups, keep_per_layer_mean],
    "ex-08-circuit": [drop_mean_ablation, drop_no_mask, drop_first_input, drop_absolute],
}


def _exercises() -> dict[str, tuple]:
    """label -> (check function, the stub's function name), from the chapters themselves."""
    found = {}
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        for ex in find_exercises(nb, path):
            source = nb.cells[ex.check].source
            module = re.search(r"from\s+(headlab\.exercises\.\w+)\s+import", source).group(1)
            check = re.search(r"\b(check_\w+)\(", source.split("import", 1)[1].split("\n", 1)[1]).group(1)
            found[ex.label] = (getattr(importlib.import_module(module), check), ex.function)
    return found


EXERCISES = _exercises()


def test_every_exercise_has_a_catalogue_of_at_least_three() -> None:
    assert set(CATALOGUE) == set(EXERCISES), (
        f"exercises without a catalogue: {sorted(set(EXERCISES) - set(CATALOGUE))}; "
        f"catalogues of no exercise: {sorted(set(CATALOGUE) - set(EXERCISES))}")
    thin = {label: len(wrong) for label, wrong in CATALOGUE.items() if len(wrong) < 3}
    assert not thin, f"fewer than 3 wrong solutions: {thin}"


@pytest.mark.parametrize(("label", "wrong"), [pytest.param(label, fn, id=f"{label}-{fn.__name__}")
                                              for label, fns in CATALOGUE.items() for fn in fns])
def test_the_check_rejects_a_wrong_solution(label: str, wrong, capsys, record_property) -> None:  # noqa: ANN001
    check, function = EXERCISES[label]
    with pytest.raises(ExerciseFailed) as failure:
        check(wrong)
    assert not isinstance(failure.value, NotImplementedYet)
    first = str(failure.value).splitlines()[0]
    if wrong.__name__.endswith(("_library", "_kernel")):  # the library's own answer, called from the stub
        assert isinstance(failure.value, ForbiddenCall), first
    else:  # rejected for its answer, not because this catalogue's code crashed
        assert " raised " not in first and not isinstance(failure.value, ForbiddenCall), first
    capsys.readouterr()
    record_property("summary", f"wrong solutions: {label}: {len(CATALOGUE[label])} written, "
                               f"{len(CATALOGUE[label])} rejected")


@pytest.mark.parametrize("label", sorted(CATALOGUE))
def test_some_expected_value_is_never_printed(label: str, capsys) -> None:
    """Run every case with a wrong answer: at least one failure message must hide its expected value."""
    check, _ = EXERCISES[label]
    with recording() as results:
        check(lambda *args, **kwargs: None)
    capsys.readouterr()
    (result,) = results
    assert result.n_passed == 0, f"{label}: a function returning None passed {result.n_passed} cases"
    hidden = [m for m in result.messages if "(not shown" in m]
    assert hidden, f"{label}: every case prints its expected value; mark one Case(..., hidden=True)"
    assert len(hidden) < result.total, f"{label}: every case is hidden; a student needs instructive messages"
