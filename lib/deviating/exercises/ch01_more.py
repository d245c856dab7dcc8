"""Checks for chapter 01's building exercises: attention under any mask, the order-blind ceiling
of any answer table, and accuracy binned by a head's lean.

:mod:`deviating.exercises.ch01` re-exports every check here (the grader names checks by chapter
module). Every expected value follows from how the inputs are built, never from a reference
implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.refusing import REFUSED, compare_refusal, refusing

__all__ = ["check_masked_attention", "check_blind_ceiling", "check_accuracy_by_gap"]

_DRAWN = MARK + ": "
_KERNELS = ("deviating.kernels", "headlab.kernels")


# --------------------------------------------------------------------------- any mask


def _planted(rng: np.random.Generator, lead: tuple, n_q: int, n_k: int, d: int, d_v: int, mask: np.ndarray | None,
             shift: float = 0.0) -> tuple[tuple, tuple]:
    """Queries all ``e_a`` and keys holding ``sqrt(d) (log w_j + shift)`` on axis a (random elsewhere):
    every query scores key j at ``log w_j + shift``, so its weights are ``w`` over the keys the mask
    lets it see, renormalised. ``lead`` are leading (batch, head) axes, each with its own ``w``."""
    a = int(rng.integers(d))
    w = rng.uniform(0.2, 5.0, (*lead, 1, n_k))
    keys = rng.normal(size=(*lead, n_k, d))
    keys[..., a] = np.sqrt(d) * (np.log(w[..., 0, :]) + shift)
    queries = np.zeros((*lead, n_q, d))
    queries[..., a] = 1.0
    values = rng.normal(size=(*lead, n_k, d_v))
    seen = np.ones((n_q, n_k), dtype=bool) if mask is None else mask
    pattern = np.where(seen, w, 0.0) * np.ones((*lead, n_q, n_k))
    pattern /= pattern.sum(-1, keepdims=True)
    return (queries, keys, values, mask), (pattern @ values, pattern)


def _random_mask(rng: np.random.Generator, n_q: int, n_k: int) -> np.ndarray:
    """A boolean (n_q, n_k) mask, n_k >= 3: every row sees at least two keys and hides at least one
    (so the scale of the scores still matters, and so does the mask)."""
    mask = rng.random((n_q, n_k)) < 0.5
    for row in mask:
        order = rng.permutation(n_k)
        row[order[:2]] = True
        row[order[2]] = False
    return mask


def _compare_pair(got: Any, expected: tuple) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (output, pattern), got {type(got).__name__}"
    for what, g, e in zip(("output", "pattern"), got, expected):
        problem = compare_arrays(g, e, atol=1e-9, rtol=1e-9)
        if problem is not None:
            return f"{what}: {problem}"
    return None


def check_masked_attention(fn: Callable[..., Any]) -> None:
    """Check ``masked_attention(Q, K, V, mask=None)`` -> ``(output, pattern)``: ``Q (..., n_q, d)``,
    ``K (..., n_k, d)``, ``V (..., n_k, d_v)``, ``mask (n_q, n_k)`` boolean, True where a query may
    look (None: everywhere). Planted keys give every pattern by construction."""
    rng = np.random.default_rng(101)
    causal4 = np.tril(np.ones((4, 4), dtype=bool))
    odd = np.array([[True, False, True], [False, True, False]])
    cases = []
    for name, lead, n_q, n_k, d, d_v, mask, shift, hidden, hint in [
        ("no mask: 3 queries, 4 keys, d = 2", (), 3, 4, 2, 3, None, 0.0, False,
         "with mask=None every query sees every key; divide the scores by sqrt(d), d = Q.shape[-1]."),
        ("a causal mask, 4 positions", (), 4, 4, 3, 2, causal4, 0.0, False,
         "True means 'may look': set the scores where the mask is False to -inf before the softmax."),
        ("a mask with holes: query 0 sees keys 0 and 2, query 1 key 1 only", (), 2, 3, 2, 2, odd, 0.0, False,
         "a hidden key gets weight exactly 0 and the others are renormalised (mask before the softmax, not after)."),
        ("leading axes (2, 3): a batch of 2 with 3 heads, one mask for all", (2, 3), 4, 4, 2, 2, causal4, 0.0, False,
         "work on the last two axes: K.swapaxes(-1, -2), not K.T, which reverses every axis."),
        ("huge scores (about 1000) under a causal mask", (), 4, 4, 2, 3, causal4, 1000.0, False,
         "subtract each row's largest visible score before exponentiating."),
        ("leading axis 2, a random mask of 5 queries by 6 keys", (2,), 5, 6, 3, 2, _random_mask(rng, 5, 6), 0.0,
         True, ""),
    ]:
        args, expected = _planted(rng, lead, n_q, n_k, d, d_v, mask, shift)
        cases.append(Case(name, args=args, expected=expected, hidden=hidden, hint=hint))
    blind = causal4.copy()
    blind[2] = False  # query 2 may see no key: its weights would be 0 / 0
    (q, k, v, _), _ = _planted(rng, (), 4, 4, 2, 2, causal4)
    cases.append(Case("a mask that leaves query 2 no key at all", args=(q, k, v, blind), expected=REFUSED,
                      hint="a query that may see no key has no weights (0 / 0): raise a ValueError that says so."))
    run_cases(refusing(fn), cases + drawn(_drawn_masked_cases), compare=compare_refusal(_compare_pair),
              what="attention under a mask", forbid=_KERNELS)


def _drawn_masked_cases(rng: np.random.Generator) -> list[Case]:
    """Planted inputs of random sizes: no mask, a causal mask with leading axes, a random mask with huge scores."""
    cases = []
    for kind in ("none", "causal", "random"):
        n_q, n_k = int(rng.integers(2, 7)), int(rng.integers(3, 7))
        d = int(rng.choice([k for k in range(2, 7) if k not in (n_q, n_k)]))
        lead = (int(rng.integers(2, 4)),) if kind == "causal" else ()
        if kind == "causal":
            n_k = n_q
        mask = None if kind == "none" else np.tril(np.ones((n_q, n_q), dtype=bool)) if kind == "causal" \
            else _random_mask(rng, n_q, n_k)
        shift = float(rng.uniform(800.0, 1000.0)) if kind == "random" else 0.0
        args, expected = _planted(rng, lead, n_q, n_k, d, int(rng.integers(2, 5)), mask, shift)
        cases.append(Case(_DRAWN + f"{kind} mask, {n_q} queries, {n_k} keys, leading axes {lead}",
                          args=args, expected=expected))
    (q, k, v, mask), _ = _planted(rng, (), n_q, n_k, d, 2, _random_mask(rng, n_q, n_k))
    mask[int(rng.integers(n_q))] = False
    cases.append(Case(_DRAWN + "a mask that leaves one query no key", args=(q, k, v, mask), expected=REFUSED))
    return cases


# --------------------------------------------------------------------------- the ceiling of any rule


def _rule_table(n: int, kind: str, members: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """An answer table ``answers[x, topic]`` of one family and its order-blind ceiling, by counting.

    Pairs are uniform over ``n**2``. A pair of two equal letters (probability 1/n) is always right.
    For two different letters the two orders either give the same answer (always right) or two
    different ones (right half the time, whatever the guess):

    - "topic if in S, else x" (the chapter's rule with S the capitals): the orders agree exactly when
      one letter of the pair is in S;
    - "x" and "(2x + topic) mod n": the orders never agree; "(x + topic) mod n", "max" and a constant:
      they always agree (ceiling 1).
    """
    x, topic = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    if kind == "member":
        s = len(members)
        in_s = np.isin(np.arange(n), members)
        answers = np.where(in_s[topic], topic, x)
        agree = 2 * s * (n - s) / n**2  # two different letters, exactly one of them in S
        differ = (s * (s - 1) + (n - s) * (n - s - 1)) / n**2
        return answers, 1 / n + agree + differ / 2
    if kind in ("x", "twice"):
        answers = x if kind == "x" else (2 * x + topic) % n
        return answers, 1 / n + (1 - 1 / n) / 2
    answers = {"sum": (x + topic) % n, "max": np.maximum(x, topic), "constant": np.full((n, n), n // 2)}[kind]
    return answers, 1.0


def check_blind_ceiling(fn: Callable[[np.ndarray], Any]) -> None:
    """Check ``blind_ceiling(answers)``: the accuracy of the best reader that knows the unordered pair
    ``{x, topic}`` but not its order, for a rule given as a table ``answers[x, topic]`` (n x n) over
    equally likely pairs. Each table's ceiling is counted by hand in :func:`_rule_table`."""
    half = lambda n: np.arange(n // 2)  # noqa: E731 (the first half of the letters, like the chapter's capitals)
    cases = []
    for name, n, kind, members, hidden, hint in [
        ("4 letters, the chapter's rule (the topic if it is one of the first 2, else x)", 4, "member", half(4),
         False, "16 equally likely pairs: the 4 pairs of one letter twice are always right; for two different "
                "letters look at the answers of both orders."),
        ("5 letters, the answer is always x", 5, "x", None, False,
         "x = a, topic = b and x = b, topic = a look the same to the reader but have different answers: "
         "the best guess is right half the time."),
        ("6 letters, the answer is max(x, topic)", 6, "max", None, False,
         "a symmetric rule gives both orders the same answer: the reader loses nothing."),
        ("7 letters, a constant answer", 7, "constant", None, False,
         "weigh each unordered pair by its probability: two different letters 2/n^2, one letter twice 1/n^2."),
        ("32 letters, the chapter's rule", 32, "member", half(32), False, ""),
        ("9 letters, the topic if it is one of letters {1, 4, 5}, else x", 9, "member", np.array([1, 4, 5]), True,
         ""),
        ("6 letters, (2 x + topic) mod 6", 6, "twice", None, True, ""),
    ]:
        answers, ceiling = _rule_table(n, kind, members)
        cases.append(Case(name, args=(answers,), expected=ceiling, hidden=hidden, hint=hint))
    run_cases(fn, cases + drawn(_drawn_ceiling_cases),
              compare=lambda got, exp: compare_number(got, exp, atol=1e-9, rtol=0),
              what="the order-blind ceiling of a rule", forbid=("deviating.experiments",))


def _drawn_ceiling_cases(rng: np.random.Generator) -> list[Case]:
    """Random alphabets and letter sets of the fixed cases' families (drawn when grading)."""
    cases = []
    for kind in ("member", "member", "x", "constant", "sum"):
        n = int(rng.integers(5, 40))
        members = rng.choice(n, size=int(rng.integers(1, n)), replace=False) if kind == "member" else None
        answers, ceiling = _rule_table(n, kind, members)
        perm = rng.permutation(n)  # rename the letters: the ceiling does not change
        cases.append(Case(_DRAWN + f"{n} letters, rule '{kind}'", args=(perm[answers][np.ix_(np.argsort(perm),
                                                                                             np.argsort(perm))],),
                          expected=ceiling))
    return cases


# --------------------------------------------------------------------------- accuracy by lean


def _gap_case(rng: np.random.Generator, edges: np.ndarray, counts: list[int], rights: list[int],
              outside: int = 0) -> tuple[tuple, tuple]:
    """Gaps placed in each bin (one exactly on its lower edge when it has any), ``rights[b]`` of
    ``counts[b]`` answers right, plus ``outside`` gaps at or beyond the last edge; returns the
    arguments and the expected (counts, accuracy), NaN for an empty bin."""
    gaps, correct = [], []
    for b, (n, r) in enumerate(zip(counts, rights)):
        low, high = edges[b], edges[b + 1]
        inside = list(rng.uniform(low, high, size=n))
        if n:
            inside[0] = low  # a gap on a lower edge belongs to the bin that starts there
        gaps += inside
        correct += [True] * r + [False] * (n - r)
    gaps += [edges[-1] + k * 0.01 for k in range(outside)]  # on or past the last edge: in no bin
    correct += [True] * outside
    order = rng.permutation(len(gaps))
    accuracy = np.array([r / n if n else np.nan for n, r in zip(counts, rights)])
    return (np.array(gaps)[order], np.array(correct)[order], edges), (np.array(counts), accuracy)


def _compare_bins(got: Any, expected: tuple) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (counts, accuracy), got {type(got).__name__}"
    for what, g, e in zip(("counts", "accuracy"), got, expected):
        problem = compare_arrays(g, e, atol=1e-12, rtol=0)
        if problem is not None:
            return f"{what}: {problem}"
    return None


def check_accuracy_by_gap(fn: Callable[..., Any]) -> None:
    """Check ``accuracy_by_gap(gap, correct, edges)`` -> ``(counts, accuracy)``: per bin
    ``[edges[b], edges[b + 1])``, how many answers fall in it and the share of them that is right
    (NaN for an empty bin); answers outside every bin are left out."""
    rng = np.random.default_rng(7)
    cases = []
    for name, edges, counts, rights, outside, hidden, hint in [
        ("two bins [0, 0.1) and [0.1, 0.5): 4 answers (3 right), then 2 (1 right)", [0.0, 0.1, 0.5], [4, 2], [3, 1],
         0, False, "count the answers in each bin and the right ones among them."),
        ("a gap exactly on an inner edge", [0.0, 0.05, 0.1], [3, 3], [0, 3], 0, False,
         "a bin holds its lower edge and not its upper one: low <= gap < high."),
        ("an empty bin in the middle", [0.0, 0.1, 0.2, 0.5], [2, 0, 3], [1, 0, 3], 0, False,
         "an empty bin has no accuracy: give NaN there (0/0), not 0 and not an error."),
        ("gaps at or past the last edge belong to no bin", [0.0, 0.25, 0.5], [3, 1], [1, 1], 2, False,
         "leave out the answers outside every bin: gap >= edges[-1]."),
        ("the chapter's four bins", [0.0, 0.05, 0.1, 0.2, 0.5], [5, 4, 0, 6], [2, 4, 0, 5], 1, True, ""),
    ]:
        args, expected = _gap_case(rng, np.array(edges), counts, rights, outside)
        cases.append(Case(name, args=args, expected=expected, hidden=hidden, hint=hint))
    gaps, correct, _ = cases[0].args
    cases.append(Case("edges that do not increase: [0, 0.2, 0.1, 0.5]", args=(gaps, correct, np.array([0, .2, .1, .5])),
                      expected=REFUSED, hint="bins need increasing edges: raise a ValueError naming the edges."))
    run_cases(refusing(fn), cases + drawn(_drawn_gap_cases), compare=compare_refusal(_compare_bins),
              what="accuracy by bin")


def _drawn_gap_cases(rng: np.random.Generator) -> list[Case]:
    """Random edges, counts and right answers, with an empty bin and gaps past the last edge (drawn when grading)."""
    cases = []
    for _ in range(2):
        n_bins = int(rng.integers(3, 7))
        edges = np.round(np.sort(rng.choice(np.arange(1, 100), size=n_bins, replace=False)) / 200, 3)
        edges = np.concatenate([[0.0], edges])
        counts = [int(c) for c in rng.integers(1, 8, size=n_bins)]
        counts[int(rng.integers(n_bins))] = 0
        rights = [int(rng.integers(0, c + 1)) for c in counts]
        args, expected = _gap_case(rng, edges, counts, rights, int(rng.integers(1, 4)))
        cases.append(Case(_DRAWN + f"{n_bins} bins, {sum(counts)} answers in them", args=args, expected=expected))
    gaps, correct, edges = cases[-1].args
    b = int(rng.integers(1, len(edges) - 1))
    bad = edges.copy()
    bad[b], bad[b + 1] = edges[b + 1], edges[b]  # two edges swapped
    cases.append(Case(_DRAWN + "two edges swapped", args=(gaps, correct, bad), expected=REFUSED))
    return cases
