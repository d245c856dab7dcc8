"""Checks for chapter 02's layer-building exercises: merging heads, a whole multi-head layer, each
head's singular values from its two factors, a language model's next-token losses, and per-head
statistics of attention patterns with their uniform baseline.

:mod:`deviating.exercises.ch02` re-exports every check here (the grader names checks by chapter
module). Every expected value follows from how the inputs are built, never from a reference
implementation: planted weights give known patterns, hand-made patterns give known statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from deviating.exercises import Case, compare_arrays, run_cases
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.refusing import REFUSED, compare_refusal, refusing

__all__ = ["check_merge_heads", "check_multi_head", "check_head_statistics", "check_uniform_baseline",
           "check_head_singular_values", "check_next_token_losses"]

_DRAWN = MARK + ": "
_KERNELS = ("deviating.kernels", "headlab.kernels")
STATISTICS = ("entropy", "max_weight", "previous_token", "first_token")


# --------------------------------------------------------------------------- merge_heads


def _split_encoded(batch: int, n_heads: int, seq: int, d_head: int, shift: float = 0.0):
    """``z[b, h, s, t] = 1000 b + 100 s + h d_head + t`` (+ shift), and where it must land after the
    merge: position s, column ``h * d_head + t`` holds ``1000 b + 100 s + column``."""
    z = np.fromfunction(lambda b, h, s, t: 1000 * b + 100 * s + h * d_head + t, (batch, n_heads, seq, d_head))
    merged = np.fromfunction(lambda b, s, c: 1000 * b + 100 * s + c, (batch, seq, n_heads * d_head))
    return z + shift, merged + shift


def check_merge_heads(fn: Callable[[np.ndarray], Any]) -> None:
    """Check ``merge_heads(z)``: ``(batch, n_heads, seq, d_head) -> (batch, seq, n_heads * d_head)``,
    head h's slot t landing in column ``h * d_head + t``: the inverse of ``split_heads``."""
    cases = []
    for name, sizes, hidden, hint in [
        ("one head: only the head axis goes", (1, 1, 3, 4), False,
         "with one head the output is z[:, 0]."),
        ("z[b, h, s, t] = 1000 b + 100 s + h d_head + t, 2 heads of d_head 2, 3 positions", (1, 2, 3, 2), False,
         "move the head axis next to d_head first (transpose), then reshape: reshaping (batch, n_heads, seq, "
         "d_head) straight to (batch, seq, d_model) mixes positions."),
        ("a batch of 2, 4 heads of d_head 3, 5 positions", (2, 4, 5, 3), False,
         "head h must fill the columns h * d_head ... (h + 1) * d_head - 1, not every n_heads-th column."),
        ("a batch of 3, 3 heads of d_head 2, 2 positions", (3, 3, 2, 2), True, ""),
    ]:
        z, merged = _split_encoded(*sizes)
        cases.append(Case(name, args=(z,), expected=merged, hidden=hidden, hint=hint))
    run_cases(fn, cases + drawn(_drawn_merge_cases), compare=lambda got, exp: compare_arrays(got, exp, atol=0, rtol=0),
              what="merging heads", forbid=_KERNELS)


def _drawn_merge_cases(rng: np.random.Generator) -> list[Case]:
    """Encoded arrays of random sizes and shift, at least 2 heads, positions and slots each (drawn when grading)."""
    cases = []
    for _ in range(2):
        batch, n_heads, seq, d_head = (int(rng.integers(lo, hi)) for lo, hi in ((1, 4), (2, 5), (2, 6), (2, 5)))
        z, merged = _split_encoded(batch, n_heads, seq, d_head, float(rng.integers(-5000, 5000)))
        cases.append(Case(_DRAWN + f"z of shape {z.shape}", args=(z,), expected=merged))
    return cases


# --------------------------------------------------------------------------- a whole layer


