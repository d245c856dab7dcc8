"""Checks for chapter 5's second part, "Who gave what to whom: a circuit of many heads" (the
metric, the ABC twins, attention between positions, direct logit attribution; path patching, the
backup test and faithfulness are in :mod:`deviating.exercises.ch05b_more`).

Every known answer is built by construction or from a forward pass written out by hand
(:mod:`deviating.exercises.by_hand`) on small random GPTs: logits set entry by entry, patterns
whose weights are placed by hand, and the model run from its weights in float64 with heads
zeroed or replaced. No expected value comes from the head interface or from
:mod:`deviating.analysis.ioi`, which the student's function may not call.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_ioi_logit_diff", "check_abc_twins", "check_attention_between", "check_ioi_head_dla",
           "FORBIDDEN", "DRAWN", "random_prompts", "dla_by_hand", "small_models", "drawn_model"]

_BY_HAND = "deviating.exercises.by_hand"
FORBIDDEN = ("headlab.analysis", "deviating.analysis", "deviating.data.ioi", _BY_HAND)  # the library's answers
_TOOLS = FORBIDDEN
DRAWN = MARK + ": "  # how the name of a drawn case begins


def random_prompts(seed: int, n: int, pos: int, vocab: int = 40):
    """Random token ids ``(n, pos)`` and, per row, an END before the last position (so reading the last
    position is wrong), the IO and S token ids (distinct)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (n, pos), generator=g)
    end = pos - 1 - torch.randint(1, 3, (n,), generator=g)
    io = torch.randint(vocab, (n,), generator=g)
    s = (io + 1 + torch.randint(vocab - 1, (n,), generator=g)) % vocab
    return ids, end, io, s


def _metric(logits: torch.Tensor, end, io, s, at=None) -> torch.Tensor:
    rows = torch.arange(len(end))
    where = end if at is None else at
    return logits[rows, where, io] - logits[rows, where, s]


# ------------------------------------------------------------------------------ the metric


