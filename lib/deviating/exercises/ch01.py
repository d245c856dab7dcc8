"""Checks for chapter 01, "One operation for everything"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.ch01_more import (  # the building exercises' checks, kept in their own module
    check_accuracy_by_gap,
    check_blind_ceiling,
    check_masked_attention,
)
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_attend_one_query", "check_causal_attention", "check_masked_attention", "check_name_heads",
           "check_blind_ceiling", "check_order_blind_accuracy", "check_accuracy_by_gap"]

_KERNELS = ("deviating.kernels", "headlab.kernels")


# --------------------------------------------------------------------------- one query


def _planted_keys(weights: np.ndarray, d: int, axis: int, rest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A query and keys whose scaled scores ``K q / sqrt(d)`` are exactly ``log(weights)``.

    The query is ``e_axis``; key j holds ``sqrt(d) log w_j`` on that axis and arbitrary numbers
    (``rest``) elsewhere, which the query never reads. So the softmax weights are ``weights``
    only when the scores are divided by ``sqrt(d)``, d the length of q (not n_k, not d_v).
    """
    n_k = len(weights)
    keys = np.array(rest, dtype=float).reshape(n_k, d)
    keys[:, axis] = np.sqrt(d) * np.log(weights)
    q = np.zeros(d)
    q[axis] = 1.0
    return q, keys


def _one_query_cases() -> list[Case]:
    p = np.array([1.0, 2.0, 3.0, 4.0]) / 10.0  # the weights we plant
    d = 4
    keys = np.sqrt(d) * np.eye(d)  # (n_k, d): key j is sqrt(d) e_j, so score_j = q_j
    values = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])  # (n_k, d_v)
    w5 = np.array([0.1, 0.2, 0.3, 0.15, 0.25])
    q5, k5 = _planted_keys(w5, d=2, axis=0, rest=[[0, 3], [0, -1], [0, 2], [0, 0], [0, 1]])
    v5 = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [3.0, 1.0, 0.0], [0.0, -2.0, 1.0], [1.0, 1.0, 1.0]])
    w4 = np.array([0.4, 0.3, 0.2, 0.1])
    q4, k4 = _planted_keys(w4, d=3, axis=1, rest=np.arange(12.0) - 5.0)
    v4 = np.array([[2.0, -1.0], [0.0, 4.0], [1.0, 1.0], [-3.0, 0.0]])
    return [
        Case("a zero query: every score is 0, so the output is the mean of the values",
             args=(np.zeros(d), keys, values), expected=values.mean(axis=0),
             hint="equal scores give equal weights 1/n_k; the output is sum_j w_j v_j."),
        Case("planted weights: K = sqrt(d) I and q = log(p), V = I, so the output is p itself",
             args=(np.log(p), keys, np.eye(d)), expected=p,
             hint="score_j = (q . k_j) / sqrt(d); here that is exactly log p_j. If you got p**2, "
                  "you forgot to divide by sqrt(d) (d is the length of q)."),
        Case("the same weights, mixing 2-d values: output = p @ V",
             args=(np.log(p), keys, values), expected=p @ values,
             hint="the output is the weighted sum of the value rows, shape (d_v,)."),
        Case("huge scores, q = 1000 + log(p): the softmax must subtract the max",
             args=(1000.0 + np.log(p), keys, np.eye(d)), expected=p,
             hint="exp(1000) overflows; subtract the largest score before exponentiating."),
        Case("one key only: the output is its value",
             args=(np.array([3.0, -1.0]), np.array([[0.5, 2.0]]), np.array([[7.0, -7.0, 1.0]])),
             expected=np.array([7.0, -7.0, 1.0]),
             hint="a softmax over a single score is 1."),
        Case("d = 2, n_k = 5 keys, d_v = 3: the scaled scores are log([0.1, 0.2, 0.3, 0.15, 0.25])",
             args=(q5, k5, v5), expected=w5 @ v5,
             hint="divide by sqrt(d) with d = len(q) = K.shape[1], not by sqrt(n_k) (the number of "
                  "keys) or sqrt(d_v)."),
        Case("d = 3, n_k = 4, d_v = 2, planted weights", args=(q4, k4, v4), expected=w4 @ v4, hidden=True,
             hint="scores K q / sqrt(d), a stable softmax, then the weighted sum of the rows of V."),
    ]


