"""Wrong solutions students really write for the exercises of chapter 04."""

from __future__ import annotations

from collections import Counter

import numpy as np


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


# --------------------------------------------------------------------------- nearest_candidate_accuracy


def _nearest_acc(queries, candidates, gold, pick, *, skip_empty=False, per_candidate=False):
    picks = [pick(q, list(c)) for q, c in zip(queries, candidates)]
    hits = sum(p is not None and p == g for p, g in zip(picks, gold))
    if per_candidate:
        return hits / sum(len(c) for c in candidates)
    return hits / (sum(p is not None for p in picks) if skip_empty else len(picks))


def candidate_either_direction(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold,
                        lambda q, c: min((x for x in c if x != q), key=lambda x: abs(x - q), default=None))


def candidate_either_ties_later(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold,
                        lambda q, c: min((x for x in c if x != q), key=lambda x: (abs(x - q), -x), default=None))


def candidate_counts_the_query(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold, lambda q, c: max((x for x in c if x <= q), default=None))


def candidate_farthest_earlier(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold, lambda q, c: min((x for x in c if x < q), default=None))


def candidate_assumes_sorted(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold,
                        lambda q, c: [x for x in c if x < q][-1] if any(x < q for x in c) else None)


def candidate_skips_empty(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold, lambda q, c: max((x for x in c if x < q), default=None),
                        skip_empty=True)


def candidate_over_candidates(queries, candidates, gold):
    return _nearest_acc(queries, candidates, gold, lambda q, c: max((x for x in c if x < q), default=None),
                        per_candidate=True)


# --------------------------------------------------------------------------- mcnemar_exact


def _mcnemar(head_hits, base_hits, *, sides=2, cap=True, swap=False, concordant=False):
    import math

    head, base = np.asarray(head_hits, bool), np.asarray(base_hits, bool)
    b, c = int((head & ~base).sum()), int((~head & base).sum())
    if concordant:
        b, c = int((head & base).sum()), int((~head & ~base).sum())
    n = b + c
    if n == 0:
        return 0, 0, 1.0
    p = sides * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return (c, b, min(1.0, p)) if swap else (b, c, min(1.0, p) if cap else p)


def mcnemar_one_sided(head_hits, base_hits):
    return _mcnemar(head_hits, base_hits, sides=1)


def mcnemar_uncapped(head_hits, base_hits):
    return _mcnemar(head_hits, base_hits, cap=False)


def mcnemar_counts_swapped(head_hits, base_hits):
    return _mcnemar(head_hits, base_hits, swap=True)


def mcnemar_concordant_pairs(head_hits, base_hits):
    return _mcnemar(head_hits, base_hits, concordant=True)


def mcnemar_chi_square(head_hits, base_hits):
    import math

    head, base = np.asarray(head_hits, bool), np.asarray(base_hits, bool)
    b, c = int((head & ~base).sum()), int((~head & base).sum())
    if b + c == 0:
        return 0, 0, 1.0
    stat = (abs(b - c) - 1) ** 2 / (b + c)  # the large-sample test with continuity correction
    return b, c, math.erfc(math.sqrt(stat / 2))


def mcnemar_library(head_hits, base_hits):
    from scipy.stats import binomtest

    head, base = np.asarray(head_hits, bool), np.asarray(base_hits, bool)
    b, c = int((head & ~base).sum()), int((~head & base).sum())
    return b, c, binomtest(b, b + c, 0.5).pvalue if b + c else 1.0


# --------------------------------------------------------------------------- punctuation_vs_neighbour


def _control(pattern, is_punct, mask, *, side=-1, control=True, rows="seeing", per_sequence=False, use_mask=True):
    pattern = np.asarray(pattern, float)
    real = np.asarray(mask, bool) if use_mask else np.ones(np.shape(mask), bool)
    marks = np.asarray(is_punct, bool) & real
    near = np.zeros_like(marks)
    if side == -1:
        near[:, :-1] = marks[:, 1:]
    else:
        near[:, 1:] = marks[:, :-1]
    near &= real & ~marks
    causal = np.tril(np.ones(pattern.shape[-2:], bool))
    on_m = (pattern * (causal & marks[:, None, None, :])).sum(-1)
    on_n = (pattern * (causal & near[:, None, None, :])).sum(-1) if control else 0.0
    counted = real & (np.cumsum(marks, 1) > 0) if rows == "seeing" else real
    value = (on_m - on_n) * counted[:, None, :]
    if per_sequence:
        return np.mean([value[b].sum(-1) / counted[b].sum() for b in range(len(real))], axis=0)
    return value.sum(axis=(0, 2)) / counted.sum()