def check_ioi_logit_diff(fn: Callable) -> None:
    """Check ``fn(logits, end, io_id, s_id)``: per prompt, ``logit(IO) - logit(S)`` at the prompt's END."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 10, generator=g)
    end, io, s = torch.tensor([3, 5, 2]), torch.tensor([1, 4, 7]), torch.tensor([2, 0, 9])
    planted = torch.zeros(2, 5, 8)
    planted[0, 2, 3], planted[0, 2, 5], planted[0, 4, 5] = 2.0, -1.0, 7.0  # END = 2; a decoy at the last position
    planted[1, 3, 1], planted[1, 3, 6] = 0.5, 0.25
    cases = [
        Case("two prompts, logits set by hand: prompt 0 ends at position 2, prompt 1 at 3",
             args=(planted, torch.tensor([2, 3]), torch.tensor([3, 1]), torch.tensor([5, 6])),
             expected=np.array([3.0, 0.25]),
             hint="read each prompt's logits at its own END, not at the last position (padding follows END)."),
        Case("random logits, three prompts of different END", args=(logits, end, io, s),
             expected=_metric(logits, end, io, s).numpy(),
             hint="one value per prompt, read at that prompt's own END, IO against S."),
        Case("the same logits, IO and S swapped", args=(logits, end, s, io),
             expected=_metric(logits, end, s, io).numpy(), hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_metric_cases), what="the indirect-object logit difference",
              forbid=_TOOLS)


def _drawn_metric_cases(rng: np.random.Generator) -> list[Case]:
    """Random logits with each prompt's IO and S logits planted at its END (drawn when grading); every
    END lies before the last position, and the planted difference is larger than any other entry."""
    cases = []
    for _ in range(3):
        n, pos, vocab = int(rng.integers(2, 6)), int(rng.integers(5, 9)), int(rng.integers(8, 20))
        logits = torch.as_tensor(rng.normal(size=(n, pos, vocab)))
        end = torch.as_tensor(rng.integers(1, pos - 1, size=n))
        io = torch.as_tensor(rng.integers(0, vocab, size=n))
        s = (io + torch.as_tensor(rng.integers(1, vocab, size=n))) % vocab
        want = torch.as_tensor(rng.choice([-1.0, 1.0], size=n) * rng.uniform(4.0, 9.0, size=n))
        rows = torch.arange(n)
        logits[rows, end, io] = logits[rows, end, s] + want
        cases.append(Case(DRAWN + f"{n} prompts of {pos} positions, {vocab} tokens", args=(logits, end, io, s),
                          expected=want.numpy()))
    return cases


# ----------------------------------------------------------------------- the ABC twins


def _abc_compare(got, spec) -> str | None:
    tokens, pos, names = spec["tokens"], spec["pos"], set(spec["names"])
    try:
        out = torch.as_tensor(np.asarray(got)).long()
    except (TypeError, ValueError):
        return f"expected a tensor of token ids, got {type(got).__name__}"
    if out.shape != tokens.shape:
        return f"wrong shape: expected {tuple(tokens.shape)} (the clean prompts' shape), got {tuple(out.shape)}"
    rows = torch.arange(len(tokens))
    keep = torch.ones_like(tokens, dtype=torch.bool)
    for p in pos:
        keep[rows, p] = False
    if not torch.equal(out[keep], tokens[keep]):
        return "a token outside the three name slots (S1, IO, S2) changed: only those three positions may change"
    slots = torch.stack([out[rows, p] for p in pos], 1)
    for i, row in enumerate(slots.tolist()):
        if not set(row) <= names:
            return f"prompt {i}: a slot holds {row}, not all drawn from the names given ({sorted(names)})"
        if len(set(row)) != 3:
            return (f"prompt {i}: the name slots hold {row}: the ABC twin needs three *different* names "
                    "(no name repeated, so the prompt no longer says who was mentioned twice)")
    return None


def check_abc_twins(fn: Callable) -> None:
    """Check ``fn(tokens, s1, io, s2, name_ids, seed)``: a new tensor, the clean prompts with the
    slots S1, IO and S2 of each row filled with three different names of ``name_ids``, nothing
    else changed, the input left as it was."""
    g = torch.Generator().manual_seed(1)
    names = [11, 12, 13, 14]
    tokens = torch.randint(20, 40, (40, 9), generator=g)
    s1, io = torch.tensor([2, 3] * 20), torch.tensor([3, 2] * 20)
    s2 = torch.full((40,), 6)
    tokens[torch.arange(40), s1] = tokens[torch.arange(40), s2] = 11
    tokens[torch.arange(40), io] = 12
    few = tokens[:4].clone()
    cases = [
        Case("40 prompts, S1 and IO in both orders, four names to draw from",
             args=(tokens, s1, io, s2, names, 0), expected={"tokens": tokens, "pos": (s1, io, s2), "names": names},
             hint="each twin needs three names that differ from one another, in a copy of the prompts.", unchanged=True),
        Case("four prompts, exactly three names: every twin uses all three", args=(few, s1[:4], io[:4], s2[:4],
             names[:3], 5), expected={"tokens": few, "pos": (s1[:4], io[:4], s2[:4]), "names": names[:3]},
             hidden=True, unchanged=True),
    ]
    run_cases(fn, cases + drawn(_drawn_abc_cases), compare=_abc_compare,
              what="the ABC twins of indirect-object prompts", forbid=_TOOLS)


def _drawn_abc_cases(rng: np.random.Generator) -> list[Case]:
    """Random prompts (drawn when grading) with S1 and IO at drawn places before S2; 30 prompts and three
    or four names, so a draw with repeats shows in some prompt on every seed."""
    cases = []
    for k in (3, 4):
        n, pos = 30, int(rng.integers(8, 12))
        names = sorted(int(x) for x in rng.choice(np.arange(5, 15), size=k, replace=False))
        tokens = torch.as_tensor(rng.integers(20, 40, size=(n, pos)))
        first = torch.as_tensor(rng.integers(0, pos - 4, size=n))
        gap = torch.as_tensor(rng.integers(1, 3, size=n))
        swap = torch.as_tensor(rng.integers(0, 2, size=n)).bool()
        s1, io = torch.where(swap, first + gap, first), torch.where(swap, first, first + gap)
        s2 = torch.full((n,), pos - 2)
        rows = torch.arange(n)
        tokens[rows, s1] = tokens[rows, s2] = names[0]
        tokens[rows, io] = names[1]
        cases.append(Case(DRAWN + f"{n} prompts of {pos} tokens, {k} names", args=(tokens, s1, io, s2, names,
                          int(rng.integers(100))), expected={"tokens": tokens, "pos": (s1, io, s2), "names": names},
                          unchanged=True))
    return cases


# ------------------------------------------------------------------------ attention between


def check_attention_between(fn: Callable) -> None:
    """Check ``fn(patterns, query_pos, key_pos)``: each head's mean attention, over prompts, from
    ``query_pos[i]`` to ``key_pos[i]`` of prompt ``i``; ``patterns`` ``(n, n_layers, n_heads, pos, pos)``."""
    n, L, H, P = 3, 2, 2, 6
    pat = torch.tril(torch.ones(P, P)) / torch.arange(1, P + 1)[:, None]
    patterns = pat.expand(n, L, H, P, P).clone()
    q, k = torch.tensor([5, 4, 5]), torch.tensor([1, 2, 3])
    for i in range(n):
        patterns[i, 1, 0, q[i]] = 0.0
        patterns[i, 1, 0, q[i], k[i]] = 1.0  # head 1.0 attends from END to the name: 1
    patterns[0, 0, 1, q[0]] = 0.0
    patterns[0, 0, 1, q[0], k[0]] = 1.0  # head 0.1 does so in the first prompt only: 1/3 in all
    expected = torch.stack([patterns[i, :, :, q[i], k[i]] for i in range(n)]).mean(0)
    g = torch.Generator().manual_seed(2)
    rand = torch.rand(4, 3, 2, 7, 7, generator=g).tril()
    rand = rand / rand.sum(-1, keepdim=True)
    q2, k2 = torch.tensor([6, 5, 6, 4]), torch.tensor([2, 2, 0, 3])
    cases = [
        Case("three prompts, head 1.0 always on the name, head 0.1 in the first prompt only",
             args=(patterns, q, k), expected=expected.numpy(),
             hint="each prompt has its own pair of positions; the query axis comes before the key axis."),
        Case("random causal patterns, 3 layers of 2 heads, four prompts", args=(rand, q2, k2),
             expected=torch.stack([rand[i, :, :, q2[i], k2[i]] for i in range(4)]).mean(0).numpy(), hidden=True),
    ]
    run_cases(fn, cases + drawn(_drawn_attention_cases), what="attention between ground-truth positions",
              forbid=_TOOLS)


def _drawn_attention_cases(rng: np.random.Generator) -> list[Case]:
    """Random causal patterns (drawn when grading) with each prompt's query row set by hand: the weight on
    its key drawn first, the rest spread evenly; query and key positions differ from prompt to prompt."""
    cases = []
    for _ in range(2):
        n, L, H, P = int(rng.integers(3, 6)), int(rng.integers(1, 4)), int(rng.integers(2, 4)), int(rng.integers(6, 9))
        rand = torch.as_tensor(rng.uniform(size=(n, L, H, P, P))).tril()
        rand = rand / rand.sum(-1, keepdim=True)
        q = torch.as_tensor([int(rng.integers(3, P - 1)) for _ in range(n)])
        k = torch.as_tensor([int(rng.integers(0, int(qi))) for qi in q])
        w = torch.as_tensor(rng.uniform(0.3, 0.9, size=(n, L, H)))
        expected = w.mean(0)
        for i in range(n):
            rest = (1 - w[i]) / int(q[i])  # the other q[i] keys share what is left
            rand[i, :, :, q[i], :int(q[i]) + 1] = rest[..., None]
            rand[i, :, :, q[i], k[i]] = w[i]
        cases.append(Case(DRAWN + f"{n} prompts, {L} layers of {H} heads, {P} positions", args=(rand, q, k),
                          expected=expected.numpy()))
    return cases


# ------------------------------------------------------------------ by hand: DLA, patches


def _w_o(hm, layer: int, head: int) -> torch.Tensor:
    d = hm.d_head
    return hm.model.blocks[layer].attn.W_O.weight.detach().double()[:, head * d:(head + 1) * d].T  # (d_head, d_model)


def dla_by_hand(hm, run, end, io, s, centre=True, scale=True, at=None, only_io=False, bias=False):
    """``(n, n_layers, n_heads)``: each head's direct share of logit(IO) - logit(S) at END, from a run by
    hand (:func:`~deviating.exercises.by_hand.run_by_hand`); the keywords make the known mistakes."""
    model = hm.model
    gamma, eps = model.ln_final.weight.detach().double(), model.config.ln_eps
    W_U = model.unembed.weight.detach().double()  # (d_vocab, d_model)
    rows = torch.arange(len(end))
    where = end if at is None else at
    u = W_U[io] - (0 if only_io else W_U[s])  # (n, d_model)
    final = run.resid[-1][rows, where]
    sd = torch.sqrt(final.var(-1, unbiased=False) + eps)[:, None] if scale else torch.ones(len(end), 1)
    out = torch.zeros(len(end), hm.n_layers, hm.n_heads, dtype=torch.float64)
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            w = run.z[l][rows, where, h] @ _w_o(hm, l, h)
            if bias:
                w = w + model.blocks[l].attn.W_O.bias.detach().double()
            w = w - w.mean(-1, keepdim=True) if centre else w
            out[:, l, h] = ((w / sd) * gamma * u).sum(-1)
    return out


def small_models():
    """The fixed cases' two random GPTs: 2 layers of 4 heads, and 3 layers of 2 heads with MLPs."""
    from deviating.exercises.by_hand import tiny_gpt

    return tiny_gpt(seed=11), tiny_gpt(seed=12, n_layers=3, n_heads=2, d_model=24, d_mlp=48)