def check_attend_one_query(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> None:
    """Check scaled dot-product attention for one query.

    ``fn(q, K, V)`` with ``q (d,)``, ``K (n_k, d)``, ``V (n_k, d_v)`` must return the output
    ``(d_v,)``: ``sum_j softmax(K q / sqrt(d))_j V[j]``.
    """
    run_cases(fn, _one_query_cases() + drawn(_drawn_one_query_cases), what="one query", forbid=_KERNELS)


_DRAWN = MARK + ": "


def _sizes(rng: np.random.Generator) -> tuple[int, int, int]:
    """(d, n_k, d_v), three different sizes: dividing by sqrt(n_k) or sqrt(d_v) instead of sqrt(d) shows."""
    d, n_k, d_v = (int(x) for x in rng.choice(np.arange(2, 9), size=3, replace=False))
    return d, n_k, d_v


def _drawn_one_query_cases(rng: np.random.Generator) -> list[Case]:
    """The fixed cases' kinds with random sizes, weights and values (drawn when grading: :mod:`.drawn`)."""
    cases = []
    d, n_k, d_v = _sizes(rng)
    values = rng.normal(size=(n_k, d_v))
    cases.append(Case(_DRAWN + f"a zero query, n_k = {n_k}", args=(np.zeros(d), rng.normal(size=(n_k, d)), values),
                      expected=values.mean(axis=0)))
    for shift in (0.0, 0.0, rng.uniform(800.0, 1000.0)):  # planted weights twice, then with huge scores
        d, n_k, d_v = _sizes(rng)
        w = rng.uniform(0.5, 5.0, n_k)
        w /= w.sum()
        q, keys = _planted_keys(w, d, int(rng.integers(d)), rng.normal(size=(n_k, d)))
        keys[:, int(np.argmax(q))] += np.sqrt(d) * shift  # the same shift on every score: the same weights
        values = rng.normal(size=(n_k, d_v))
        what = "huge scores, planted weights" if shift else f"planted weights, d = {d}, n_k = {n_k}, d_v = {d_v}"
        cases.append(Case(_DRAWN + what, args=(q, keys, values), expected=w @ values))
    value = rng.normal(size=(1, int(rng.integers(2, 6))))
    cases.append(Case(_DRAWN + "one key only", args=(rng.normal(size=3), rng.normal(size=(1, 3)), value),
                      expected=value[0]))
    return cases


# --------------------------------------------------------------------------- causal mask


def _causal_planted(w: np.ndarray, d: int, axis: int, values: np.ndarray) -> tuple[tuple, np.ndarray]:
    """Queries all equal to ``e_axis`` and keys with ``sqrt(d) log w_j`` there: query i's causal
    weights are ``w_j / sum_{k <= i} w_k`` on ``j <= i``. Returns ``(Q, K, V)`` and the outputs."""
    n = len(w)
    rest = np.arange(n * d, dtype=float).reshape(n, d) % 5 - 2.0  # never read by the queries
    _, keys = _planted_keys(w, d, axis, rest)
    queries = np.tile(np.eye(d)[axis], (n, 1))
    weights = np.tril(np.tile(w, (n, 1)))
    weights /= weights.sum(axis=1, keepdims=True)
    return (queries, keys, values), weights @ values


def _causal_cases() -> list[Case]:
    n = 4
    cumulative_mean = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # row i: 1/(i+1) on keys <= i
    values = np.array([[4.0, 0.0], [0.0, 4.0], [2.0, 2.0], [-4.0, 8.0]])
    # queries that prefer the *last* key strongly: without the mask every row would copy V[3]
    keys = np.sqrt(2.0) * np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 50.0]])
    queries = np.tile([0.0, 1.0], (n, 1))
    planted3, out3 = _causal_planted(np.array([0.2, 0.3, 0.5]), d=2, axis=0,
                                     values=np.arange(12.0).reshape(3, 4) - 4.0)
    planted4, out4 = _causal_planted(np.array([0.1, 0.2, 0.3, 0.4]), d=3, axis=2,
                                     values=np.array([[1.0, 0.0], [0.0, 2.0], [3.0, -1.0], [1.0, 1.0]]))
    return [
        Case("zero queries and V = I: row i spreads its weight evenly over keys 0..i",
             args=(np.zeros((n, 2)), np.zeros((n, 2)), np.eye(n)), expected=cumulative_mean,
             hint="query i may attend to keys j <= i only; the others get weight exactly 0 "
                  "(set their scores to -inf before the softmax)."),
        Case("zero queries, 2-d values: row i is the mean of the values 0..i",
             args=(np.zeros((n, 2)), np.zeros((n, 2)), values), expected=cumulative_mean @ values,
             hint="the output of query i is the mean of V[0..i] when all its scores are equal."),
        Case("every query loves key 3 (score 50), but only query 3 may see it",
             args=(queries, keys, values),
             expected=np.vstack([cumulative_mean[:3] @ values, values[3:4]]),
             hint="the future key must be masked even when its score is the largest; query 0 "
                  "sees only key 0, so its output is V[0]."),
        Case("n = 3, d = 2, d_v = 4: scaled scores log([0.2, 0.3, 0.5]) for every query",
             args=planted3, expected=out3,
             hint="divide the scores by sqrt(d), d = Q.shape[1] (not sqrt(n), not sqrt(d_v)); query i "
                  "renormalises the weights of keys 0..i."),
        Case("n = 4, d = 3, d_v = 2, planted weights", args=planted4, expected=out4, hidden=True,
             hint="scores Q K^T / sqrt(d), the future masked with -inf, a softmax per row, then @ V."),
    ]


