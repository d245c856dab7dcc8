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
    run_cases(fn, _induction_cases(), compare=compare_number, forbid=_DETECTORS)


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
    run_cases(fn, _previous_token_cases(), compare=_same_head, forbid=_DETECTORS)


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
    run_cases(fn, _k_composition_cases(), compare=compare_number, forbid=("headlab.analysis.circuits",))


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
    run_cases(fn, cases, compare=lambda got, exp: compare_number(got, exp, atol=1e-4, rtol=0),
              forbid=("headlab.analysis.circuits", "headlab.analysis.sweep", "headlab.report"))


# --------------------------------------------------------------------- patching one head

_BY_HAND = "deviating.exercises.by_hand"  # the checks' own reference: never the student's tool
_TOOLS = ("headlab.analysis", "deviating.analysis", _BY_HAND)


def _pair(seed: int, vocab: int, batch: int, pos: int, changed: int):
    """Clean token ids and a corrupted twin that differs at position ``changed`` of every row."""
    import torch

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(vocab, (batch, pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, changed] = (clean[:, changed] + 1 + torch.randint(vocab - 1, (batch,), generator=g)) % vocab
    return clean, corrupted


def _clear_pair(clean_run, corrupted_run) -> tuple[int, int]:
    """``(answer, wrong)``: the two tokens whose logit difference at the last position moves most
    between the runs on *every* input (so the normalised recovery is well defined)."""
    moved = clean_run.logits[:, -1] - corrupted_run.logits[:, -1]  # (batch, vocab)
    gap = (moved[:, :, None] - moved[:, None, :]).abs().min(dim=0).values  # (vocab, vocab): the worst input
    gap.fill_diagonal_(-1.0)
    answer, wrong = divmod(int(gap.argmax()), gap.shape[1])
    return answer, wrong


def _patch_case(name, hm, clean, corrupted, layer, head, hint="", hidden=False):
    """A case of patch_head, its expected recovery by hand, and the answers of the usual mistakes."""
    from deviating.exercises.by_hand import last_logit_diff, run_by_hand

    runs = {"clean": run_by_hand(hm, clean), "corrupted": run_by_hand(hm, corrupted)}
    answer, wrong = _clear_pair(runs["clean"], runs["corrupted"])
    z_clean, z_corr = runs["clean"].z[layer], runs["corrupted"].z[layer]
    patched = run_by_hand(hm, corrupted, replace={(layer, head): z_clean[:, :, head]})
    noised = run_by_hand(hm, clean, replace={(layer, head): z_corr[:, :, head]})
    every = run_by_hand(hm, corrupted, replace={(layer, h): z_clean[:, :, h] for h in range(hm.n_heads)})

    def recovery(run, at=-1, metric=last_logit_diff):
        c, k = (metric(runs[n], answer, wrong, at) for n in ("clean", "corrupted"))
        return ((metric(run, answer, wrong, at) - k) / (c - k)).numpy()

    def ratio(run, a, b, at):
        return run.logits[:, at, a] / run.logits[:, at, b]

    expected = recovery(patched)
    gap = (last_logit_diff(runs["clean"], answer, wrong) - last_logit_diff(runs["corrupted"], answer, wrong))
    mistakes = {
        "this is noising (the corrupted head's z put into the clean run); denoise: run the corrupted input "
        "with the head's z taken from the clean run": recovery(noised),
        "the recovery is not normalised: divide (patched - corrupted) by (clean - corrupted)":
            (last_logit_diff(patched, answer, wrong) - last_logit_diff(runs["corrupted"], answer, wrong)).numpy(),
        "the metric is a ratio of logits; use the difference logit(answer) - logit(wrong)":
            recovery(patched, metric=ratio),
        "the metric is read one position too early; read the logits at the last position (-1)":
            recovery(patched, at=-2),
        "every head of the layer was patched; patch only the given head's slice z[:, :, head]":
            recovery(every),
    }
    if float(gap.abs().min()) < 0.5:
        raise RuntimeError(f"{name}: the clean and corrupted runs are too alike for a check")
    case = Case(name, args=(hm, clean, corrupted, layer, head, answer, wrong), expected=expected, hint=hint,
                hidden=hidden)
    return case, mistakes


def check_patch_head(fn: Callable) -> None:
    """Check ``fn(hm, clean, corrupted, layer, head, answer, wrong)``: per input, the normalised
    logit-difference recovery when head ``(layer, head)``'s ``z`` from the clean run is patched into
    the corrupted run (denoising). Expected values come from a forward pass written out by hand
    (:mod:`deviating.exercises.by_hand`), not from the head interface."""
    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    small, deep = tiny_gpt(seed=1), tiny_gpt(seed=2, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    clean, corrupted = _pair(0, 40, 3, 8, changed=2)
    clean_b, corrupted_b = _pair(1, 40, 3, 9, changed=2)
    built = [
        _patch_case("a 2-layer model, head 1.2, three inputs that differ at position 2", small, clean, corrupted,
                    1, 2, hint="run the corrupted input with z[:, :, head] of this layer replaced by the clean run's "
                               "(hm.patch_z), then score logit(answer) - logit(wrong) at the last position."),
        _patch_case("the same inputs, head 0.1 (its effect also flows through layer 1)", small, clean, corrupted,
                    0, 1, hint="patch the head at every position; the later layers then run as they will."),
        _patch_case("3 layers with MLPs, 2 heads each, head 1.0", deep, clean_b, corrupted_b, 1, 0,
                    hint="one value per input: normalise each input by its own clean and corrupted metric."),
        _patch_case("3 layers with MLPs, head 2.1", deep, clean_b, corrupted_b, 2, 1, hidden=True),
    ]
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="activation patching of one head", forbid=_TOOLS)


# ------------------------------------------------------------ direct logit attribution


def _dla_case(name, hm, ids, layer, head, token, hint="", hidden=False):
    """A case of head_dla, its expected value from the weights and a run by hand, and the usual mistakes."""
    import torch

    from deviating.exercises.by_hand import run_by_hand

    run = run_by_hand(hm, ids)
    model, d = hm.model, hm.d_head
    w_o = model.blocks[layer].attn.W_O.weight.detach().double()[:, head * d:(head + 1) * d].T  # (d_head, d_model)
    gamma, eps = model.ln_final.weight.detach().double(), model.config.ln_eps
    u = model.unembed.weight.detach().double()[token]  # (d_model,): the unembedding of `token`

    def dla(at=-1, centre=True, scale=True, with_gamma=True, bias=False, write=None):
        out = run.z[layer][:, at, head] @ w_o if write is None else write(at)  # (batch, d_model)
        if bias:
            out = out + model.blocks[layer].attn.W_O.bias.detach().double()
        final = run.resid[-1][:, at]
        sd = torch.sqrt(final.var(-1, unbiased=False) + eps)[:, None] if scale else 1.0
        out = (out - out.mean(-1, keepdim=True)) if centre else out
        return ((out / sd) @ (gamma * u if with_gamma else u)).numpy()

    mistakes = {
        "the final LayerNorm's scale is missing: divide by sqrt(var + eps) of the final residual stream "
        "of this run, at the same position": dla(scale=False),
        "the head's output is not centred: the LayerNorm subtracts each vector's mean over d_model first":
            dla(centre=False),
        "this is the whole residual stream's direct logit (every component), not the head's own write":
            dla(write=lambda at: run.resid[-1][:, at]),
        "the position is off: read the last position (-1)": dla(at=-2),
        "the LayerNorm's weight is missing: the logit reads gamma * x_normalised": dla(with_gamma=False),
        "W_O's bias is counted; it belongs to no head": dla(bias=True),
    }
    return Case(name, args=(hm, ids, layer, head, token), expected=dla(), hint=hint, hidden=hidden), mistakes


def check_head_dla(fn: Callable) -> None:
    """Check ``fn(hm, inputs, layer, head, token)``: per input, head ``(layer, head)``'s direct
    contribution to the logit of ``token`` at the last position, through the final LayerNorm with
    its scale frozen at the clean run's value. Expected values: from the weights and a run by hand."""
    import torch

    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    small, deep = tiny_gpt(seed=3), tiny_gpt(seed=4, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    g = torch.Generator().manual_seed(5)
    ids, ids_b = torch.randint(40, (3, 7), generator=g), torch.randint(40, (2, 10), generator=g)
    built = [
        _dla_case("head 1.2 of a 2-layer model, token 7, three inputs", small, ids, 1, 2, 7,
                  hint="the head writes z[:, -1, head] @ W_O[head]; centre it, divide by the final LayerNorm's "
                       "scale on this run, then take the dot product with gamma * W_U[:, token]."),
        _dla_case("head 0.0 of the same model, token 31", small, ids, 0, 0, 31,
                  hint="an earlier layer's head writes into the same final stream: the same formula."),
        _dla_case("3 layers with MLPs, head 2.1, token 12", deep, ids_b, 2, 1, 12,
                  hint="the scale is the one of the final residual stream (after the MLPs too)."),
        _dla_case("3 layers with MLPs, head 1.0, token 3", deep, ids_b, 1, 0, 3, hidden=True),
    ]
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="direct logit attribution of one head", forbid=_TOOLS)