def _planted_layer(rng: np.random.Generator, batch: int, n: int, n_heads: int, d_head: int, causal: bool,
                   shift: float = 0.0) -> tuple[tuple, tuple]:
    """Inputs of a multi-head layer whose patterns are known, and its (output, patterns).

    Column 0 of x is 1 and column 1 + h holds ``log w_h`` (per batch row and position), the rest is
    random. W_Q gives head h the constant query ``e_a`` (slot a of its own columns, from column 0);
    W_K writes ``sqrt(d_head) (log w_h + shift)`` into the same slot (and random numbers into the
    others, which the query never reads). So head h's score on key j is ``log w_h[j] + shift``, and
    its pattern row i is ``w_h`` over the keys it may see, renormalised.
    """
    d_model = n_heads * d_head
    logw = np.log(rng.uniform(0.2, 5.0, (batch, n, n_heads)))
    x = rng.normal(size=(batch, n, d_model))
    x[..., 0] = 1.0
    x[..., 1:1 + n_heads] = logw
    w_q = np.zeros((d_model, d_model))
    w_k = rng.normal(size=(d_model, d_model))
    for h in range(n_heads):
        slot = h * d_head + int(rng.integers(d_head))
        w_q[slot, 0] = 1.0
        w_k[slot] = 0.0
        w_k[slot, 1 + h] = np.sqrt(d_head)
        w_k[slot, 0] = np.sqrt(d_head) * shift  # the same shift on every key: the same pattern
    w_v, w_o = rng.normal(size=(2, d_model, d_model))
    w = np.moveaxis(np.exp(logw), -1, 1)[:, :, None, :] * np.ones((1, 1, n, 1))  # (batch, head, q, k)
    if causal:
        w = np.tril(w)
    patterns = w / w.sum(-1, keepdims=True)
    v = (x @ w_v.T).reshape(batch, n, n_heads, d_head)
    z = np.einsum("bhqk,bkhd->bqhd", patterns, v).reshape(batch, n, d_model)
    return (x, w_q, w_k, w_v, w_o, n_heads, causal), (z @ w_o.T, patterns)


def _compare_layer(got: Any, expected: tuple) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"expected a pair (output, patterns), got {type(got).__name__}"
    for what, g, e in zip(("output", "patterns"), got, expected):
        problem = compare_arrays(g, e, atol=1e-9, rtol=1e-9)
        if problem is not None:
            return f"{what}: {problem}"
    return None


def check_multi_head(fn: Callable[..., Any]) -> None:
    """Check ``multi_head(x, w_q, w_k, w_v, w_o, n_heads, causal)`` -> ``(output, patterns)``: the
    output ``(batch, pos, d_model)`` and the patterns ``(batch, n_heads, q_pos, k_pos)`` of a layer
    whose weights are applied as ``x @ w.T``. The planted weights give every head a known pattern."""
    rng = np.random.default_rng(2024)
    cases = []
    for name, sizes, causal, shift, hidden, hint in [
        ("one head, one sequence of 4 positions, no mask", (1, 4, 1, 4), False, 0.0, False,
         "project with x @ w.T (the weights are stored like nn.Linear's), divide the scores by sqrt(d_head)."),
        ("2 heads of d_head 3, causal: head h's pattern is its planted weights over keys j <= i", (1, 5, 2, 3),
         True, 0.0, False,
         "head h uses columns h * d_head ... (h + 1) * d_head - 1 of q, k and v; scale by sqrt(d_head), "
         "not sqrt(d_model)."),
        ("a batch of 2, 4 heads of d_head 2, causal", (2, 6, 4, 2), True, 0.0, False,
         "put the heads' outputs back side by side in head order (the inverse of the split), then apply W_O."),
        ("3 heads, no mask: every query sees every key", (2, 4, 3, 2), False, 0.0, False,
         "with causal=False no key is masked."),
        ("huge scores (about 900) in 2 heads, causal", (1, 5, 2, 4), True, 900.0, False,
         "subtract each row's max before exponentiating."),
        ("a batch of 2, 3 heads of d_head 3, causal", (2, 5, 3, 3), True, 0.0, True, ""),
    ]:
        args, expected = _planted_layer(rng, *sizes, causal=causal, shift=shift)
        cases.append(Case(name, args=args, expected=expected, hidden=hidden, hint=hint))
    run_cases(fn, cases + drawn(_drawn_layer_cases), compare=_compare_layer, what="a multi-head layer",
              forbid=_KERNELS)


def _drawn_layer_cases(rng: np.random.Generator) -> list[Case]:
    """Planted layers of random sizes (at least 2 heads), causal and not, one with huge scores."""
    cases = []
    for causal, shift in ((True, 0.0), (False, 0.0), (True, float(rng.uniform(800.0, 1000.0)))):
        batch, n, n_heads, d_head = (int(rng.integers(lo, hi)) for lo, hi in ((1, 3), (3, 8), (2, 5), (2, 5)))
        args, expected = _planted_layer(rng, batch, n, n_heads, d_head, causal, shift)
        cases.append(Case(_DRAWN + f"{n_heads} heads of d_head {d_head}, {n} positions, causal={causal}"
                          + (", huge scores" if shift else ""), args=args, expected=expected))
    return cases


# --------------------------------------------------------------------------- per-head statistics


