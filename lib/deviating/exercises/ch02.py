"""Checks for chapter 02, "The multi-head split"."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from deviating.exercises import Case, compare_arrays, run_cases
from deviating.exercises.ch02_more import (  # the layer-building checks, kept in their own module
    check_head_singular_values,
    check_head_statistics,
    check_merge_heads,
    check_multi_head,
    check_next_token_losses,
    check_uniform_baseline,
)
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head", "check_qk_ranks", "check_attention_cost",
           "check_zeroed_logits", "check_head_singular_values", "check_next_token_losses", "check_head_statistics",
           "check_uniform_baseline", "tiny_gpt2"]


# --------------------------------------------------------------------------- split_heads


def _encoded(batch: int, seq: int, d_model: int) -> np.ndarray:
    """``x[b, s, c] = 1000 b + 100 s + c``: every entry says where it stands."""
    return np.fromfunction(lambda b, s, c: 1000 * b + 100 * s + c, (batch, seq, d_model))


def _encoded_split(batch: int, seq: int, d_model: int, n_heads: int) -> np.ndarray:
    """Where each entry of ``_encoded`` must land: head h, position s, slot t holds column
    ``h * d_head + t`` of position s, i.e. the number ``1000 b + 100 s + h * d_head + t``."""
    d_head = d_model // n_heads
    return np.fromfunction(lambda b, h, s, t: 1000 * b + 100 * s + h * d_head + t,
                           (batch, n_heads, seq, d_head))


def check_split_heads(fn: Callable[[np.ndarray, int], Any]) -> None:
    """Check ``split_heads(x, n_heads)``: ``(batch, seq, d_model) -> (batch, n_heads, seq, d_head)``
    where head ``h`` gets the columns ``h * d_head ... (h + 1) * d_head - 1`` of every position."""
    x1, x2 = _encoded(1, 3, 4), _encoded(2, 5, 6)
    cases = [
        Case("one head: only a new axis", args=(x1, 1), expected=_encoded_split(1, 3, 4, 1),
             hint="with one head, d_head = d_model and the output is x with a head axis of size 1."),
        Case("x[b, s, c] = 1000 b + 100 s + c, shape (1, 3, 4), 2 heads: head 0 gets columns 0-1",
             args=(x1, 2), expected=_encoded_split(1, 3, 4, 2),
             hint="reshape to (batch, seq, n_heads, d_head) first, then swap the seq and head axes. "
                  "Reshaping straight to (batch, n_heads, seq, d_head) mixes positions."),
        Case("every column its own head: 4 heads of d_head = 1",
             args=(x1, 4), expected=_encoded_split(1, 3, 4, 4)),
        Case("a batch of 2, 5 positions, d_model = 6, 3 heads",
             args=(x2, 3), expected=_encoded_split(2, 5, 6, 3),
             hint="the batch axis stays first; each batch element is split the same way."),
        Case("a batch of 3, 2 positions, d_model = 8, 2 heads", args=(_encoded(3, 2, 8), 2),
             expected=_encoded_split(3, 2, 8, 2), hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_split_cases), compare=lambda got, exp: compare_arrays(got, exp, atol=0, rtol=0),
              what="splitting into heads", forbid=("deviating.kernels", "headlab.kernels"))


_DRAWN = MARK + ": "


def _drawn_split_cases(rng: np.random.Generator) -> list[Case]:
    """Encoded arrays of random sizes, shifted by a random number (drawn when grading: :mod:`.drawn`):
    one head (a new axis only), then two splits with at least 2 heads, 2 positions and 2 columns each."""
    cases = []
    for n_heads in (1, int(rng.integers(2, 5)), int(rng.integers(2, 5))):
        batch, d_head = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        seq = int(rng.choice([s for s in range(2, 7) if s != d_head * n_heads]))
        shift = float(rng.integers(-5000, 5000))
        x = shift + _encoded(batch, seq, n_heads * d_head)
        cases.append(Case(_DRAWN + f"shape {x.shape}, {n_heads} head(s)", args=(x, n_heads),
                          expected=shift + _encoded_split(batch, seq, n_heads * d_head, n_heads)))
    return cases


# --------------------------------------------------------------------------- ranks


def _planted_heads(heads: list[tuple[list[int], list[int]]], d_model: int, d_head: int,
                   seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``w_q, w_k`` of shape ``(d_model, n_heads * d_head)`` (``x @ w``). For head h, ``heads[h] =
    (q_slots, k_slots)`` lists which of its d_head columns are non-zero in W_Q^h and in W_K^h.

    ``W_Q^h W_K^h^T = sum_t q_t k_t^T`` over the slots t that both use, so its rank is exactly the
    number of shared slots (random Gaussian columns, d_model >= d_head), whatever the ranks of the two
    factors: Q on slots {0, 1} and K on {1, 2} have rank 2 each, and a product of rank 1.
    """
    rng = np.random.default_rng(seed)
    n = len(heads)
    w_q = np.zeros((d_model, n * d_head))
    w_k = np.zeros((d_model, n * d_head))
    for h, (q_slots, k_slots) in enumerate(heads):
        for t in q_slots:
            w_q[:, h * d_head + t] = rng.standard_normal(d_model)
        for t in k_slots:
            w_k[:, h * d_head + t] = rng.standard_normal(d_model)
    return w_q, w_k


