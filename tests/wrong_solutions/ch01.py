"""Wrong solutions students really write for the exercises of chapter 01."""

from __future__ import annotations

import numpy as np


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
    from deviating.kernels import attention

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


def ceiling_library(n_letters):
    from deviating.data.two_relations import TwoRelations
    from deviating.experiments.head_split import order_blind_ceiling

    return order_blind_ceiling(TwoRelations(n_letters=n_letters))  # the chapter's own count


CATALOGUE: dict[str, list] = {
    "ex-01-one-query": [one_query_unscaled, one_query_sqrt_nk, one_query_sqrt_dv, one_query_by_d,
                        one_query_unstable],
    "ex-01-causal": [causal_unscaled, causal_sqrt_n, causal_mask_after_softmax, causal_strict, causal_kernel],
    "ex-01-name-heads": [names_from_query_1, names_from_query_2, names_max, names_at_least, names_topic_is_first],
    "ex-01-ceiling": [ceiling_three_quarters, ceiling_hard_coded, ceiling_n_squared, ceiling_plus_one_over_n,
                      ceiling_library],
}
