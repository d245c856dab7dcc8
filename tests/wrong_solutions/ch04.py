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


CATALOGUE: dict[str, list] = {
    "ex-04-relation": [relation_argmax, relation_hard_coded_offset, relation_first_seen, relation_sign_flipped,
                       relation_positive_first],
    "ex-04-nearest-noun": [nearest_either_direction, nearest_first_noun, nearest_strictly_before, nearest_argmax],
    "ex-04-nearest-candidate": [candidate_either_direction, candidate_either_ties_later, candidate_counts_the_query,
                                candidate_farthest_earlier, candidate_assumes_sorted, candidate_skips_empty,
                                candidate_over_candidates],
}
