"""Wrong solutions students really write for chapter 7's builds (deviating.exercises.ch07_more)."""

from __future__ import annotations

import math

import numpy as np


def _losses(hm, inputs, heads_of, score="mean"):
    import torch

    from headlab.metrics import next_token_loss

    def loss(heads):
        with torch.no_grad():
            if heads:
                with hm.ablate(heads):
                    logits = hm(inputs)
            else:
                logits = hm(inputs)
        if score == "last":
            return float(-logits[:, -2].log_softmax(-1).gather(-1, inputs[:, -1:]).mean())
        return float(next_token_loss(logits, inputs, reduction="mean"))

    return loss, np.array([[loss(heads_of(l, h)) for h in range(hm.n_heads)] for l in range(hm.n_layers)])


def importance_no_baseline(hm, inputs):
    """The loss with the head removed, not its increase over the model as it is."""
    return _losses(hm, inputs, lambda l, h: [(l, h)])[1]


def importance_sign_flipped(hm, inputs):
    """Clean minus ablated: the helpful heads come out negative."""
    loss, ablated = _losses(hm, inputs, lambda l, h: [(l, h)])
    return loss([]) - ablated


def importance_whole_layer(hm, inputs):
    """Removes every head of the layer, not the one head."""
    loss, ablated = _losses(hm, inputs, lambda l, h: [(l, k) for k in range(hm.n_heads)])
    return ablated - loss([])


def importance_last_position(hm, inputs):
    """Scores only the prediction of the last token."""
    loss, ablated = _losses(hm, inputs, lambda l, h: [(l, h)], score="last")
    return ablated - loss([])


def importance_hook_left_on(hm, inputs):
    """Enters hm.ablate without leaving it: each head stays removed for the next measurement."""
    import torch

    from headlab.metrics import next_token_loss

    def loss():
        with torch.no_grad():
            return float(next_token_loss(hm(inputs), inputs, reduction="mean"))

    clean = loss()
    out = np.zeros((hm.n_layers, hm.n_heads))
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            hm.ablate([(l, h)]).__enter__()  # never exited
            out[l, h] = loss() - clean
    return out


def _first(values, counts, tol, higher, strict=True, index=False, step=False):
    v = np.asarray(values, dtype=float)
    ref = np.concatenate([v[:1], v[:-1]]) if step else v[0]
    worse = ref - v if higher else v - ref
    bad = worse > tol if strict else worse >= tol
    hit = np.flatnonzero(bad)
    if not hit.size:
        return counts[-1] + 1
    return int(hit[0]) if index else int(counts[hit[0]])


def first_failure_at_least(values, counts, tol, higher_is_better):
    return _first(values, counts, tol, higher_is_better, strict=False)


def first_failure_index(values, counts, tol, higher_is_better):
    return _first(values, counts, tol, higher_is_better, index=True)


def first_failure_one_direction(values, counts, tol, higher_is_better):
    """Treats every measure as a loss (higher is worse)."""
    return _first(values, counts, tol, False)


def first_failure_step(values, counts, tol, higher_is_better):
    """Compares each value with the previous one, not with the first."""
    return _first(values, counts, tol, higher_is_better, step=True)


def first_failure_never_none(values, counts, tol, higher_is_better):
    out = _first(values, counts, tol, higher_is_better)
    return None if out == counts[-1] + 1 else out


def _null(per_item, size, counts, tol, own, n_draws, rng, replace=False, strict=True, from_zero=False,
          earlier=False):
    per = np.asarray(per_item, dtype=float)
    counts = list(counts)
    hits = 0
    for _ in range(n_draws):
        curve = per[rng.choice(len(per), size=size, replace=replace)].mean(0)
        rise = curve - (0.0 if from_zero else curve[0])
        bad = np.flatnonzero(rise > tol if strict else rise >= tol)
        first = counts[bad[0]] if bad.size else counts[-1] + 1
        hits += (first < own) if earlier else (first <= own)
    return hits / n_draws