def check_qk_ranks(fn: Callable[[np.ndarray, np.ndarray, int], Any]) -> None:
    """Check ``qk_ranks(w_q, w_k, n_heads)``: the rank of each head's ``W_Q^h (W_K^h)^T``.

    ``w_q, w_k`` are ``(d_model, n_heads * d_head)`` (applied as ``x @ w``); head h owns
    the columns ``h * d_head ... (h + 1) * d_head - 1``. The planted weights have known
    ranks: the number of columns that W_Q^h and W_K^h both use.
    """
    every = list(range(8))
    hint = ("take head h's columns of w_q and w_k, form the d_model x d_model product "
            "W_Q^h @ W_K^h.T and count its singular values above a tolerance "
            "(np.linalg.matrix_rank does exactly that).")
    cases = []
    for name, heads, d_model, d_head, seed, hidden, extra in [
        ("one head of d_head = 4 in d_model = 8, full rank", [(every[:4], every[:4])], 8, 4, 0, False, ""),
        ("two heads of d_head = 3, ranks 3 and 1", [(every[:3], every[:3]), (every[:3], [0])], 10, 3, 1,
         False, ""),
        ("two heads of d_head = 3: W_Q^0 uses columns {0, 1}, W_K^0 uses {1, 2}; head 1 is full",
         [([0, 1], [1, 2]), (every[:3], every[:3])], 10, 3, 3, False,
         " The rank of a product is not the smaller of the two ranks: here both factors have rank 2."),
        ("four heads of d_head = 8 in d_model = 32, ranks 8, 2, 5, 0",
         [(every, every), (every, every[:2]), (every, every[:5]), (every, [])], 32, 8, 2, False, ""),
        ("three heads of d_head = 4 in d_model = 12",
         [(every[:4], [0, 3]), ([0, 1], [2, 3]), ([1, 2, 3], every[:4])], 12, 4, 4, True, ""),
    ]:
        w_q, w_k = _planted_heads(heads, d_model, d_head, seed)
        ranks = [len(set(q) & set(k)) for q, k in heads]
        cases.append(Case(name, args=(w_q, w_k, len(heads)), expected=np.array(ranks), hidden=hidden,
                          hint=hint + extra))
    run_cases(fn, cases + drawn(_drawn_rank_cases), compare=lambda got, exp: compare_arrays(got, exp, atol=0, rtol=0),
              what="query-key ranks", forbid=("headlab.analysis", "headlab.heads"))