def check_causal_attention(fn: Callable[[np.ndarray, np.ndarray, np.ndarray], Any]) -> None:
    """Check causal self-attention: ``fn(Q, K, V)`` with ``Q, K (n, d)``, ``V (n, d_v)`` returns
    ``(n, d_v)`` where row i attends to keys ``0..i`` only."""
    run_cases(fn, _causal_cases() + drawn(_drawn_causal_cases), what="causal attention", forbid=_KERNELS)


def _drawn_causal_cases(rng: np.random.Generator) -> list[Case]:
    """The fixed cases' kinds with random sizes, weights and values (drawn when grading: :mod:`.drawn`)."""
    n, d = int(rng.integers(3, 8)), int(rng.integers(2, 5))
    cumulative_mean = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    values = rng.normal(size=(n, int(rng.integers(2, 5))))
    cases = [Case(_DRAWN + f"zero queries, n = {n}", args=(np.zeros((n, d)), rng.normal(size=(n, d)), values),
                  expected=cumulative_mean @ values)]
    keys = np.zeros((n, d))
    keys[-1, 0] = np.sqrt(d) * rng.uniform(40.0, 60.0)  # only the last query may see the key they all love
    queries = np.tile(np.eye(d)[0], (n, 1))
    cases.append(Case(_DRAWN + "every query loves the last key", args=(queries, keys, values),
                      expected=np.vstack([cumulative_mean[:-1] @ values, values[-1:]])))
    for shift in (0.0, rng.uniform(800.0, 1000.0)):
        n = int(rng.integers(3, 8))
        d = int(rng.choice([k for k in range(2, 7) if k != n]))
        w = rng.uniform(0.5, 5.0, n)
        (queries, keys, values), out = _causal_planted(w / w.sum(), d, int(rng.integers(d)),
                                                       rng.normal(size=(n, int(rng.integers(2, 5)))))
        keys[:, int(np.argmax(queries[0]))] += np.sqrt(d) * shift
        cases.append(Case(_DRAWN + ("huge scores, planted weights" if shift else f"planted weights, n = {n}, d = {d}"),
                          args=(queries, keys, values), expected=out))
    return cases


