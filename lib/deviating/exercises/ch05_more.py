"""Checks for chapter 05's tool-building exercises: the circuit by ablation, the composition grid,
the seen-token guess and the jump of a training curve.

Every known answer follows from a construction: the planted model of :mod:`deviating.planted`
(heads that are what they are by hand), one-hot heads turned by random orthogonal maps, token
sequences whose distinct tokens are counted as they are built, and curves drawn with a planted jump.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_ablation_drops", "check_composition_grid", "check_seen_token_guess", "check_find_jump"]

_CIRCUITS = ("headlab.analysis.circuits", "deviating.analysis.circuit_search", "headlab.analysis.sweep",
             "headlab.roles")


# ------------------------------------------------------------------ the circuit by ablation


def _drops_cases(rows_list: list, seed: int, label: str) -> list[Case]:
    """The planted model and its writer variant on rows of :func:`repeated_batch`: 0.0 blinds 1.0 (down
    to the uniform score u); in the variant, 1.0 splits three ways (1/3) and gets 1 back without 0.1."""
    import torch

    from deviating.exercises.fixtures import planted_first_token_writer, repeated_batch, uniform_induction_score
    from deviating.planted import planted_model

    tokens = torch.as_tensor(repeated_batch(rows_list, seed=seed))
    u = float(np.mean([uniform_induction_score(*r) for r in rows_list]))
    plain, writer = planted_model(d_vocab=16, n_ctx=21), planted_first_token_writer(d_vocab=16, n_ctx=21)
    return [Case(f"{label}the planted model", args=(plain, tokens), expected=np.array([[1 - u, 0.0], [0.0, 0.0]])),
            Case(f"{label}the variant where 0.1 writes the first token", args=(writer, tokens),
                 expected=np.array([[1 / 3 - u, 0.0], [1 / 3 - 1, 0.0]]))]


def check_ablation_drops(fn: Callable) -> None:
    """Check ``fn(hm, tokens)``: entry ``[e, l]`` is how far the mean induction score of head ``1.l``
    falls when head ``0.e`` is zero-ablated (clean minus ablated), on the planted model."""
    fixed = _drops_cases([(10, 10), (15, 5)], 0, "")
    fixed[0] = Case(fixed[0].name + ": 0.0 blinds the induction head 1.0; 0.1 and the uniform head 1.1 "
                    "change nothing", fixed[0].args, fixed[0].expected,
                    hint="entry [e, l]: the clean score of 1.l minus its score with 0.e ablated; rows are the "
                         "ablated heads of layer 0, columns the heads of layer 1.")
    fixed[1] = Case(fixed[1].name + ": without 0.1, 1.0 scores *higher*", fixed[1].args, fixed[1].expected,
                    hint="a drop can be negative; use zero ablation (hm.ablate's default) and capture the "
                         "patterns inside the ablation.")
    hidden = _drops_cases([(12, 8), (14, 6)], 1, "other inputs: ")
    cases = fixed + [Case(c.name, c.args, c.expected, hidden=True) for c in hidden[1:]]
    run_cases(fn, cases + drawn(_drawn_drops_cases), compare=lambda got, exp: compare_arrays(
        got, exp, atol=1e-4, rtol=0), what="the fall of each induction score under ablation", forbid=_CIRCUITS)


def _drawn_drops_cases(rng: np.random.Generator) -> list[Case]:
    """Two rows of one random length, with different spans (so that their uniform scores differ)."""
    length = int(rng.integers(12, 21))
    spans = [a for a in range(1, 16) if 0 < length - 1 - a <= a]
    a1, a2 = (int(x) for x in rng.choice(spans, size=2, replace=False))
    return _drops_cases([(a1, length - 1 - a1), (a2, length - 1 - a2)], int(rng.integers(2**31)), MARK + ": ")


# ------------------------------------------------------------------------ the composition grid


def _one_hot_head(rng, d_model, d_head, query, key, read, write, R):
    """``(W_Q, W_K, W_V, W_O)``: query coordinate ``query[i]`` meets key coordinate ``key[i]``; the
    head reads ``read[i]`` and writes ``write[i]``; turned by ``R`` and random maps on the head side."""
    W = [np.zeros((d_model, d_head)) for _ in range(3)] + [np.zeros((d_head, d_model))]
    for i, (q, k) in enumerate(zip(query, key)):
        W[0][q, i], W[1][k, i] = 1.0, 1.0
    for i, (r, w) in enumerate(zip(read, write)):
        W[2][r, i], W[3][i, w] = 1.0, 1.0
    S, T = (np.linalg.qr(rng.normal(size=(d_head, d_head)))[0] for _ in range(2))
    c = rng.uniform(0.5, 2.0, 4)
    return c[0] * R @ W[0] @ S, c[1] * R @ W[1] @ S, c[2] * R @ W[2] @ T, c[3] * T.T @ W[3] @ R.T


def _shared(x, y) -> int:
    return len(set(x) & set(y))


def _grid_case(rng, n_early: int, n_late: int, kind: str, name: str, hidden: bool = False) -> Case:
    """Random one-hot heads; the composition of each pair counts the coordinates one writes where the
    other reads: K, the later key; Q, the later query; V, the later value. Heads on which a usual
    mistake (the other side, the other order, no normalisation) gives the same grid are drawn again."""
    d_model, d_head = 12, 3
    R = np.linalg.qr(rng.normal(size=(d_model, d_model)))[0]

    def spec():
        a, b = int(rng.integers(1, d_head + 1)), int(rng.integers(1, d_head + 1))
        return [list(rng.choice(d_model, size=n, replace=False)) for n in (a, a, b, b)]

    def grid(early, late, side):  # side(early head, late head) -> (written, read, n_written, n_read)
        return np.array([[np.sqrt(_shared(*side(e, l)[:2]) / (side(e, l)[2] * side(e, l)[3])) for l in late]
                         for e in early])

    sides = {"Q": lambda e, l: (e[3], l[0], len(e[3]), len(l[0])),
             "K": lambda e, l: (e[3], l[1], len(e[3]), len(l[1])),
             "V": lambda e, l: (e[3], l[2], len(e[3]), len(l[2]))}
    wrong = {"Q": ["K", lambda e, l: (e[2], l[1], len(e[2]), len(l[1]))],  # W_QK W_OV: the earlier *read*
             "K": ["Q", lambda e, l: (e[2], l[1], len(e[2]), len(l[1]))],
             "V": [lambda e, l: (l[3], e[2], len(l[3]), len(e[2]))]}  # the later head first
    while True:
        early, late = [spec() for _ in range(n_early)], [spec() for _ in range(n_late)]
        expected = grid(early, late, sides[kind])
        others = [grid(early, late, sides[w] if isinstance(w, str) else w) for w in wrong[kind]]
        if expected.any() and all(not np.allclose(o, expected) for o in others):
            break
    heads = [[_one_hot_head(rng, d_model, d_head, *s, R) for s in group] for group in (early, late)]
    return Case(name, args=(heads[0], heads[1], kind), expected=expected, hidden=hidden)


def check_composition_grid(fn: Callable) -> None:
    """Check ``fn(earlier, later, kind)``: ``earlier`` and ``later`` are lists of heads, each a tuple
    ``(W_Q, W_K, W_V, W_O)``; the answer is the grid ``(len(earlier), len(later))`` of the ``kind``
    ("Q", "K" or "V") composition of each later head reading each earlier head."""
    rng = np.random.default_rng(5)
    cases = [_grid_case(rng, 2, 3, "K", "K-composition, 2 earlier x 3 later one-hot heads (turned)"),
             _grid_case(rng, 3, 2, "Q", "Q-composition, 3 earlier x 2 later heads"),
             _grid_case(rng, 2, 2, "V", "V-composition, 2 x 2 heads"),
             _grid_case(rng, 3, 3, "K", "K-composition, 3 x 3 heads", hidden=True)]
    cases[0] = Case(cases[0].name, cases[0].args, cases[0].expected,
                    hint="rows are the earlier heads, columns the later ones; the K grid reads the later "
                         "head's key side, through the earlier head's OV circuit transposed.")
    run_cases(fn, cases + drawn(_drawn_grid_cases), compare=lambda got, exp: compare_arrays(
        got, exp, atol=1e-6, rtol=1e-6), what="a grid of composition scores", forbid=_CIRCUITS)


def _drawn_grid_cases(rng: np.random.Generator) -> list[Case]:
    """One grid of each kind, of random sizes (never square, so that a transposed grid shows)."""
    out = []
    for kind in "QKV":
        n_early = int(rng.integers(2, 4))
        out.append(_grid_case(rng, n_early, n_early + 1, kind, MARK + f": {kind}-composition"))
    return out


# ---------------------------------------------------------------------------- seen-token guess


def _guess_case(rng, batch: int, n_distinct: list, pos: int, name: str, hidden: bool = False) -> Case:
    """Rows ``<bos>``, then ``n`` distinct tokens, then tokens drawn from those ``n``: at ``t`` the
    seen tokens (``<bos>`` aside) number ``min(t, n)``. Random predictable positions, at least one."""
    import torch

    tokens = np.zeros((batch, pos), dtype=np.int64)
    counts = np.zeros((batch, pos))
    for b, n in enumerate(n_distinct):
        span = rng.permutation(np.arange(1, 50))[:n]
        tokens[b, 1:n + 1] = span
        tokens[b, n + 1:] = rng.choice(span, size=pos - n - 1)
        counts[b] = np.minimum(np.arange(pos), n)
    mask = rng.random((batch, pos)) < 0.5
    mask[:, 0] = False
    mask[np.arange(batch), rng.integers(1, pos, size=batch)] = True
    expected = np.array([np.log(counts[b][mask[b]]).mean() for b in range(batch)])
    return Case(name, args=(torch.as_tensor(tokens), torch.as_tensor(mask)), expected=expected, hidden=hidden)


def check_seen_token_guess(fn: Callable) -> None:
    """Check ``fn(tokens, predictable)``: per input, the loss (nats) of betting evenly on the distinct
    tokens seen so far (``<bos>`` at position 0 not counted), over the positions ``predictable`` marks."""
    import torch

    rng = np.random.default_rng(3)
    one = torch.tensor([[0, 5, 5, 7, 5, 9]])
    cases = [Case("one row [<bos> 5 5 7 5 9], every position after <bos> counted",
                  args=(one, torch.tensor([[False, True, True, True, True, False]])),
                  expected=np.array([(0 + 0 + np.log(2) + np.log(2)) / 4]),
                  hint="at position t the guess spreads over the distinct tokens of positions 1..t (not the "
                       "token at t + 1, which it is guessing, nor <bos>): 1, 1, 2, 2 tokens here."),
             _guess_case(rng, 3, [3, 5, 2], 9, "three rows with 3, 5 and 2 distinct tokens, some positions "
                         "marked", ),
             _guess_case(rng, 2, [4, 6], 12, "two rows of 12", hidden=True)]
    cases[1] = Case(cases[1].name, cases[1].args, cases[1].expected,
                    hint="one value per row: the mean over that row's marked positions only.")
    run_cases(fn, cases + drawn(_drawn_guess_cases), compare=lambda got, exp: compare_arrays(
        got, exp, atol=1e-9, rtol=1e-9), what="the seen-token guess", forbid=("deviating.analysis.depth",))


def _drawn_guess_cases(rng: np.random.Generator) -> list[Case]:
    batch, pos = int(rng.integers(2, 5)), int(rng.integers(8, 16))
    return [_guess_case(rng, batch, [int(n) for n in rng.integers(2, pos - 2, size=batch)], pos,
                        MARK + f": {batch} rows of {pos}")]


# ----------------------------------------------------------------------------- the jump


def _curve(rng, n: int, before: int, after: int, final: float, share: float) -> list[dict]:
    """Evaluations whose best induction score stays below 0.1 up to ``before``, climbs in between and
    first reaches ``share * final`` at ``after``; a dip above 0.1 comes before ``before``."""
    scores = np.empty(n)
    scores[:before + 1] = rng.uniform(0.0, 0.09, before + 1)
    if before >= 2:
        scores[before // 2] = rng.uniform(0.12, 0.3)  # an early blip above 0.1: not the jump
    scores[before + 1:after] = np.sort(rng.uniform(0.11, share * final - 0.02, after - before - 1))
    scores[after:] = rng.uniform(share * final, final, n - after)
    scores[after] = share * final + 0.01
    scores[-1] = final
    return [{"step": 50 * (k + 1), "induction_best": float(s), "loss_repeat": float(4 - 3 * s)}
            for k, s in enumerate(scores)]


def check_find_jump(fn: Callable) -> None:
    """Check ``fn(rows)``: ``rows`` a training curve (dicts with ``"step"`` and ``"induction_best"``);
    the answer is the pair of steps that bracket the jump (the last evaluation below 0.1, the first
    later one at 90% of the final score)."""
    rng = np.random.default_rng(11)
    cases = [Case("a curve with a blip above 0.1 before the jump", args=(_curve(rng, 20, 8, 12, 0.8, 0.9),),
                  expected=(450, 650),
                  hint="the jump starts at the *last* evaluation below 0.1: an early blip is not the jump."),
             Case("a curve that overshoots, then settles lower", args=(_curve(rng, 16, 5, 7, 0.5, 0.9),),
                  expected=(300, 400),
                  hint="90% of the *final* score, not of the largest; and return steps, not list indices."),
             Case("a longer curve", args=(_curve(rng, 30, 17, 22, 0.6, 0.9),), expected=(900, 1150), hidden=True)]
    cases[1].args[0][10]["induction_best"] = 0.95  # an overshoot above the final 0.5
    run_cases(fn, cases + drawn(_drawn_jump_cases), compare=_same_steps, what="the jump of a curve")


def _same_steps(got, expected) -> str | None:
    try:
        start, end = (int(x) for x in got)
    except (TypeError, ValueError):
        return f"expected two steps (start, end), got {got!r}"
    return None if (start, end) == tuple(expected) else "these are not the steps that bracket the jump"


def _drawn_jump_cases(rng: np.random.Generator) -> list[Case]:
    n = int(rng.integers(15, 40))
    before = int(rng.integers(3, n - 6))
    after = int(rng.integers(before + 2, n - 2))
    rows = _curve(rng, n, before, after, float(rng.uniform(0.4, 0.9)), 0.9)
    rows[after + 1]["induction_best"] = rows[-1]["induction_best"] * 1.1  # an overshoot
    return [Case(MARK + f": {n} evaluations", args=(rows,), expected=(50 * (before + 1), 50 * (after + 1)))]