def _head(kind: str, n: int, p: float = 0.5) -> tuple[np.ndarray, dict[str, float]]:
    """A causal ``(n, n)`` pattern of one kind and its four statistics, averaged over the queries
    i = 1 .. n - 1 (query 0 sees one key only), worked out from the construction."""
    rows = np.arange(1, n)
    pattern = np.zeros((n, n))
    pattern[0, 0] = 1.0
    if kind == "previous":  # all on key i - 1; at query 1 that is the first token too
        pattern[rows, rows - 1] = 1.0
        return pattern, {"entropy": 0.0, "max_weight": 1.0, "previous_token": 1.0, "first_token": 1 / (n - 1)}
    if kind == "first":  # all on key 0; at query 1 that is the previous token too
        pattern[rows, 0] = 1.0
        return pattern, {"entropy": 0.0, "max_weight": 1.0, "previous_token": 1 / (n - 1), "first_token": 1.0}
    if kind == "uniform":  # 1 / (i + 1) on each of the keys 0..i
        for i in rows:
            pattern[i, :i + 1] = 1.0 / (i + 1)
        inv = 1.0 / (rows + 1)
        return pattern, {"entropy": float(np.mean(np.log(rows + 1))), "max_weight": float(inv.mean()),
                         "previous_token": float(inv.mean()), "first_token": float(inv.mean())}
    # "split": p on key 0, 1 - p on the query's own key; the previous token is key 0 only at query 1
    pattern[rows, 0] = p
    pattern[rows, rows] = 1.0 - p
    return pattern, {"entropy": float(-(p * np.log(p) + (1 - p) * np.log(1 - p))), "max_weight": max(p, 1 - p),
                     "previous_token": p / (n - 1), "first_token": p}