# --------------------------------------------------------------------------- naming heads


def _planted(n: int, which: str, topic: int = 1, mix: float = 0.0) -> np.ndarray:
    """A causal ``(n, n)`` pattern: queries on the previous token or on the topic position,
    mixed with uniform causal attention in proportion ``mix``."""
    p = np.zeros((n, n))
    for i in range(n):
        j = max(i - 1, 0) if which == "previous" else min(topic, i) if which == "topic" else None
        if which == "first":
            j = 0
        p[i, j] = 1.0
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    return (1 - mix) * p + mix * uniform


def _rows_on(n: int, spec: dict[int, dict[int, float]]) -> np.ndarray:
    """A causal ``(n, n)`` pattern: row i puts ``spec[i]`` where given and the rest on key 0."""
    p = np.zeros((n, n))
    for i in range(n):
        for j, w in spec.get(i, {}).items():
            p[i, j] += w
        p[i, 0] += 1.0 - sum(spec.get(i, {}).values())
    return p


def _name_cases() -> list[Case]:
    n = 10
    prev, topic, first = _planted(n, "previous"), _planted(n, "topic"), _planted(n, "first")
    uniform = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    # previous-token only at queries 1 and 2, where that key is also key 0 or the topic
    early = _rows_on(5, {1: {0: 1.0}, 2: {1: 1.0}, 3: {2: 0.4}, 4: {3: 0.4}})
    one_row = _rows_on(n, {5: {4: 1.0}})  # on the previous token at one query only
    half = _rows_on(n, {i: {i - 1: 0.5} for i in range(3, n)})  # exactly 0.5: not "more than"
    return [
        Case("head 0 on the previous token, head 1 on the topic",
             args=(np.stack([prev, topic]),), expected=["previous", "topic"],
             hint="for each head, average pattern[h, i, i - 1] and pattern[h, i, 1] over the queries i >= 3."),
        Case("the same two heads, swapped",
             args=(np.stack([topic, prev]),), expected=["topic", "previous"],
             hint="label each head by its own pattern, not by its index."),
        Case("noisy heads: 40% of each row spread uniformly over the visible keys",
             args=(np.stack([_planted(n, "previous", mix=0.4), _planted(n, "topic", mix=0.4)]),),
             expected=["previous", "topic"],
             hint="a head whose mean weight on the relation's key exceeds 0.5 does that relation."),
        Case("three heads: uniform, on the first token (<bos>), on the previous token",
             args=(np.stack([uniform, first, prev]),), expected=["other", "other", "previous"],
             hint="a head with no mean weight above 0.5 on either key is 'other'; attending to "
                  "position 0 is not attending to the topic at position 1."),
        Case("5 positions: a head on the previous token at queries 1 and 2 only (0.4 after), and a topic head",
             args=(np.stack([early, _planted(5, "topic")]),), expected=["other", "topic"],
             hint="average over the queries i >= 3 only: at queries 1 and 2 the previous token is "
                  "the first token or the topic itself."),
        Case("a head on the previous token at one query only, then one with exactly 0.5 on it",
             args=(np.stack([one_row, half]),), expected=["other", "other"],
             hint="take the mean over the queries, not the max; and 'exceeds 0.5' is strict (> 0.5)."),
        Case("three heads at 30% noise: topic, previous, first token",
             args=(np.stack([_planted(n, "topic", mix=0.3), _planted(n, "previous", mix=0.3), first]),),
             expected=["topic", "previous", "other"], hidden=True),
    ]


def _compare_labels(got: Any, expected: list[str]) -> str | None:
    if got is None:
        return "got None: did the function forget to `return` its result?"
    try:
        got = [str(x) for x in got]
    except TypeError:
        return f"expected a list of labels, got {type(got).__name__}"
    if len(got) != len(expected):
        return f"expected {len(expected)} labels (one per head), got {len(got)}"
    for h, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            return f"head {h} is {e!r}, got {g!r}"
    return None