def _drawn_rank_cases(rng: np.random.Generator) -> list[Case]:
    """Planted heads with random slots (drawn when grading: :mod:`.drawn`). Each case has one head whose
    W_Q and W_K each use a slot the other does not, so its rank is below both factors' ranks."""
    cases = []
    for _ in range(2):
        d_head, n_heads = int(rng.integers(3, 7)), int(rng.integers(2, 5))
        d_model = int(rng.integers(d_head + 1, 3 * d_head + 2))
        heads = []
        for _ in range(n_heads):
            heads.append(([int(t) for t in np.flatnonzero(rng.random(d_head) < 0.6)],
                          [int(t) for t in np.flatnonzero(rng.random(d_head) < 0.6)]))
        crossed = rng.permutation(d_head)  # q on slots a, b; k on b, c: rank 1, both factors rank 2
        heads[int(rng.integers(n_heads))] = ([int(crossed[0]), int(crossed[1])], [int(crossed[1]), int(crossed[2])])
        w_q, w_k = _planted_heads(heads, d_model, d_head, int(rng.integers(2**31)))
        cases.append(Case(_DRAWN + f"{n_heads} heads of d_head = {d_head} in d_model = {d_model}",
                          args=(w_q, w_k, n_heads), expected=np.array([len(set(q) & set(k)) for q, k in heads])))
    return cases


# --------------------------------------------------------------------------- cost


def _compare_cost(got: Any, expected: dict[str, int]) -> str | None:
    if not isinstance(got, dict):
        return f"expected a dict with keys {sorted(expected)}, got {type(got).__name__}"
    missing = sorted(set(expected) - set(got))
    if missing:
        return f"missing keys {missing} (expected exactly {sorted(expected)})"
    for key, value in expected.items():
        try:
            g = int(got[key])
        except (TypeError, ValueError):
            return f"{key!r} must be a whole number, got {got[key]!r}"
        if g != value:
            return f"{key!r}: expected {value:,}, got {g:,}"
    return None


def check_attention_cost(fn: Callable[[int, int, int], Any]) -> None:
    """Check ``attention_cost(n, d_model, n_heads)``: operation counts of one multi-head
    self-attention layer on ``n`` positions (no mask, no batch).

    Expected keys: ``"projections"`` (multiply-adds of the four ``d_model x d_model``
    projections Q, K, V, O), ``"scores"`` (multiply-adds of every head's ``Q K^T``),
    ``"mixing"`` (multiply-adds of every head's ``pattern @ V``) and ``"softmax_exps"``
    (exponentials, one per pattern entry). The answers below are counted by hand.
    """
    cases = [
        Case("n = 2, d_model = 4, one head",
             args=(2, 4, 1), expected={"projections": 128, "scores": 16, "mixing": 16, "softmax_exps": 4},
             hint="each projection maps n vectors of d_model to d_model: n * d_model**2 multiply-adds; "
                  "scores: each of the n**2 (query, key) pairs costs d_head, and there are n_heads heads."),
        Case("n = 2, d_model = 4, two heads: only the softmax grows",
             args=(2, 4, 2), expected={"projections": 128, "scores": 16, "mixing": 16, "softmax_exps": 8},
             hint="n_heads * d_head = d_model, so the matmul work does not depend on the split; "
                  "every head has its own n x n pattern to exponentiate."),
        Case("n = 512, d_model = 512, 8 heads",
             args=(512, 512, 8), expected={"projections": 4 * 512**3, "scores": 512**3, "mixing": 512**3,
                                           "softmax_exps": 8 * 512**2}),
        Case("n = 1024, d_model = 64, 64 heads of d_head = 1",
             args=(1024, 64, 64), expected={"projections": 4 * 1024 * 64**2, "scores": 1024**2 * 64,
                                            "mixing": 1024**2 * 64, "softmax_exps": 64 * 1024**2},
             hint="with d_head = 1 the exponentials are as many as the score multiply-adds."),
        Case("n = 7, d_model = 12, 3 heads", args=(7, 12, 3), hidden=True,
             expected={"projections": 4 * 7 * 12**2, "scores": 3 * 7**2 * 4, "mixing": 3 * 7**2 * 4,
                       "softmax_exps": 3 * 7**2}),
    ]
    run_cases(fn, cases + drawn(_drawn_cost_cases), compare=_compare_cost, what="the cost of attention",
              forbid=("deviating.kernels", "headlab.kernels", "deviating.experiments"))