def drawn_model(rng: np.random.Generator):
    """A random GPT of drawn weights and size (2 or 3 layers, 2 to 4 heads, with or without MLPs) and
    the seed of its prompts, for a case drawn when grading."""
    from deviating.exercises.by_hand import tiny_gpt

    seed = int(rng.integers(1000, 10**6))
    layers, heads, mlp = int(rng.integers(2, 4)), int(rng.integers(2, 5)), int(rng.choice([0, 32]))
    return tiny_gpt(seed=seed, n_layers=layers, n_heads=heads, d_model=8 * heads, d_mlp=mlp), seed + 1


def check_ioi_head_dla(fn: Callable) -> None:
    """Check ``fn(hm, ids, end, io_id, s_id)``: ``(n, n_layers, n_heads)``, each head's direct share
    of ``logit(IO) - logit(S)`` at each prompt's END, the final LayerNorm's scale frozen at the run's."""
    from deviating.exercises.by_hand import naming_compare

    small, deep = small_models()
    built = [_dla_case("a 2-layer model of 4 heads, three prompts", small, 0, 3),
             _dla_case("3 layers with MLPs, 2 heads each, four prompts", deep, 1, 4),
             _dla_case("the 2-layer model, other prompts", small, 2, 3, hidden=True)]
    built += drawn(_drawn_dla_cases)
    run_cases(fn, [c for c, _ in built], compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="direct logit attribution of the task", forbid=_TOOLS)