def _stack(heads: list[tuple[np.ndarray, dict]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    return np.stack([h for h, _ in heads]), {k: np.array([s[k] for _, s in heads]) for k in STATISTICS}


def _compare_statistics(got: Any, expected: dict[str, np.ndarray]) -> str | None:
    if not isinstance(got, dict):
        return f"expected a dict with keys {list(STATISTICS)}, got {type(got).__name__}"
    missing = [k for k in STATISTICS if k not in got]
    if missing:
        return f"missing keys {missing} (expected {list(STATISTICS)})"
    for key in STATISTICS:
        problem = compare_arrays(got[key], expected[key], atol=1e-9, rtol=1e-9)
        if problem is not None:
            return f"{key!r}: {problem}"
    return None


def check_head_statistics(fn: Callable[[np.ndarray], Any]) -> None:
    """Check ``head_statistics(pattern)``: for a causal pattern ``(head, q_pos, k_pos)``, a dict of
    four ``(head,)`` arrays (``"entropy"`` in nats, ``"max_weight"``, ``"previous_token"``,
    ``"first_token"``), each the mean over the queries that have a choice (all but query 0)."""
    cases = []
    for name, kinds, n, hidden, hint in [
        ("a previous-token head and a first-token head, 6 positions", [("previous", .5), ("first", .5)], 6, False,
         "average over the queries 1 .. n-1: query 0 sees only itself and says nothing about the head."),
        ("a head spreading each row evenly over the keys it may see, 5 positions", [("uniform", .5)], 5, False,
         "the future keys hold weight exactly 0, and 0 log 0 counts as 0 (numpy gives NaN): skip them. "
         "Entropy in nats: the natural log."),
        ("a head with 0.2 on the first token and 0.8 on its own key, beside a uniform one",
         [("split", .2), ("uniform", .5)], 7, False,
         "the previous token of query i is key i - 1; the first token is key 0."),
        ("four heads of every kind, 9 positions", [("uniform", .5), ("split", .7), ("first", .5),
                                                     ("previous", .5)], 9, True, ""),
    ]:
        pattern, expected = _stack([_head(kind, n, p) for kind, p in kinds])
        cases.append(Case(name, args=(pattern,), expected=expected, hidden=hidden, hint=hint))
    run_cases(fn, cases + drawn(_drawn_statistics_cases), compare=_compare_statistics,
              what="per-head statistics", forbid=(*_KERNELS, "headlab.analysis"))


def _drawn_statistics_cases(rng: np.random.Generator) -> list[Case]:
    """Stacks of every kind of head in random order, lengths and splits (drawn when grading)."""
    cases = []
    for _ in range(2):
        n = int(rng.integers(4, 16))
        kinds = [str(k) for k in rng.permutation(["previous", "first", "uniform", "split"])]
        pattern, expected = _stack([_head(k, n, float(rng.uniform(0.05, 0.45))) for k in kinds])
        cases.append(Case(_DRAWN + f"{len(kinds)} heads over {n} positions", args=(pattern,), expected=expected))
    return cases


def check_uniform_baseline(fn: Callable[[int], Any]) -> None:
    """Check ``uniform_baseline(n_pos)``: the four statistics of :func:`check_head_statistics` for a
    causal head that spreads every query's weight evenly over the keys it may see, as a dict of floats."""
    cases = []
    for n, hidden in ((2, False), (3, False), (10, False), (17, True)):
        _, stats = _head("uniform", n)
        hint = ("query i sees i + 1 keys, each with weight 1 / (i + 1); average over the queries 1 .. n-1."
                if n == 3 else "")
        cases.append(Case(f"{n} positions", args=(n,), expected=stats, hidden=hidden, hint=hint))
    run_cases(fn, cases + drawn(_drawn_uniform_cases), compare=_compare_statistics, what="the uniform baseline",
              forbid=(*_KERNELS, "headlab.analysis"))


def _drawn_uniform_cases(rng: np.random.Generator) -> list[Case]:
    """Three random lengths (drawn when grading); the statistics of the uniform pattern built at that length."""
    return [Case(_DRAWN + f"{n} positions", args=(int(n),), expected=_head("uniform", int(n))[1])
            for n in rng.choice(np.arange(2, 300), size=3, replace=False)]


# --------------------------------------------------------------------------- a head's singular values


def _planted_factors(rng: np.random.Generator, lead: tuple, d_model: int, d_head: int, zeros: int = 0):
    """Factors ``A = U diag(s) M``, ``B = V M^{-T}`` with ``U, V`` of orthonormal columns and ``M`` an
    invertible mixing: ``A B^T = U diag(s) V^T``, whose singular values are ``s`` (``zeros`` of them 0),
    though neither factor shows them. Returns ``(A, B)`` and ``s`` sorted largest first."""
    s = np.sort(rng.uniform(0.5, 10.0, (*lead, d_head)), axis=-1)[..., ::-1].copy()
    if zeros:
        s[..., d_head - zeros:] = 0.0
    u = np.linalg.qr(rng.normal(size=(*lead, d_model, d_head)))[0]
    v = np.linalg.qr(rng.normal(size=(*lead, d_model, d_head)))[0]
    m = rng.normal(size=(*lead, d_head, d_head)) + 3.0 * np.eye(d_head)  # well conditioned
    a = (u * s[..., None, :]) @ m
    b = v @ np.linalg.inv(m).swapaxes(-1, -2)
    return (a, b), s


def check_head_singular_values(fn: Callable[[np.ndarray, np.ndarray], Any]) -> None:
    """Check ``head_singular_values(A, B)``: for factors ``(..., d_model, d_head)``, the ``d_head``
    singular values of each ``A B^T``, largest first, ``(..., d_head)``. The planted factors have
    known singular values (:func:`_planted_factors`)."""
    rng = np.random.default_rng(17)
    cases = []
    for name, lead, d_model, d_head, zeros, hidden, hint in [
        ("one head, d_model 6, d_head 2", (), 6, 2, 0, False,
         "the answer has d_head numbers, largest first: the singular values of A B^T, not of A or of A^T B. "
         "Write each factor as orthonormal columns times a small square matrix (np.linalg.qr): the "
         "orthonormal parts do not change singular values."),
        ("three heads (a leading axis), d_model 8, d_head 3", (3,), 8, 3, 0, False,
         "keep the leading axes: one row of d_head singular values per head."),
        ("a head of rank 2 out of d_head 4: two singular values are 0", (), 10, 4, 2, False,
         "singular values are never negative and come largest first; a rank-deficient head ends in zeros."),
        ("layers and heads: leading axes (2, 2), d_model 9, d_head 3", (2, 2), 9, 3, 0, False, ""),
        ("two heads of d_head 5 in d_model 12, one singular value 0", (2,), 12, 5, 1, True, ""),
    ]:
        args, s = _planted_factors(rng, lead, d_model, d_head, zeros)
        cases.append(Case(name, args=args, expected=s, hidden=hidden, hint=hint))
    (a, _), _ = _planted_factors(rng, (), 6, 2)
    (_, b), _ = _planted_factors(rng, (), 7, 2)
    cases.append(Case("factors of different shapes, (6, 2) and (7, 2)", args=(a, b), expected=REFUSED,
                      hint="A B^T needs the same d_model in both factors: raise a ValueError naming both shapes."))
    run_cases(refusing(fn), cases + drawn(_drawn_singular_cases),
              compare=compare_refusal(lambda got, exp: compare_arrays(got, exp, atol=1e-8, rtol=1e-8)),
              what="a head's singular values", forbid=("headlab.analysis",))


def _drawn_singular_cases(rng: np.random.Generator) -> list[Case]:
    """Planted factors of random sizes (drawn when grading), one with a rank below d_head."""
    cases = []
    for zeros in (0, 1):
        lead = tuple(int(x) for x in rng.integers(1, 4, size=int(rng.integers(1, 3))))
        d_head = int(rng.integers(2, 6))
        d_model = int(rng.integers(d_head + 1, 3 * d_head + 2))
        args, s = _planted_factors(rng, lead, d_model, d_head, zeros)
        cases.append(Case(MARK + f": leading axes {lead}, d_model {d_model}, d_head {d_head}", args=args,
                          expected=s))
    a, b = args
    cases.append(Case(MARK + ": factors of different d_model", args=(a, np.concatenate([b, b[..., :1, :]], axis=-2)),
                      expected=REFUSED))
    return cases


# --------------------------------------------------------------------------- next-token losses


def _loss_case(rng: np.random.Generator, n_windows: int, n_ctx: int, vocab: int, shift: float = 0.0):
    """Logits ``log p + c`` (``c`` one random constant per position, about ``shift``) and token ids:
    the loss at position t is ``-log p[t, ids[t + 1]]`` whatever ``c``, and a window's is their mean."""
    p = rng.uniform(0.1, 1.0, (n_windows, n_ctx, vocab))
    p /= p.sum(-1, keepdims=True)
    ids = rng.integers(vocab, size=(n_windows, n_ctx))
    c = shift + rng.normal(0.0, 3.0, (n_windows, n_ctx, 1))
    taken = np.take_along_axis(p[:, :-1], ids[:, 1:, None], axis=-1)[..., 0]  # p of the next token
    return (np.log(p) + c, ids), -np.log(taken).mean(-1)


def check_next_token_losses(fn: Callable[[np.ndarray, np.ndarray], Any]) -> None:
    """Check ``next_token_losses(logits, ids)``: logits ``(n_windows, n_ctx, vocab)``, token ids
    ``(n_windows, n_ctx)``; per window, the mean over positions of the cross-entropy (nats) of
    predicting each next token, ``(n_windows,)``."""
    rng = np.random.default_rng(5)
    cases = []
    for name, sizes, shift, hidden, hint in [
        ("one window of 2 positions, 3 tokens: one prediction", (1, 2, 3), 0.0, False,
         "the logits at position t predict the token at t + 1: the last position predicts nothing."),
        ("three windows of 5 positions, 4 tokens", (3, 5, 4), 0.0, False,
         "one loss per window, the mean of its n_ctx - 1 predictions; in nats (natural log)."),
        ("logits around 1000", (2, 4, 6), 1000.0, False,
         "exp(1000) overflows: subtract each position's largest logit before exponentiating."),
        ("logits around -1000", (2, 3, 5), -1000.0, False, "exp(-1000) underflows to 0: log 0 is -inf."),
        ("four windows of 6 positions, 7 tokens", (4, 6, 7), 0.0, True, ""),
    ]:
        args, expected = _loss_case(rng, *sizes, shift=shift)
        cases.append(Case(name, args=args, expected=expected, hidden=hidden, hint=hint))
    a, b = cases[1].args
    cases.append(Case("ids with one position fewer than the logits", args=(a, b[:, :-1]), expected=REFUSED,
                      hint="the logits and the ids must cover the same positions: raise a ValueError naming both "
                           "shapes."))
    run_cases(refusing(fn), cases + drawn(_drawn_loss_cases),
              compare=compare_refusal(lambda got, exp: compare_arrays(got, exp, atol=1e-9, rtol=1e-9)),
              what="next-token losses", forbid=("deviating.experiments", "headlab.metrics"))


def _drawn_loss_cases(rng: np.random.Generator) -> list[Case]:
    """Random windows, lengths and vocabularies, one case with logits around +-1000 (drawn when grading)."""
    cases = []
    for shift in (0.0, float(rng.choice([-1.0, 1.0]) * rng.uniform(800.0, 1000.0))):
        sizes = (int(rng.integers(2, 5)), int(rng.integers(3, 9)), int(rng.integers(2, 12)))
        args, expected = _loss_case(rng, *sizes, shift=shift)
        cases.append(Case(MARK + f": {sizes[0]} windows of {sizes[1]} positions, {sizes[2]} tokens"
                          + (", large logits" if shift else ""), args=args, expected=expected))
    logits, ids = cases[0].args
    cases.append(Case(MARK + ": ids of another length", args=(logits, ids[:, 1:]), expected=REFUSED))
    return cases
