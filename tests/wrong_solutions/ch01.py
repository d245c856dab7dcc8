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


# --------------------------------------------------------------------------- masked_attention


def _masked(Q, K, V, mask, *, invert=False, after=False, scale=True, transpose_all=False, stable=True,
            zero_score=False):
    d = Q.shape[-1]
    Kt = K.T if transpose_all else K.swapaxes(-1, -2)
    s = Q @ Kt / (np.sqrt(d) if scale else 1.0)
    seen = np.ones(s.shape[-2:], dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if invert and mask is not None:
        seen = ~seen
    if zero_score:
        s = s * seen
    elif not after:
        s = np.where(seen, s, -np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(s - s.max(-1, keepdims=True)) if stable else np.exp(s)
        p = w / w.sum(-1, keepdims=True)
    if after:
        p = np.where(seen, p, 0.0)
    return p @ V, p


def masked_true_means_hidden(Q, K, V, mask=None):
    with np.errstate(invalid="ignore"):
        return _masked(Q, K, V, mask, invert=True)


def masked_after_softmax(Q, K, V, mask=None):
    return _masked(Q, K, V, mask, after=True)


def masked_unscaled(Q, K, V, mask=None):
    return _masked(Q, K, V, mask, scale=False)


def masked_plain_transpose(Q, K, V, mask=None):
    try:
        return _masked(Q, K, V, mask, transpose_all=True)
    except ValueError:  # K.T of a 3-d array: the shapes no longer fit
        return None


def masked_unstable(Q, K, V, mask=None):
    return _masked(Q, K, V, mask, stable=False)


def masked_score_zeroed(Q, K, V, mask=None):
    return _masked(Q, K, V, mask, zero_score=True)


def masked_no_refusal(Q, K, V, mask=None):
    """Right wherever a query sees a key; a query that sees none gets NaN instead of an error."""
    return _masked(Q, K, V, mask)


def masked_library(Q, K, V, mask=None):
    from deviating.kernels import attention

    return attention(Q, K, V, mask=mask)


# --------------------------------------------------------------------------- blind_ceiling


def blind_skips_equal_letters(answers):
    n = answers.shape[0]
    return sum((2 if answers[a, b] == answers[b, a] else 1) for a in range(n) for b in range(a + 1, n)) / n**2


def blind_pairs_weighed_alike(answers):
    n = answers.shape[0]
    pairs = [(a, b) for a in range(n) for b in range(a, n)]
    return sum(1.0 if a == b or answers[a, b] == answers[b, a] else 0.5 for a, b in pairs) / len(pairs)


def blind_answer_in_the_pair(answers):
    n = answers.shape[0]
    return float(np.mean([answers[x, t] in (x, t) for x in range(n) for t in range(n)]))


def blind_one_guess_for_all(answers):
    values, counts = np.unique(answers, return_counts=True)
    return counts.max() / answers.size


# --------------------------------------------------------------------------- accuracy_by_gap


def _bins(gap, correct, edges, *, closed=False, empty=np.nan, last_closed=False, over_all=False):
    gap, correct, edges = np.asarray(gap, float), np.asarray(correct, bool), np.asarray(edges, float)
    counts, acc = [], []
    for b, (low, high) in enumerate(zip(edges[:-1], edges[1:])):
        top = gap <= high if closed or (last_closed and b == len(edges) - 2) else gap < high
        inside = (gap >= low) & top
        counts.append(int(inside.sum()))
        if over_all:
            acc.append(correct[inside].sum() / len(gap))
        else:
            acc.append(correct[inside].mean() if inside.any() else empty)
    return np.array(counts), np.array(acc, dtype=float)


def gap_closed_bins(gap, correct, edges):
    return _bins(gap, correct, edges, closed=True)


def gap_zero_for_empty_bin(gap, correct, edges):
    return _bins(gap, correct, edges, empty=0.0)


def gap_histogram_last_bin_closed(gap, correct, edges):
    return _bins(gap, correct, edges, last_closed=True)


def gap_no_refusal(gap, correct, edges):
    """Right on increasing edges; on edges out of order it bins as if nothing were wrong."""
    return _bins(gap, correct, edges)


def gap_share_of_all_answers(gap, correct, edges):
    return _bins(gap, correct, edges, over_all=True)


CATALOGUE: dict[str, list] = {
    "ex-01-masked": [masked_true_means_hidden, masked_after_softmax, masked_unscaled, masked_plain_transpose,
                     masked_unstable, masked_score_zeroed, masked_no_refusal, masked_library],
    "ex-01-blind-ceiling": [blind_skips_equal_letters, blind_pairs_weighed_alike, blind_answer_in_the_pair,
                            blind_one_guess_for_all],
    "ex-01-accuracy-by-gap": [gap_closed_bins, gap_zero_for_empty_bin, gap_histogram_last_bin_closed,
                              gap_share_of_all_answers, gap_no_refusal],
    "ex-01-one-query": [one_query_unscaled, one_query_sqrt_nk, one_query_sqrt_dv, one_query_by_d,
                        one_query_unstable],
    "ex-01-causal": [causal_unscaled, causal_sqrt_n, causal_mask_after_softmax, causal_strict, causal_kernel],
    "ex-01-name-heads": [names_from_query_1, names_from_query_2, names_max, names_at_least, names_topic_is_first],
    "ex-01-ceiling": [ceiling_three_quarters, ceiling_hard_coded, ceiling_n_squared, ceiling_plus_one_over_n,
                      ceiling_library],
}