def _dla_case(name: str, hm, seed: int, n: int, hidden: bool = False) -> tuple[Case, dict]:
    """A case of ``n`` random prompts (``seed``) on ``hm`` and the answers of the known mistakes."""
    from deviating.exercises.by_hand import run_by_hand

    ids, end, io, s = random_prompts(seed, n, 9)
    run = run_by_hand(hm, ids)
    last = torch.full_like(end, ids.shape[1] - 1)
    mistakes = {
        "the final LayerNorm's scale is missing: divide by sqrt(var + eps) of the final stream at END":
            dla_by_hand(hm, run, end, io, s, scale=False),
        "the head's write is not centred: the LayerNorm subtracts its mean over d_model first":
            dla_by_hand(hm, run, end, io, s, centre=False),
        "this is read at the last position; read each prompt at its END": dla_by_hand(hm, run, end, io, s, at=last),
        "this is the share of logit(IO) alone: use the direction W_U[:, IO] - W_U[:, S]":
            dla_by_hand(hm, run, end, io, s, only_io=True),
        "W_O's bias is counted; it belongs to no head": dla_by_hand(hm, run, end, io, s, bias=True),
    }
    return (Case(name, args=(hm, ids, end, io, s), expected=dla_by_hand(hm, run, end, io, s).numpy(),
                 hint="each head's write at END goes through the final LayerNorm as the whole stream does "
                      "(centred, divided by the run's scale, times gamma), then onto the two names' directions.",
                 hidden=hidden), mistakes)


def _drawn_dla_cases(rng: np.random.Generator) -> list[tuple[Case, dict]]:
    """Two random GPTs of drawn size and weights, three or four random prompts each (drawn when grading)."""
    out = []
    for _ in range(2):
        hm, seed = drawn_model(rng)
        out.append(_dla_case(DRAWN + f"{hm.n_layers} layers of {hm.n_heads} heads, drawn weights", hm, seed,
                             int(rng.integers(3, 5))))
    return out
