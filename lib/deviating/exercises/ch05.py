"""Checks for chapter 05, "Induction heads: a circuit of two heads".

Every known answer is built by hand: patterns whose induction or previous-token weight is
set entry by entry, matrices whose product is known, and the planted model of
:mod:`deviating.planted`, whose heads are what they are by construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.ch05_patching import check_head_dla, check_patch_head
from deviating.exercises.drawn import MARK, drawn

_DETECTORS = ("headlab.analysis.detect", "headlab.analysis.atlas")

__all__ = ["check_induction_score", "check_find_previous_token_head", "check_k_composition",
           "check_induction_after_ablation", "check_patch_head", "check_head_dla"]


# ------------------------------------------------------------------------- induction score


def _pattern(pos: int, targets: dict[int, dict[int, float]]) -> np.ndarray:
    """A causal ``(pos, pos)`` pattern: row ``i`` puts ``targets[i]`` where given and the rest of
    its weight on key 0 (every row sums to 1)."""
    p = np.zeros((pos, pos))
    for i in range(pos):
        row = targets.get(i, {})
        for j, w in row.items():
            if j > i:
                raise ValueError("a causal row cannot attend forward")
            p[i, j] += w
        p[i, 0] += 1.0 - sum(row.values())
    return p


def _induction_cases() -> list[Case]:
    B, a, b, c, x, y = 9, 1, 2, 3, 4, 5
    abc = np.array([B, a, b, c, a, b, c])  # eligible queries 4, 5, 6 -> keys 2, 3, 4
    perfect = _pattern(7, {4: {2: 1.0}, 5: {3: 1.0}, 6: {4: 1.0}})
    previous = _pattern(7, {i: {i - 1: 1.0} for i in range(1, 7)})
    uniform = np.tril(np.ones((7, 7))) / np.arange(1, 8)[:, None]
    thrice = np.array([B, a, x, a, y, a])  # query 3: j = 1 -> key 2; query 5: most recent j = 3 -> key 4
    first_copy = _pattern(6, {3: {2: 1.0}, 5: {2: 1.0}})  # query 5 looks after the *first* a
    doubled = np.array([B, a, b, a, a])  # query 3: j = 1 -> key 2; query 4: j = 3 is i - 1, so j = 1 -> key 2
    half = _pattern(5, {3: {2: 0.5}, 4: {2: 0.25, 4: 0.75}})
    # queries 4 -> key 2, 5 -> key 3, 6 -> key 5 (after the a at 4, not the one at 1), 7 -> key 4
    mixed = _pattern(8, {4: {2: 0.7}, 5: {3: 0.2}, 6: {5: 0.5, 2: 0.5}, 7: {4: 1.0}})
    return [
        Case("a perfect induction pattern on [B a b c a b c]", args=(perfect, abc), expected=1.0,
             hint="query i whose token appeared at j < i - 1 should look at key j + 1 (what followed it)."),
        Case("a previous-token pattern on [B a b c a b c]", args=(previous, abc), expected=0.0,
             hint="the induction target of query i is j + 1, the token after the earlier occurrence, "
                  "not i - 1."),
        Case("uniform causal attention on [B a b c a b c]", args=(uniform, abc),
             expected=(1 / 5 + 1 / 6 + 1 / 7) / 3,
             hint="average over the eligible queries only (4, 5, 6), not over every position."),
        Case("a token seen twice before: [B a x a y a], the last a looks after the first a",
             args=(first_copy, thrice), expected=(1.0 + 0.0) / 2,
             hint="take the *most recent* earlier occurrence j of the token."),
        Case("an immediately repeated token: [B a b a a]", args=(half, doubled), expected=(0.5 + 0.25) / 2,
             hint="an occurrence at j = i - 1 does not count (j < i - 1): for the last a, j = 1."),
        Case("[B a b c a b a c]", args=(mixed, np.array([B, a, b, c, a, b, a, c])),
             expected=(0.7 + 0.2 + 0.5 + 1.0) / 4, hidden=True),
    ]



def check_induction_score(fn: Callable[[np.ndarray, np.ndarray], float]) -> None:
    """Check ``fn(pattern, tokens)``: the induction score of one head on one sequence.

    ``pattern`` ``(pos, pos)``, ``tokens`` ``(pos,)``; the answer is one number.
    """
    run_cases(fn, _induction_cases() + drawn(_drawn_induction_cases), compare=compare_number,
              forbid=_DETECTORS)


def _drawn_induction_cases(rng: np.random.Generator) -> list[Case]:
    """``[B, s_1..s_n, s_1..s_m, s_m, s_1]`` with random causal rows: copy query ``n + 1 + k`` looks
    after ``k + 1``; the immediate ``s_m`` after ``m`` (not after itself); the third ``s_1`` after its
    second occurrence, ``n + 1``. The score is the mean of the pattern there."""
    cases = []
    for _ in range(2):
        n = int(rng.integers(4, 10))
        m = int(rng.integers(2, n + 1))
        span = rng.permutation(np.arange(1, 40))[:n]
        tokens = np.concatenate([[0], span, span[:m], [span[m - 1], span[0]]])
        targets = {n + 1 + k: k + 2 for k in range(m)} | {n + m + 1: m + 1, n + m + 2: n + 2}
        pattern = np.tril(rng.uniform(0.05, 1.0, (len(tokens), len(tokens))))
        pattern /= pattern.sum(1, keepdims=True)
        cases.append(Case(MARK + f": a span of {n}, {m} repeated", args=(pattern, tokens),
                          expected=float(np.mean([pattern[i, j] for i, j in targets.items()]))))
    return cases


# ------------------------------------------------------------------ the previous-token head


def _previous_token_cases() -> list[Case]:
    pos = 8
    uniform = np.tril(np.ones((pos, pos))) / np.arange(1, pos + 1)[:, None]
    exact = _pattern(pos, {i: {i - 1: 1.0} for i in range(1, pos)})
    first = _pattern(pos, {})  # everything on key 0: weight 1 on i - 1 at query 1 only
    itself = np.eye(pos)
    soft = _pattern(pos, {i: {i - 1: 0.6} for i in range(1, pos)})
    spiky = _pattern(pos, {i: {i - 1: 1.0} for i in range(1, pos) if i % 2 == 0})  # every other row

    def stack(grid):
        return np.array([[p for p in row] for row in grid])

    return [
        Case("2 layers x 2 heads, one exact previous-token head at 1.0, the rest uniform",
             args=(stack([[uniform, uniform], [exact, uniform]]),), expected=(1, 0)),
        Case("a first-token head (weight 1 on key 0, which is the previous token of query 1) beside "
             "a previous-token head at 0.1 with weight 0.6", args=(stack([[first, soft]]),), expected=(0, 1),
             hint="average the weight on key i - 1 over every query i >= 1."),
        Case("a head attending to itself, one attending to the previous token on every other row, "
             "and one with weight 0.6 on every row (at 2.1)",
             args=(stack([[itself, uniform], [uniform, spiky], [uniform, soft]]),), expected=(2, 1),
             hint="the head that is right on average wins, not the one with the sharpest rows."),
        Case("3 layers x 2 heads; the previous-token head is in the last layer",
             args=(stack([[spiky, uniform], [itself, first], [uniform, exact]]),), expected=(2, 1), hidden=True),
    ]


def _same_head(got, expected) -> str | None:
    try:
        layer, head = (int(v) for v in got)
    except (TypeError, ValueError):
        return f"expected a (layer, head) pair, got {got!r}"
    if (layer, head) != tuple(expected):
        return f"expected head {expected[0]}.{expected[1]}, got {layer}.{head}"
    return None


def check_find_previous_token_head(fn: Callable[[np.ndarray], tuple[int, int]]) -> None:
    """Check ``fn(patterns)``: the ``(layer, head)`` with the highest previous-token score.

    ``patterns``: ``(n_layers, n_heads, pos, pos)``, one sequence.
    """
    run_cases(fn, _previous_token_cases() + drawn(_drawn_previous_token_cases), compare=_same_head,
              forbid=_DETECTORS)


def _rows(rng: np.random.Generator, pos: int, below: np.ndarray, diagonal: float | None = None) -> np.ndarray:
    """A causal pattern whose row ``i >= 1`` puts ``below[i]`` on key ``i - 1`` (and ``diagonal`` on
    key ``i`` if given), the rest at random on its other keys."""
    p = np.zeros((pos, pos))
    p[0, 0] = 1.0
    for i in range(1, pos):
        fixed = {i - 1: below[i]} | ({i: diagonal} if diagonal is not None else {})
        rest = [j for j in range(i + 1) if j not in fixed]
        if not rest:  # row 1 with a set diagonal: two keys, both given
            fixed[i] = 1.0 - below[i]
        else:
            w = rng.uniform(0.1, 1.0, len(rest))
            p[i, rest] = (1.0 - sum(fixed.values())) * w / w.sum()
        for j, v in fixed.items():
            p[i, j] = v
    return p


def _drawn_previous_token_cases(rng: np.random.Generator) -> list[Case]:
    """A random grid with the answer planted in a layer >= 1 (weight w on every row's previous token),
    a layer-0 head at 1.0 on every third row and 0.1 elsewhere (mean below w), a head that attends to
    itself, and the other heads at most 0.3 on the previous token."""
    n_layers, n_heads, pos = int(rng.integers(2, 4)), int(rng.integers(3, 5)), int(rng.integers(7, 12))
    grid = np.array([[_rows(rng, pos, rng.uniform(0.0, 0.3, pos)) for _ in range(n_heads)]
                     for _ in range(n_layers)])
    layer = int(rng.integers(1, n_layers))
    head = int(rng.choice([h for h in range(n_heads) if h != layer]))
    grid[layer, head] = _rows(rng, pos, np.full(pos, rng.uniform(0.55, 0.7)))
    grid[0, int(rng.integers(n_heads))] = _rows(rng, pos, np.where(np.arange(pos) % 3 == 0, 1.0, 0.1))
    spots = [(l, h) for l in range(n_layers) for h in range(n_heads) if l > 0 and (l, h) != (layer, head)]
    self_l, self_h = spots[int(rng.integers(len(spots)))]
    grid[self_l, self_h] = _rows(rng, pos, np.full(pos, 0.02), diagonal=0.95)
    return [Case(MARK + f": {n_layers} layers x {n_heads} heads, {pos} positions", args=(grid,),
                 expected=(layer, head))]


# --------------------------------------------------------------------------- K-composition


def _k_composition_cases() -> list[Case]:
    e = np.eye(6)

    def col(*idx):
        return e[:, list(idx)]  # (d_model, d_head)

    def row(*idx):
        return e[list(idx)]  # (d_head, d_model)

    k = 3
    identity_q, identity_k = col(0, 1, 2), col(3, 4, 5)
    identity_v, identity_o = col(0, 1, 2), row(3, 4, 5)  # copies coordinates 0-2 into 3-5
    return [
        Case("the later key reads coordinate 1, which the earlier head writes (rank one)",
             args=(col(2), col(1), col(0), row(1)), expected=1.0,
             hint="K-composition: ||W_QK W_OV^T||_F / (||W_QK||_F ||W_OV||_F) with W_QK = W_Q W_K^T "
                  "(later head) and W_OV = W_V W_O (earlier head)."),
        Case("the later key reads coordinate 1, the earlier head writes coordinate 4",
             args=(col(2), col(1), col(0), row(4)), expected=0.0),
        Case("the later *query* reads what the earlier head writes, its key reads something else",
             args=(col(1), col(3), col(0), row(1)), expected=0.0,
             hint="that is Q-composition (W_OV W_QK); K-composition is about the key side."),
        Case("the later key reads coordinate 1, and the earlier head *reads* coordinate 1 (writes 5)",
             args=(col(2), col(1), col(1), row(5)), expected=0.0,
             hint="W_OV maps what the head reads to what it writes; transpose it: W_QK W_OV^T."),
        Case(f"the earlier head copies {k} coordinates to where the later keys read them "
             f"(expected 1/sqrt({k}))", args=(identity_q, identity_k, identity_v, identity_o),
             expected=1 / math.sqrt(k), hint="use Frobenius norms (the square root of the sum of squares)."),
        Case("the same, every matrix scaled by 10", args=(10 * identity_q, 10 * identity_k, 10 * identity_v,
                                                          10 * identity_o), expected=1 / math.sqrt(k),
             hint="divide by the norms of W_QK and W_OV: the score does not depend on scale."),
        Case("a later key reading two coordinates, an earlier head writing one of them and another",
             args=(col(0, 1), col(2, 3), col(4, 5), row(2, 5)), expected=0.5, hidden=True),
    ]


def check_k_composition(fn: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], float]) -> None:
    """Check ``fn(W_Q, W_K, W_V, W_O)``: the K-composition of a later head (``W_Q``, ``W_K``
    ``(d_model, d_head)``) reading an earlier head (``W_V`` ``(d_model, d_head)``, ``W_O``
    ``(d_head, d_model)``)."""
    run_cases(fn, _k_composition_cases() + drawn(_drawn_k_composition_cases), compare=compare_number,
              forbid=("headlab.analysis.circuits",))


def _drawn_k_composition_cases(rng: np.random.Generator) -> list[Case]:
    """One-hot heads turned by random orthogonal maps and scaled: the later key reads ``a`` coordinates
    (its query ``a`` others), the earlier head reads ``b`` coordinates and writes ``b`` others, ``k`` of
    them where the key reads. The score, sqrt(k / (a b)), survives the turns and the scales."""
    cases = []
    for _ in range(2):
        d_head, d_model = 4, 16
        a, b = int(rng.integers(1, 5)), int(rng.integers(2, 5))
        k = int(rng.integers(1, min(a, b) + 1))
        c = rng.permutation(d_model)  # disjoint pools: shared, key only, write only, query, read
        shared, key, write = c[:k], c[k:a], c[a:a + b - k]
        query, read = c[a + b - k:2 * a + b - k], c[2 * a + b - k:2 * a + 2 * b - k]
        W = [np.zeros((d_model, d_head)) for _ in range(3)] + [np.zeros((d_head, d_model))]
        for i, (q, kk) in enumerate(zip(query, np.r_[shared, key])):
            W[0][q, i], W[1][kk, i] = 1.0, 1.0
        for i, (r, w) in enumerate(zip(read, np.r_[shared, write])):
            W[2][r, i], W[3][i, w] = 1.0, 1.0
        R = np.linalg.qr(rng.normal(size=(d_model, d_model)))[0]
        S, T = (np.linalg.qr(rng.normal(size=(d_head, d_head)))[0] for _ in range(2))
        scale = rng.uniform(0.3, 3.0, 4)
        args = (scale[0] * R @ W[0] @ S, scale[1] * R @ W[1] @ S, scale[2] * R @ W[2] @ T,
                scale[3] * T.T @ W[3] @ R.T)
        cases.append(Case(MARK + f": turned one-hot heads, a = {a}, b = {b}", args=args,
                          expected=float(np.sqrt(k / (a * b)))))
    return cases


# -------------------------------------------------------------- induction after an ablation


def check_induction_after_ablation(fn: Callable) -> None:
    """Check ``fn(hm, tokens, ablated, head)`` on the planted model of ``deviating.planted``:
    the mean induction score of ``head`` over the batch ``tokens`` with the heads ``ablated``
    zero-ablated (an empty list: the clean model)."""
    import torch

    from deviating.exercises.fixtures import (
        planted_first_token_writer, repeated_batch, uniform_induction_score,
    )
    from deviating.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_model

    hm = planted_model(d_vocab=16, n_ctx=21)
    writer = planted_first_token_writer(d_vocab=16, n_ctx=21)
    # two different inputs: a span of 10 repeated, and 15 tokens of which the first 5 come back
    rows = [(10, 10), (15, 5)]
    tokens = torch.as_tensor(repeated_batch(rows))
    # Without the previous-token head, the induction head's keys are all alike: it attends
    # uniformly, 1 / (i + 1) on each key; each input has its own eligible queries.
    uniform = float(np.mean([uniform_induction_score(*r) for r in rows]))
    rows_b = [(12, 8), (14, 6)]
    tokens_b = torch.as_tensor(repeated_batch(rows_b, seed=1))
    cases = [
        Case("the clean planted model, induction head 1.0", args=(hm, tokens, [], INDUCTION_HEAD),
             expected=1.0, hint="with nothing to ablate, run the model as it is (hm.ablate needs at "
                                "least one head)."),
        Case("previous-token head 0.0 ablated, induction head 1.0, two different inputs",
             args=(hm, tokens, [PREVIOUS_TOKEN_HEAD], INDUCTION_HEAD), expected=uniform,
             hint="capture the patterns *inside* `with hm.ablate(...)`, and average the per-input scores "
                  "over every input of the batch (not the first input only)."),
        Case("first-token head 0.1 ablated (it writes nothing), induction head 1.0",
             args=(hm, tokens, [FIRST_TOKEN_HEAD], INDUCTION_HEAD), expected=1.0),
        Case("induction head 1.0 ablated, previous-token head 0.0 (which attends to i - 1, never to "
             "the induction target)", args=(hm, tokens, [INDUCTION_HEAD], PREVIOUS_TOKEN_HEAD), expected=0.0,
             hint="score the head you are asked about: cache.pattern(layer)[:, head]."),
        Case("a variant where 0.1 writes the first token into every query of 1.0; 0.1 ablated",
             args=(writer, tokens, [FIRST_TOKEN_HEAD], INDUCTION_HEAD), expected=1.0,
             hint="zero ablation (hm.ablate's default mode): with 0.1's write gone, 1.0 finds its key "
                  "again. A mean ablation would put the first token back (the mean of what 0.1 writes)."),
        Case("the same variant, other inputs, 0.0 ablated", args=(writer, tokens_b, [PREVIOUS_TOKEN_HEAD],
                                                                  INDUCTION_HEAD),
             expected=float(np.mean([uniform_induction_score(*r) for r in rows_b])), hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_ablation_cases), compare=lambda got, exp: compare_number(
        got, exp, atol=1e-4, rtol=0), forbid=("headlab.analysis.circuits", "headlab.analysis.sweep",
                                               "headlab.report"))


def _drawn_ablation_cases(rng: np.random.Generator) -> list[Case]:
    """Two random rows of one random length (different spans, so different uniform scores and query
    counts): 1.0 falls to the uniform score without 0.0; the writer variant gets 1.0 back without 0.1."""
    import torch

    from deviating.exercises.fixtures import planted_first_token_writer, repeated_batch, uniform_induction_score
    from deviating.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_model

    length = int(rng.integers(12, 21))
    spans = [a for a in range(1, 16) if 0 < length - 1 - a <= a]
    a1, a2 = (int(x) for x in rng.choice(spans, size=2, replace=False))
    rows = [(a1, length - 1 - a1), (a2, length - 1 - a2)]
    tokens = torch.as_tensor(repeated_batch(rows, seed=int(rng.integers(2**31))))
    uniform = float(np.mean([uniform_induction_score(*r) for r in rows]))
    hm, writer = planted_model(d_vocab=16, n_ctx=21), planted_first_token_writer(d_vocab=16, n_ctx=21)
    return [Case(MARK + ": 0.0 ablated", args=(hm, tokens, [PREVIOUS_TOKEN_HEAD], INDUCTION_HEAD),
                 expected=uniform),
            Case(MARK + ": the writer variant, 0.1 ablated", args=(writer, tokens, [FIRST_TOKEN_HEAD],
                                                                  INDUCTION_HEAD), expected=1.0)]