def _drawn_cost_cases(rng: np.random.Generator) -> list[Case]:
    """Random layers of at least 2 heads (drawn when grading: :mod:`.drawn`), each count written out:
    four (n, d_model) x (d_model, d_model) products; per head, n^2 dot products of length d_head twice;
    one exponential per entry of each head's n x n pattern."""
    cases = []
    for _ in range(3):
        n, n_heads, d_head = int(rng.integers(2, 2000)), int(rng.integers(2, 33)), int(rng.integers(1, 65))
        d_model = n_heads * d_head
        cases.append(Case(_DRAWN + f"n = {n}, d_model = {d_model}, {n_heads} heads", args=(n, d_model, n_heads),
                          expected={"projections": 4 * n * d_model * d_model, "scores": n_heads * n * n * d_head,
                                    "mixing": n_heads * n * n * d_head, "softmax_exps": n_heads * n * n}))
    return cases


# --------------------------------------------------------------------------- a hook at W_O's input


def tiny_gpt2(seed: int = 0, n_layer: int = 2, n_head: int = 4, n_embd: int = 32):
    """A small GPT-2 of Hugging Face's own class with random weights (built offline): the real
    architecture, where W_O is ``model.transformer.h[layer].attn.c_proj`` and its input is the
    heads' outputs side by side, ``(batch, pos, n_head * d_head)``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=50, n_positions=32, bos_token_id=0, eos_token_id=0,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # biases of W_O that are not zero, so that "after the bias" differs
        for block in model.transformer.h:
            block.attn.c_proj.bias.normal_(0.0, 0.5)
    return model


def _zeroed_reference(model, input_ids, heads) -> np.ndarray:
    """The logits with each head zeroed in turn, from the head interface's own gate (tested
    against a loop over heads in tests/test_sweep.py): an independent computation."""
    return _zeroed_reference_groups(model, input_ids, [[head] for head in heads])


def check_zeroed_logits(fn: Callable) -> None:
    """Check ``zeroed_logits(model, input_ids, heads)``: for each ``(layer, head)`` of ``heads`` in
    turn, the logits of the Hugging Face GPT-2 ``model`` with that one head's slice of W_O's input
    set to zero (a forward pre-hook on ``c_proj``, removed before the next head): an array
    ``(len(heads), batch, pos, vocab)``."""
    import torch

    model = tiny_gpt2(seed=0)
    ids = torch.tensor([[3, 17, 5, 3, 17, 40], [8, 8, 1, 22, 9, 30]])
    wide = tiny_gpt2(seed=1, n_layer=3, n_head=2, n_embd=24)
    ids_b = torch.tensor([[1, 2, 3, 4, 5, 6, 7], [9, 9, 9, 2, 2, 2, 0]])
    cases = [
        Case("head 1 of layer 0 (not head 0: its slice starts at column d_head, not at column 1)",
             args=(model, ids, [(0, 1)]), expected=_zeroed_reference(model, ids, [(0, 1)]),
             hint="the input of c_proj holds the heads side by side: head h is columns h * d_head to "
                  "(h + 1) * d_head, with d_head = n_embd // n_head. Zero only those, before W_O (a forward "
                  "*pre*-hook on c_proj), so that W_O's bias still comes through."),
        Case("two heads in turn: layer 1 head 3, then layer 0 head 2",
             args=(model, ids, [(1, 3), (0, 2)]), expected=_zeroed_reference(model, ids, [(1, 3), (0, 2)]),
             hint="remove each hook (handle.remove(), in a `finally:`) before the next head: the second "
                  "result must have only the second head zeroed."),
        Case("the last head of the last layer", args=(model, ids, [(1, 3)]),
             expected=_zeroed_reference(model, ids, [(1, 3)]),
             hint="the block of layer l is model.transformer.h[l]; zero the head's columns at every "
                  "position and every batch row."),
        Case("another GPT-2: 3 layers of 2 heads of width 12, three heads in turn",
             args=(wide, ids_b, [(2, 1), (0, 0), (1, 1)]),
             expected=_zeroed_reference(wide, ids_b, [(2, 1), (0, 0), (1, 1)]), hidden=True),
    ]
    # the answers of two common mistakes, to name them when they come back
    mistakes = {}
    for case in cases:
        m, x, heads = case.args
        n_head = m.config.n_head
        mistakes[id(case.expected)] = {
            "every head of the layer zeroed, not one": _zeroed_reference_groups(
                m, x, [[(layer, h) for h in range(n_head)] for layer, _ in heads]),
            "the hooks of the earlier heads still in place (remove each one before the next head)":
                _zeroed_reference_groups(m, x, [heads[:i + 1] for i in range(len(heads))]),
        }

    def compare(got, expected):
        if isinstance(got, _HooksLeft):
            return (f"the logits may be right, but {got.n} hook(s) were still on the model after the function "
                    "returned: remove each hook (handle.remove(), in a `finally:`) before returning")
        problem = compare_arrays(got, expected, atol=1e-5, rtol=1e-5)
        if problem is not None and len(heads_of := mistakes.get(id(expected), {})):
            for what, answer in heads_of.items():
                if answer.shape != expected.shape or np.allclose(answer, expected, atol=1e-5):
                    continue
                if compare_arrays(got, answer, atol=1e-5, rtol=1e-5) is None:
                    return f"these are the logits with {what}"
        return problem

    run_cases(_reader(fn), cases + drawn(_drawn_zeroed_cases), compare=compare, what="a hook that zeroes one head",
              forbid=("headlab.heads", "headlab.analysis"))


class _HooksLeft:
    """What the check sees when the reader's function returned with hooks still on the model."""

    def __init__(self, n: int):
        self.n = n

    def __repr__(self) -> str:
        return f"{self.n} hook(s) left on the model"