def control_none(pattern, is_punct, mask):
    return _control(pattern, is_punct, mask, control=False)


def control_word_after_the_mark(pattern, is_punct, mask):
    return _control(pattern, is_punct, mask, side=+1)


def control_every_real_query(pattern, is_punct, mask):
    return _control(pattern, is_punct, mask, rows="real")


def control_mean_of_sequence_means(pattern, is_punct, mask):
    return _control(pattern, is_punct, mask, per_sequence=True)


def control_padding_counted(pattern, is_punct, mask):
    return _control(pattern, is_punct, mask, use_mask=False)


# --------------------------------------------------------------------------- has_attractor


def _attractor(tags, numbers, subject, verb, *, number=True, span="between", other=True):
    start = verb - 1 if span == "next" else subject + 1
    stop = len(tags) if span == "end" else verb
    for k in range(start, stop):
        if tags[k] == "NOUN" and k != subject and (not number or (numbers[k] != numbers[subject]) == other):
            return True
    return False


def attractor_any_noun(tags, numbers, subject, verb):
    return _attractor(tags, numbers, subject, verb, number=False)


def attractor_only_next_to_verb(tags, numbers, subject, verb):
    return _attractor(tags, numbers, subject, verb, span="next")


def attractor_looks_past_the_verb(tags, numbers, subject, verb):
    return _attractor(tags, numbers, subject, verb, span="end")


def attractor_same_number(tags, numbers, subject, verb):
    return _attractor(tags, numbers, subject, verb, other=False)


# --------------------------------------------------------------------------- offset_shuffle_test


def _shuffle(pointed, queries, targets, perms, *, plus_one=True, at_least=True, absolute=False, lower=False):
    pointed, queries, targets, perms = (np.asarray(x) for x in (pointed, queries, targets, perms))
    observed = float(np.mean(pointed == targets))
    moved = targets[perms] if absolute else queries[None, :] + (targets - queries)[perms]
    null = (moved == pointed[None, :]).mean(axis=1)
    worse = null <= observed if lower else (null >= observed if at_least else null > observed)
    count = int(worse.sum())
    return observed, (count + plus_one) / (len(perms) + plus_one)


def shuffle_without_the_observed(pointed, queries, targets, perms):
    return _shuffle(pointed, queries, targets, perms, plus_one=False)


def shuffle_strictly_better(pointed, queries, targets, perms):
    return _shuffle(pointed, queries, targets, perms, at_least=False)


def shuffle_absolute_targets(pointed, queries, targets, perms):
    return _shuffle(pointed, queries, targets, perms, absolute=True)


def shuffle_counts_the_worse(pointed, queries, targets, perms):
    return _shuffle(pointed, queries, targets, perms, lower=True)


CATALOGUE: dict[str, list] = {
    "ex-04-relation": [relation_argmax, relation_hard_coded_offset, relation_first_seen, relation_sign_flipped,
                       relation_positive_first],
    "ex-04-nearest-noun": [nearest_either_direction, nearest_first_noun, nearest_strictly_before, nearest_argmax],
    "ex-04-nearest-candidate": [candidate_either_direction, candidate_either_ties_later, candidate_counts_the_query,
                                candidate_farthest_earlier, candidate_assumes_sorted, candidate_skips_empty,
                                candidate_over_candidates],
    "ex-04-mcnemar": [mcnemar_one_sided, mcnemar_uncapped, mcnemar_counts_swapped, mcnemar_concordant_pairs,
                      mcnemar_chi_square, mcnemar_library],
    "ex-04-punctuation-control": [control_none, control_word_after_the_mark, control_every_real_query,
                                  control_mean_of_sequence_means, control_padding_counted],
    "ex-04-attractor": [attractor_any_noun, attractor_only_next_to_verb, attractor_looks_past_the_verb,
                        attractor_same_number],
    "ex-04-offset-null": [shuffle_without_the_observed, shuffle_strictly_better, shuffle_absolute_targets,
                          shuffle_counts_the_worse],
}
