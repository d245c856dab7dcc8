"""Checks for chapter 6, "The uneven division of work"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.ch06_gate import check_gate_importance
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_mean_ablation", "check_most_redundant_pair", "check_gini", "check_gate_importance",
           "check_resample_ablation"]

_IMPORTANCE = ("headlab.analysis.importance", "headlab.analysis.sweep", "headlab.heads")


def _mean_ablation_cases() -> list[Case]:
    z = np.arange(2 * 3 * 2 * 2, dtype=float).reshape(2, 3, 2, 2)  # (batch, pos, head, d_head)
    ref = np.array([[[1.0, 3.0], [10.0, 10.0]],
                    [[3.0, 5.0], [20.0, 30.0]]])  # (n_tokens, head, d_head): head 0 mean [2, 4]
    out0 = z.copy()
    out0[:, :, 0, :] = [2.0, 4.0]
    out1 = z.copy()
    out1[:, :, 1, :] = [15.0, 20.0]
    # three heads of d_head = 3, three reference tokens: head 2's mean is [1, -2, 5]
    z3 = np.arange(1 * 2 * 3 * 3, dtype=float).reshape(1, 2, 3, 3) - 7.0
    ref3 = np.zeros((3, 3, 3))
    ref3[:, 2, :] = [[0.0, -3.0, 5.0], [1.0, -2.0, 4.0], [2.0, -1.0, 6.0]]
    ref3[:, 0, :] = 100.0  # other heads' references must not leak in
    out3 = z3.copy()
    out3[:, :, 2, :] = [1.0, -2.0, 5.0]
    z4 = -np.arange(2 * 1 * 3 * 2, dtype=float).reshape(2, 1, 3, 2)
    ref4 = np.tile(np.array([[4.0, 0.0], [1.0, 1.0], [-2.0, 6.0]]), (5, 1, 1))
    ref4[0, 1] = [6.0, -4.0]
    out4 = z4.copy()
    out4[:, :, 1, :] = [2.0, 0.0]  # (6 + 4 * 1) / 5, (-4 + 4 * 1) / 5
    return [
        Case("head 0 of a 2-head layer", args=(z, ref, 0), expected=out0, unchanged=True,
             hint="replace z[:, :, head, :] by the mean of reference[:, head, :] over the reference tokens, "
                  "in a copy of z (z itself must not change)."),
        Case("head 1, the other heads untouched", args=(z, ref, 1), expected=out1, unchanged=True,
             hint="only the ablated head's slice changes; every other head keeps its own output."),
        Case("head 2 of 3, d_head = 3, 3 reference tokens", args=(z3, ref3, 2), expected=out3, unchanged=True,
             hint="average over the reference tokens (axis 0) only, keeping the d_head coordinates apart; "
                  "the mean comes from the reference, not from z (that would be a different ablation)."),
        Case("head 1 of 3, two inputs, 5 reference tokens", args=(z4, ref4, 1), expected=out4,
             unchanged=True, hidden=True),
    ]


def check_mean_ablation(fn: Callable) -> None:
    """``fn(z, reference, head)``: ``z`` ``(batch, pos, n_heads, d_head)``, ``reference``
    ``(n_tokens, n_heads, d_head)`` (the head outputs on every real token of a reference set);
    returns a new ``z`` whose ``head`` slice is the reference mean, and must not modify ``z``."""
    run_cases(fn, _mean_ablation_cases() + drawn(_drawn_mean_ablation_cases), what="mean ablation",
              forbid=_IMPORTANCE)


def _drawn_mean_ablation_cases(rng: np.random.Generator) -> list[Case]:
    """Random outputs and a reference whose head mean is a drawn vector m (its deviations sum to 0)."""
    cases = []
    for _ in range(2):
        batch, pos, n_heads, d_head, n = (int(x) for x in rng.integers(2, 6, size=5))
        head = int(rng.integers(n_heads))
        z = rng.normal(size=(batch, pos, n_heads, d_head))
        reference = rng.normal(3.0, 2.0, size=(n, n_heads, d_head))
        m = rng.normal(size=d_head)
        reference[:, head] = m + reference[:, head] - reference[:, head].mean(0)
        out = z.copy()
        out[:, :, head] = m
        cases.append(Case(MARK + f": head {head} of {n_heads}, {n} reference tokens", args=(z, reference, head),
                          expected=out, unchanged=True))
    return cases


def _pair_cases() -> list[Case]:
    a, b, c, d = (0, 0), (0, 1), (1, 0), (1, 1)
    singles = {a: 0.5, b: 0.1, c: 0.3, d: 0.0}
    pairs = {(a, b): 0.6, (a, c): 0.7, (b, d): 0.9, (c, d): 0.3}
    # interactions: (a,b) 0.0, (a,c) -0.1, (b,d) 0.8, (c,d) 0.0
    singles2 = {a: 1.0, b: 1.0, c: 0.2}
    pairs2 = {(a, b): 2.5, (a, c): 1.0, (b, c): 1.3}  # 0.5, -0.2, 0.1
    # the largest pair effect (a, b) is nearly additive; (c, d) is the redundant pair; (a, d)
    # overlaps strongly (a large *negative* interaction)
    singles3 = {a: 1.0, b: 1.0, c: 0.1, d: 0.1}
    pairs3 = {(a, b): 2.2, (c, d): 0.9, (a, d): 0.1, (b, c): 1.1}  # 0.2, 0.7, -1.0, 0.0
    singles4 = {a: 0.3, b: 0.6, c: 0.0, d: 0.4}
    pairs4 = {(a, b): 0.5, (a, c): 0.2, (b, d): 1.4, (c, d): 0.9, (a, d): 0.3}  # -0.4, -0.1, 0.4, 0.5, -0.4
    return [
        Case("two heads that do little alone but much together", args=(singles, pairs), expected=(b, d),
             hint="interaction = effect(pair) - effect(a) - effect(b); take the largest, not the largest "
                  "pair effect."),
        Case("the redundant pair with the largest interaction", args=(singles2, pairs2), expected=(a, b),
             hint="(a, b) removes 2.5 against 1.0 + 1.0 alone: interaction 0.5."),
        Case("the largest pair effect (2.2) is not the most redundant pair, and one pair overlaps",
             args=(singles3, pairs3), expected=(c, d),
             hint="(0.0, 0.1) costs 2.2 together but 1.0 + 1.0 alone (interaction 0.2); (1.0, 1.1) costs 0.9 "
                  "against 0.1 + 0.1 (0.7). Take the largest signed interaction: a large negative one "
                  "(heads that overlap) is the opposite of redundant."),
        Case("a pair that multiplies a tiny effect against one that adds a large one",
             args=({a: 0.01, b: 0.01, c: 1.0, d: 1.0}, {(a, b): 0.1, (c, d): 2.5}), expected=(c, d),
             hint="the interaction is a difference, effect(a+b) - effect(a) - effect(b): (1.0, 1.1) adds 0.5 "
                  "(2.5 against 2.0); (0.0, 0.1) adds 0.08, although 0.1 is five times 0.02."),
        Case("five pairs", args=(singles4, pairs4), expected=(c, d), hidden=True),
    ]


def check_most_redundant_pair(fn: Callable) -> None:
    """``fn(singles, pairs)``: ``singles`` maps each head to its single-ablation effect, ``pairs``
    maps ``(a, b)`` to the effect of ablating both; returns the pair with the largest interaction
    ``effect(a+b) - effect(a) - effect(b)``."""
    def compare(got, expected):
        try:
            got = tuple(tuple(int(x) for x in h) for h in got) if got is not None else None
        except (TypeError, ValueError):
            return f"expected a pair of (layer, head) tuples, got {got!r}"
        if got == expected or got == expected[::-1]:
            return None
        return f"expected the pair {expected}, got {got}"

    run_cases(fn, _pair_cases() + drawn(_drawn_pair_cases), compare=compare, what="redundant pair",
              forbid=_IMPORTANCE)


def _drawn_pair_cases(rng: np.random.Generator) -> list[Case]:
    """Five pairs of ten random heads: the answer (singles 1, interaction 0.3-0.45), a pair of tiny
    singles with the largest ratio, a pair with the largest effect, an overlapping pair (interaction
    -1.8) and a pair whose one single is tiny; each mistake picks another pair than the answer."""
    heads = [(int(h) // 8, int(h) % 8) for h in rng.choice(32, size=10, replace=False)]
    jitter = rng.uniform(0.0, 0.01, 5)
    built = [(1.0, 1.0, 2.0 + rng.uniform(0.3, 0.45)), (0.01, 0.01, 0.12 + jitter[0]),
             (1.5, 1.5, 3.05 + jitter[1]), (1.0, 1.0, 0.2 + jitter[2]), (0.05, 1.4, 1.5 + jitter[3])]
    singles, pairs = {}, {}
    for k in rng.permutation(5):
        a, b = heads[2 * k], heads[2 * k + 1]
        singles[a], singles[b], pairs[(a, b)] = built[k]
    return [Case(MARK + ": five pairs of ten heads", args=(singles, pairs), expected=(heads[0], heads[1]))]


def _gini_cases() -> list[Case]:
    return [
        Case("every head equally important", args=(np.array([1.0, 1.0, 1.0, 1.0]),), expected=0.0,
             hint="equal shares: the Lorenz curve is the diagonal, Gini 0."),
        Case("one head does everything (n = 4)", args=(np.array([0.0, 0.0, 0.0, 5.0]),), expected=0.75,
             hint="the maximum for n heads is 1 - 1/n."),
        Case("two heads, effects 1 and 3", args=(np.array([3.0, 1.0]),), expected=0.25,
             hint="Gini = sum_i sum_j |x_i - x_j| / (2 n^2 mean); the |.| matters: without it the sum is 0."),
        Case("negative effects carry no share", args=(np.array([-2.0, 0.0, 4.0]),), expected=2.0 / 3.0,
             hint="clip negative effects to 0 first: a head whose removal helps does none of the work."),
        Case("effects 0, 1, 2, 3", args=(np.array([2.0, 0.0, 3.0, 1.0]),), expected=5.0 / 12.0, hidden=True),
    ]


def check_gini(fn: Callable) -> None:
    """``fn(effects)``: the Gini coefficient of the positive parts of a 1-d array of head effects."""
    run_cases(fn, _gini_cases() + drawn(_drawn_gini_cases),
              compare=lambda got, exp: compare_number(got, exp, atol=1e-9, rtol=1e-9),
              what="the Gini coefficient", forbid=(*_IMPORTANCE, "headlab.stats"))


def _drawn_gini_cases(rng: np.random.Generator) -> list[Case]:
    """Effects whose Gini follows from their construction (drawn when grading: :mod:`.drawn`): n equal
    shares give 0; k equal shares among n heads, the rest 0 or negative, give (n - k) / n; p heads at a and
    q heads at b > a give p q (b - a) / (n (p a + q b))."""
    n = int(rng.integers(3, 12))
    k = int(rng.integers(1, n))
    c = rng.uniform(0.5, 5.0)
    shares = rng.permutation(np.r_[np.full(k, c), np.zeros(n - k)])
    negative = rng.permutation(np.r_[np.full(k, c), -rng.uniform(0.1, 3.0, n - k)])
    p, q = (int(x) for x in rng.integers(1, 6, size=2))
    a = rng.uniform(0.5, 2.0)
    b = a + rng.uniform(0.5, 3.0)
    two = rng.permutation(np.r_[np.full(p, a), np.full(q, b)])
    return [
        Case(MARK + f": {n} equal shares", args=(np.full(n, rng.uniform(0.5, 5.0)),), expected=0.0),
        Case(MARK + f": {k} equal shares among {n} heads", args=(shares,), expected=(n - k) / n),
        Case(MARK + f": {k} equal shares, {n - k} negative effects", args=(negative,), expected=(n - k) / n),
        Case(MARK + f": {p} heads at one effect, {q} at a larger one", args=(two,),
             expected=p * q * (b - a) / ((p + q) * (p * a + q * b))),
    ]


def _coded(batch: int, pos: int, n_heads: int, d_head: int, sign: float = 1.0) -> np.ndarray:
    """``z[b, s, h, t] = sign * (1000 b + 100 s + 10 h + t + 1)``: every entry says where it stands."""
    return sign * np.fromfunction(lambda b, s, h, t: 1000 * b + 100 * s + 10 * h + t + 1,
                                  (batch, pos, n_heads, d_head))


def _resampled(batch: int, pos: int, n_heads: int, d_head: int, head: int) -> np.ndarray:
    """The answer for ``_coded`` inputs: the donor's entry (negative) where h == head, z's elsewhere."""
    return np.fromfunction(lambda b, s, h, t: np.where(h == head, -1.0, 1.0) * (1000 * b + 100 * s + 10 * h + t + 1),
                           (batch, pos, n_heads, d_head))


def _resample_mistakes(z, z_other, head) -> dict[str, np.ndarray]:
    """What the common mistakes return (only to name a wrong answer)."""
    z, z_other = np.asarray(z, float), np.asarray(z_other, float)
    out = {}

    def put(what, value):
        a = z.copy()
        a[:, :, head, :] = value
        out[what] = a

    put("the mean of the donors' outputs (that is mean ablation), not each input's own donor",
        z_other[:, :, head, :].mean(axis=0))
    put("the donors' other head: take head `head` of z_other, the same head",
        z_other[:, :, (head + 1) % z.shape[2], :])
    put("the donor's output at another position: keep the position, take only the input from elsewhere",
        z_other[:, ::-1, head, :])
    put("the donor's first position at every position", z_other[:, :1, head, :])
    put("z's own outputs shuffled, not the donors'", z[::-1, :, head, :])
    return out


def _resample_cases() -> list[Case]:
    z, other = _coded(2, 3, 2, 2), _coded(2, 3, 2, 2, -1.0)
    z3, other3 = _coded(3, 4, 3, 2), _coded(3, 4, 3, 2, -1.0)
    return [
        Case("2 inputs, 3 positions, head 0 of 2", args=(z, other, 0), expected=_resampled(2, 3, 2, 2, 0),
             unchanged=True,
             hint="z[b, s, h, t] = 1000 b + 100 s + 10 h + t + 1 and z_other is the same with a minus sign: "
                  "the answer holds z_other's (negative) entries at head 0, z's everywhere else."),
        Case("the same inputs, head 1", args=(z, other, 1), expected=_resampled(2, 3, 2, 2, 1), unchanged=True,
             hint="only the chosen head changes; the other heads keep the clean outputs."),
        Case("3 inputs, 4 positions, head 2 of 3", args=(z3, other3, 2), expected=_resampled(3, 4, 3, 2, 2),
             unchanged=True,
             hint="input b takes the output of input b of z_other at the same position s."),
        Case("4 inputs, 2 positions, head 1 of 4, d_head 3",
             args=(_coded(4, 2, 4, 3), _coded(4, 2, 4, 3, -1.0), 1), expected=_resampled(4, 2, 4, 3, 1),
             unchanged=True, hidden=True),
    ]


def check_resample_ablation(fn: Callable) -> None:
    """``fn(z, z_other, head)``: ``z`` and ``z_other`` ``(batch, pos, n_heads, d_head)``, one layer's
    head outputs on the inputs and on other inputs (row b of ``z_other`` is row b's donor); returns a
    new ``z`` whose ``head`` slice is the donors' ``head`` slice, position by position."""
    cases = _resample_cases()
    by_id = {id(c.expected): c.args for c in cases}

    def compare(got, expected):
        problem = compare_arrays(got, expected, atol=0, rtol=0)
        if problem is not None:
            known = _resample_mistakes(*by_id[id(expected)]) if id(expected) in by_id else {}
            for what, answer in known.items():
                if compare_arrays(got, answer, atol=0, rtol=0) is None:
                    return f"{problem}; this is the answer with {what}"
        return problem

    run_cases(fn, cases + drawn(_drawn_resample_cases), compare=compare, what="resample ablation",
              forbid=_IMPORTANCE)


def _drawn_resample_cases(rng: np.random.Generator) -> list[Case]:
    """Random outputs and donors: the answer is z with the donors' slice of the head put in."""
    cases = []
    for _ in range(2):
        batch, pos, n_heads, d_head = (int(x) for x in rng.integers(2, 6, size=4))
        head = int(rng.integers(n_heads))
        z, z_other = rng.normal(size=(2, batch, pos, n_heads, d_head))
        out = z.copy()
        out[:, :, head] = z_other[:, :, head]
        cases.append(Case(MARK + f": head {head} of {n_heads}", args=(z, z_other, head), expected=out,
                          unchanged=True))
    return cases