def subset_with_replacement(per_item, size, counts, tol, own, n_draws, rng):
    return _null(per_item, size, counts, tol, own, n_draws, rng, replace=True)


def subset_at_least(per_item, size, counts, tol, own, n_draws, rng):
    return _null(per_item, size, counts, tol, own, n_draws, rng, strict=False)


def subset_rise_from_zero(per_item, size, counts, tol, own, n_draws, rng):
    return _null(per_item, size, counts, tol, own, n_draws, rng, from_zero=True)


def subset_strictly_earlier(per_item, size, counts, tol, own, n_draws, rng):
    return _null(per_item, size, counts, tol, own, n_draws, rng, earlier=True)


def _mcnemar(a, b, two_sided=True, clip=True, everything=False):
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    n = len(a) if everything else a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, x) for x in range(min(a_only, b_only) + 1)) / 2 ** n
    p = 2 * tail if two_sided else tail
    return min(1.0, p) if clip else p


def mcnemar_one_sided(a, b):
    return _mcnemar(a, b, two_sided=False)


def mcnemar_unclipped(a, b):
    return _mcnemar(a, b, clip=False)


def mcnemar_every_item(a, b):
    """Counts the concordant items in n."""
    return _mcnemar(a, b, everything=True)


def mcnemar_chi_squared(a, b):
    """The chi-squared approximation with continuity correction, not the exact test."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if a_only + b_only == 0:
        return 1.0
    stat = (abs(a_only - b_only) - 1) ** 2 / (a_only + b_only)
    return float(math.erfc(math.sqrt(max(stat, 0.0) / 2)))


def mcnemar_library(a, b):
    from headlab.stats import mcnemar

    return mcnemar(a, b).pvalue


def _detect(pos, neg, fpr, ties=0.5, strict=True, rounding=math.floor):
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    auc = ((pos[:, None] > neg).sum() + ties * (pos[:, None] == neg).sum()) / (pos.size * neg.size)
    threshold = np.sort(neg)[::-1][min(int(rounding(fpr * neg.size)), neg.size - 1)]
    return float(auc), float(np.mean(pos > threshold if strict else pos >= threshold))


def detection_ties_ignored(positive, negative, fpr):
    return _detect(positive, negative, fpr, ties=0.0)


def detection_at_or_above(positive, negative, fpr):
    return _detect(positive, negative, fpr, strict=False)


def detection_rounded(positive, negative, fpr):
    return _detect(positive, negative, fpr, rounding=math.ceil)


def detection_quantile(positive, negative, fpr):
    """The threshold from np.quantile of the negatives (interpolates between them)."""
    auc, _ = _detect(positive, negative, fpr)
    threshold = np.quantile(np.asarray(negative, float), 1 - fpr)
    return auc, float(np.mean(np.asarray(positive, float) > threshold))


def detection_library(positive, negative, fpr):
    from deviating.analysis.inspection import roc_auc, tpr_at_fpr

    return roc_auc(positive, negative), tpr_at_fpr(positive, negative, fpr)


CATALOGUE: dict[str, list] = {
    "ex-07-importance": [importance_no_baseline, importance_sign_flipped, importance_whole_layer,
                         importance_last_position, importance_hook_left_on],
    "ex-07-first-failure": [first_failure_at_least, first_failure_index, first_failure_one_direction,
                            first_failure_step, first_failure_never_none],
    "ex-07-subset-null": [subset_with_replacement, subset_at_least, subset_rise_from_zero, subset_strictly_earlier],
    "ex-07-mcnemar": [mcnemar_one_sided, mcnemar_unclipped, mcnemar_every_item, mcnemar_chi_squared,
                      mcnemar_library],
    "ex-07-detection": [detection_ties_ignored, detection_at_or_above, detection_rounded, detection_quantile,
                        detection_library],
}