def _hook_count(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def _reader(fn: Callable) -> Callable:
    """The reader's function, followed by a look at the model it was given: a hook still registered
    after it returned is a failure, even when the logits are right (the task says to remove it)."""

    @functools.wraps(fn)
    def call(model, input_ids, heads):
        before = _hook_count(model)
        out = fn(model, input_ids, heads)
        left = _hook_count(model) - before
        return _HooksLeft(left) if left > 0 else out

    return call


def _drawn_zeroed_cases(rng: np.random.Generator) -> list[Case]:
    """A GPT-2 of random shape and weights, random token ids, and two or three heads in turn, at least
    one of them not head 0 (drawn when grading: :mod:`.drawn`); the answer from the head interface's gate."""
    import torch

    n_layer, n_head = int(rng.integers(1, 4)), int(rng.integers(2, 5))
    model = tiny_gpt2(seed=int(rng.integers(2**31)), n_layer=n_layer, n_head=n_head,
                      n_embd=n_head * int(rng.choice([4, 6, 8])))
    ids = torch.tensor(rng.integers(0, 50, size=(int(rng.integers(1, 3)), int(rng.integers(3, 9)))))
    every = [(layer, head) for layer in range(n_layer) for head in range(1, n_head)]
    first = every[int(rng.integers(len(every)))]
    others = [h for h in [(layer, head) for layer in range(n_layer) for head in range(n_head)] if h != first]
    heads = [first] + [others[int(i)] for i in rng.choice(len(others), size=int(rng.integers(1, 3)), replace=False)]
    heads = [heads[int(i)] for i in rng.permutation(len(heads))]
    return [Case(_DRAWN + f"{n_layer} layer(s) of {n_head} heads, heads {heads} in turn",
                 args=(model, ids, heads), expected=_zeroed_reference(model, ids, heads))]


def _zeroed_reference_groups(model, input_ids, groups) -> np.ndarray:
    """Like :func:`_zeroed_reference`, one group of heads ablated together per entry."""
    import torch

    from headlab.heads.model import HeadModel

    hm = HeadModel(model, name="tiny GPT-2")
    out = []
    with torch.no_grad():
        for group in groups:
            with hm.ablate([tuple(h) for h in group]):
                out.append(model(input_ids=input_ids).logits.numpy())
    return np.stack(out)