def check_name_heads(fn: Callable[[np.ndarray], Any]) -> None:
    """Check a function that labels each head of a pattern ``(head, q_pos, k_pos)`` as
    ``"previous"``, ``"topic"`` (key position 1) or ``"other"``."""
    run_cases(fn, _name_cases() + drawn(_drawn_name_cases), compare=_compare_labels, what="naming heads",
              forbid=("headlab.analysis.detect",))


def _drawn_name_cases(rng: np.random.Generator) -> list[Case]:
    """Three stacks of heads of the fixed cases' kinds, in random order, sizes and noise (drawn when
    grading: :mod:`.drawn`); each kind's label follows from its construction."""
    def head(kind: str, n: int) -> tuple[np.ndarray, str]:
        mix = rng.uniform(0.0, 0.4)
        if kind in ("previous", "topic"):
            return _planted(n, kind, mix=mix), kind
        if kind == "first":
            return _planted(n, "first", mix=mix), "other"
        if kind == "uniform":
            return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None], "other"
        if kind == "half":  # exactly 0.5 on the previous token: not "more than"
            return _rows_on(n, {i: {i - 1: 0.5} for i in range(3, n)}), "other"
        if kind == "early":  # on the previous token at queries 1 and 2, which do not count, 0.5 after
            return _rows_on(n, {1: {0: 1.0}, 2: {1: 1.0}, **{i: {i - 1: 0.5} for i in range(3, n)}}), "other"
        i = int(rng.integers(3, n))  # on the previous token at one query only
        return _rows_on(n, {i: {i - 1: 1.0}}), "other"

    cases = []
    for kinds in (["previous", "topic"], ["uniform", "first", "early", rng.choice(["previous", "topic"])],
                  ["one row", "half", rng.choice(["previous", "topic"])]):
        n = int(rng.integers(6, 15))
        heads = [head(str(k), n) for k in rng.permutation(kinds)]
        cases.append(Case(_DRAWN + f"{len(heads)} heads over {n} positions", args=(np.stack([h for h, _ in heads]),),
                          expected=[label for _, label in heads]))
    return cases


# --------------------------------------------------------------------------- the order-blind ceiling


def check_order_blind_accuracy(fn: Callable[[int], Any]) -> None:
    """Check the best accuracy of a reader who knows the pair ``{x, topic}`` but not which is which.

    Known answers by counting: with ``n`` letters (``n/2`` capitals), a mixed-case pair
    (probability 1/2) is always right, an equal pair (probability ``1/n``) is always right,
    and a same-case pair of two different letters is a coin flip.
    """
    cases = [
        Case("4 letters (A, B, a, b): the 16 equally likely pairs, counted by hand",
             args=(4,), expected=0.875,
             hint="list the 16 pairs (x, topic): 8 are mixed-case (always right), 4 are equal "
                  "letters (always right), 4 are same-case and different (right half the time)."),
        Case("32 letters, the chapter's task", args=(32,), expected=0.75 + 1 / 64,
             hint="P(mixed case) = 1/2; P(same letter) = 1/n; the rest is a coin flip."),
        Case("52 letters (A-Z, a-z)", args=(52,), expected=0.75 + 1 / 104,
             hint="the accuracy tends to 3/4 as the alphabet grows."),
        Case("10 letters", args=(10,), expected=0.75 + 1 / 20, hidden=True),
        Case("6 letters", args=(6,), expected=0.75 + 1 / 12, hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_ceiling_cases), compare=lambda got, exp: compare_number(got, exp, atol=1e-9, rtol=0),
              what="the ceiling", forbid=("deviating.experiments",))


def _drawn_ceiling_cases(rng: np.random.Generator) -> list[Case]:
    """Three even alphabet sizes (drawn when grading: :mod:`.drawn`); the answer by counting, 3/4 + 1/(2n)."""
    sizes = 2 * rng.choice(np.arange(2, 101), size=3, replace=False)
    return [Case(_DRAWN + f"{n} letters", args=(int(n),), expected=0.75 + 1 / (2 * int(n))) for n in sizes]
