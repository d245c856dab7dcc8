"""Checks for chapter 09, "The checklist".

Every case is built so that its answer is known by construction: hand-written tables of
per-input ablation deltas and pair effects, and hand-written attention patterns whose weight on
each query's target keys is known.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, run_cases
from deviating.exercises.drawn import MARK, drawn

_REPORT = ("headlab.report", "headlab.analysis.importance", "headlab.analysis.circuits", "headlab.analysis.prune")

__all__ = ["check_keep_list", "check_is_redundant", "check_target_weight", "check_logit_lens", "compare_heads"]


def compare_heads(got, expected) -> str | None:
    """A sorted list of distinct ``(layer, head)`` pairs, compared exactly."""
    try:
        heads = [(int(h[0]), int(h[1])) for h in got]
        if any(len(h) != 2 for h in got):
            raise ValueError
    except (TypeError, ValueError, IndexError):
        return f"expected a list of (layer, head) pairs, got {got!r}"
    if len(set(heads)) != len(heads):
        return "a head is listed twice: each head must appear once (whatever its number of reasons)"
    if heads != sorted(heads):
        return "the heads must be sorted by (layer, head)"
    if heads != expected:
        missing = sorted(set(expected) - set(heads))
        extra = sorted(set(heads) - set(expected))
        return f"missing {missing}, should not be there {extra}"
    return None


def _compare_bool(got, expected) -> str | None:
    if not isinstance(got, (bool, np.bool_)):
        return f"expected True or False, got {type(got).__name__} {got!r}"
    return None if bool(got) == expected else f"expected {expected}, got {bool(got)}"


def _effects(*rows) -> np.ndarray:
    """One layer per argument; each argument lists its heads' per-input deltas."""
    return np.array(rows, dtype=float)  # (n_layers, n_heads, n_inputs)


def check_keep_list(fn: Callable) -> None:
    """Check ``keep_list(effects, circuit_heads, backup_pairs, factor=1.0)``.

    It must return the sorted, distinct heads whose worst case (largest effect on one input) is
    at least ``factor`` times the largest mean effect of any head, plus every circuit member,
    plus both heads of every backup pair.
    """
    one_layer = _effects([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 2.0, 0.0], [0.1, 0.1, 0.1, 0.1]])
    two_layers = _effects([[0.4, 0.4], [0.0, 0.0]], [[0.0, 0.0], [0.1, 0.3]])
    run_cases(fn, [
        Case("one head matters on every input, the others never",
             args=(_effects([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), [], []), expected=[(0, 0)],
             hint="the head with the largest mean has a worst case at least as large: it is always kept."),
        Case("0.1 does nothing on average (mean 0.5) but 2.0 on input 2",
             args=(one_layer, [], []), expected=[(0, 0), (0, 1)],
             hint="compare each head's worst case (max over inputs) with the largest *mean* of any head."),
        Case("circuit members are kept whatever their effects",
             args=(two_layers, [(1, 0), (0, 1)], []), expected=[(0, 0), (0, 1), (1, 0)],
             hint="add every head of circuit_heads to the list."),
        Case("both heads of a backup pair are kept",
             args=(two_layers, [], [((0, 1), (1, 0))]), expected=[(0, 0), (0, 1), (1, 0)],
             hint="a backup pair is (removed, backup): keep both."),
        Case("a head whose removal helps (negative effects) is not kept",
             args=(_effects([[-1.0, -3.0], [0.5, 0.5]]), [], []), expected=[(0, 1)],
             hint="use signed effects: the largest mean is 0.5, and -1 is not a large worst case."),
        Case("factor=0.5 keeps heads whose worst case reaches half the largest mean",
             args=(two_layers, [], []), kwargs={"factor": 0.5}, expected=[(0, 0), (1, 1)],
             hint="the threshold is factor * (largest mean effect): 0.5 * 0.4 = 0.2 here; 1.1 reaches 0.3."),
        Case("a head with several reasons appears once",
             args=(one_layer, [(0, 0), (0, 1)], [((0, 0), (0, 1))]), expected=[(0, 0), (0, 1)],
             hint="collect the heads in a set, then sort them."),
        Case("the largest mean comes from another layer than the worst cases",
             args=(_effects([[0.1, 0.9, 0.1], [0.0, 0.0, 0.0]], [[0.5, 0.5, 0.5], [0.45, 0.0, 0.0]]),
                   [(1, 1)], []), expected=[(0, 0), (1, 0), (1, 1)],
             hint="the largest mean is over every head of every layer (0.5 here, head 1.0)."),
        Case("two layers of three heads, a circuit and a backup pair",
             args=(_effects([[0.2, 0.2], [0.0, 0.7], [0.1, 0.0]], [[0.3, 0.3], [-0.5, 0.2], [0.05, 0.05]]),
                   [(0, 2)], [((1, 2), (1, 1))]), expected=[(0, 1), (0, 2), (1, 1), (1, 2)], hidden=True),
    ] + drawn(_drawn_keep_cases), compare=compare_heads, what="heads to keep", forbid=_REPORT)


def check_is_redundant(fn: Callable) -> None:
    """Check ``is_redundant(single_a, single_b, pair, margin=0.1)`` on per-input effects.

    Redundant: the mean effect of removing both exceeds the sum of the mean single effects by
    more than ``margin`` times the absolute value of that sum.
    """
    def arr(*x):
        return np.array(x, dtype=float)

    run_cases(fn, [
        Case("additive heads: 1 + 1 = 2", args=(arr(1.0, 1.0), arr(1.0, 1.0), arr(2.0, 2.0)), expected=False,
             hint="when the pair costs exactly the sum of the singles, nothing is redundant."),
        Case("a backup pair: 0.1 + 0.1 alone, 1.0 together", args=(arr(0.1, 0.1), arr(0.1, 0.1), arr(1.0, 1.0)),
             expected=True, hint="the pair costs far more than the sum: each head covers for the other."),
        Case("overlapping heads: 1 + 1 alone, 1.2 together", args=(arr(1.0), arr(1.0), arr(1.2)), expected=False,
             hint="a pair that costs *less* than the sum is not redundant in this sense (the effects overlap)."),
        Case("inside the margin: 1 + 1 alone, 2.1 together", args=(arr(1.0), arr(1.0), arr(2.1)), expected=False,
             hint="2.1 - 2 = 0.1 is not more than margin * 2 = 0.2."),
        Case("the same, with margin=0.01", args=(arr(1.0), arr(1.0), arr(2.1)), kwargs={"margin": 0.01},
             expected=True, hint="0.1 is more than 0.01 * 2 = 0.02."),
        Case("invisible alone: 0 + 0, but 0.5 together", args=(arr(0.0, 0.0), arr(0.0, 0.0), arr(0.5, 0.5)),
             expected=True, hint="a sum of 0 gives a margin of 0: any positive pair effect is more."),
        Case("nothing at all: 0, 0 and 0", args=(arr(0.0), arr(0.0), arr(0.0)), expected=False,
             hint="'more than' is strict: 0 is not more than 0."),
        Case("means over inputs: a = [0, 2], b = [2, 0], pair = [2.5, 2.5]",
             args=(arr(0.0, 2.0), arr(2.0, 0.0), arr(2.5, 2.5)), expected=True,
             hint="compare means over inputs: 2.5 against 1 + 1."),
        Case("heads whose removal helps: -0.5 + -0.5 alone, -0.95 together",
             args=(arr(-0.5, -0.5), arr(-0.5, -0.5), arr(-0.95, -0.95)), expected=False,
             hint="the margin is margin * |sum|, a positive number: 0.05 is not more than 0.1 * |-1.0|."),
        Case("one input where the pair is much worse, one where it is not",
             args=(arr(1.0, 0.0), arr(1.0, 0.0), arr(2.5, 0.0)), expected=True,
             hint="compare the mean pair effect (1.25) with the sum of the mean single effects (1.0)."),
        Case("worse together on one input, better on the other: additive on average",
             args=(arr(1.0, 1.0), arr(1.0, 1.0), arr(3.0, 1.0)), expected=False,
             hint="decide on the means over inputs (2.0 against 1.0 + 1.0), not input by input."),
        Case("negative and positive singles", args=(arr(-1.0, 0.0), arr(0.25, 0.25), arr(-0.2, 0.0)),
             expected=True, hidden=True),
    ] + drawn(_drawn_redundant_cases), compare=_compare_bool, what="is a pair redundant", forbid=_REPORT)


def _pattern(rows) -> "torch.Tensor":
    import torch

    return torch.tensor(rows, dtype=torch.float32)


def _compare_grid(got, expected) -> str | None:
    import torch

    try:
        got = torch.as_tensor(got, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return f"got {type(got).__name__}, expected a (batch, head) tensor of numbers"
    want = torch.as_tensor(expected, dtype=torch.float64)
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)} (one value per input and head)"
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return "NaN where the answer is a number, or a number where no query has a target"
    ok = torch.isnan(want) | ((got - want).abs() <= 1e-5)
    return None if bool(ok.all()) else "wrong values"


def check_target_weight(fn: Callable) -> None:
    """Check ``target_weight(pattern, targets, attention_mask)``: per input and head, the mean over
    the real queries that have at least one target of the total attention weight on their targets
    (NaN for an input with no such query)."""
    import torch

    one = torch.tensor([[1, 1, 1]])
    # 1 input, 1 head, 3 positions (causal rows); query 2 should read key 1
    p1 = _pattern([[[[1, 0, 0], [0.5, 0.5, 0], [0.1, 0.7, 0.2]]]])
    t1 = torch.zeros(1, 3, 3, dtype=torch.bool)
    t1[0, 2, 1] = True
    # two heads that differ; two queries with targets, one query without
    p2 = _pattern([[[[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.6, 0.2, 0], [0.1, 0.1, 0.4, 0.4]],
                    [[1, 0, 0, 0], [0.9, 0.1, 0, 0], [0.0, 0.0, 1.0, 0], [0.25, 0.25, 0.25, 0.25]]]])
    t2 = torch.zeros(1, 4, 4, dtype=torch.bool)
    t2[0, 2, 1] = True
    t2[0, 3, 2] = True
    # one query with two targets: their weights add up
    t3 = torch.zeros(1, 4, 4, dtype=torch.bool)
    t3[0, 3, 1] = t3[0, 3, 2] = True
    # a batch of two: input 0 has one eligible query, input 1 has two; input 1's last position is padding
    p4 = torch.cat([p2[:, :1], p2[:, :1]])  # (2, 1, 4, 4), head 0 of p2 twice
    t4 = torch.zeros(2, 4, 4, dtype=torch.bool)
    t4[0, 2, 1] = True
    t4[1, 2, 1] = True
    t4[1, 1, 0] = True
    t4[1, 3, 2] = True  # a target at a padded query: it does not count
    mask4 = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    # no query has a target in input 1
    t5 = t4.clone()
    t5[1] = False
    g = torch.Generator().manual_seed(9)
    p6 = torch.softmax(torch.randn(3, 2, 5, 5, generator=g) + torch.triu(torch.full((5, 5), -1e9), 1), dim=-1)
    t6 = torch.zeros(3, 5, 5, dtype=torch.bool)
    t6[0, 3, 1] = t6[0, 4, 2] = t6[1, 4, 0] = t6[1, 4, 3] = t6[2, 2, 1] = True
    mask6 = torch.tensor([[1] * 5, [1] * 5, [1, 1, 1, 0, 0]])
    e6 = torch.stack([
        torch.stack([(p6[0, h, 3, 1] + p6[0, h, 4, 2]) / 2 for h in range(2)]),
        torch.stack([p6[1, h, 4, 0] + p6[1, h, 4, 3] for h in range(2)]),
        torch.stack([p6[2, h, 2, 1] for h in range(2)]),
    ])
    run_cases(fn, [
        Case("one query, one target", args=(p1, t1, one), expected=torch.tensor([[0.7]]),
             hint="query 2 puts 0.7 on its target key 1."),
        Case("queries without a target do not count", args=(p2, t2, torch.ones(1, 4, dtype=torch.long)),
             expected=torch.tensor([[0.5, 0.125]]),
             hint="average over the queries that have a target (2 and 3), not over every query; one value "
                  "per head."),
        Case("a query with two targets", args=(p2, t3, torch.ones(1, 4, dtype=torch.long)),
             expected=torch.tensor([[0.5, 0.5]]),
             hint="add up the weight on every target key of the query."),
        Case("a batch: one mean per input, padding left out", args=(p4, t4, mask4),
             expected=torch.tensor([[0.6], [0.55]]),
             hint="input 1's query 3 is padding (attention_mask 0): its target does not count; and each input "
                  "gets its own mean."),
        Case("an input with no target at all", args=(p4, t5, mask4), expected=torch.tensor([[0.6], [float("nan")]]),
             hint="an input where no query has a target has no score: return NaN there, not 0."),
        Case("random causal patterns, three inputs, two heads", args=(p6, t6, mask6), expected=e6, hidden=True),
    ] + drawn(_drawn_target_cases), compare=_compare_grid, what="the detector", forbid=_REPORT)


# --------------------------------------------------------------------------- the logit lens


def _lens_case(name, hm, ids, hint="", hidden=False):
    """A case of logit_lens: the expected log-probabilities from a run by hand, and the usual mistakes."""
    import torch

    from deviating.exercises.by_hand import run_by_hand

    run = run_by_hand(hm, ids)
    model = hm.model
    ln, eps = model.ln_final, model.config.ln_eps
    w_u, b_u = model.unembed.weight.detach().double(), model.unembed.bias.detach().double()
    gamma, beta = ln.weight.detach().double(), ln.bias.detach().double()

    def lens(streams, norm=True, frozen=None, out="log-probs", axis=-1):
        rows = []
        for x in streams:
            if norm:
                centred = x - x.mean(-1, keepdim=True)
                ref = x if frozen is None else frozen
                x = centred / torch.sqrt(ref.var(-1, unbiased=False, keepdim=True) + eps) * gamma + beta
            logits = x @ w_u.T + b_u
            rows.append(logits if out == "logits" else logits.log_softmax(axis) if out == "log-probs"
                        else logits.softmax(-1))
        return torch.stack(rows).numpy()

    after = run.resid[1:]
    mistakes = {
        "the final LayerNorm is skipped: read each stream through hm.model.ln_final before the unembedding":
            lens(after, norm=False),
        "these are the streams *before* each layer (the embeddings first); the lens reads the stream after "
        "layer l, so its last entry is the model's own output": lens(run.resid[:-1]),
        "these are logits; return log-probabilities (log_softmax over the vocabulary)": lens(after, out="logits"),
        "these are probabilities; return their logarithm (log_softmax over the vocabulary)":
            lens(after, out="probs"),
        "the final stream's LayerNorm scale is used for every layer; apply ln_final afresh to each layer's "
        "stream": lens(after, frozen=run.resid[-1]),
        "the log_softmax is over the wrong axis: normalise over the vocabulary (the last axis)":
            lens(after, axis=-2),
    }
    return Case(name, args=(hm, ids), expected=lens(after), hint=hint, hidden=hidden), mistakes


def check_logit_lens(fn: Callable) -> None:
    """Check ``fn(hm, inputs)``: ``(n_layers, batch, pos, d_vocab)``, the next-token log-probabilities
    read from the residual stream after each layer through the final LayerNorm and the unembedding
    (so the last entry is the model's own output). Expected values: from a run by hand."""
    import torch

    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    g = torch.Generator().manual_seed(11)
    small, deep = tiny_gpt(seed=5), tiny_gpt(seed=6, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    built = [
        _lens_case("a 2-layer model, two inputs of 6 tokens", small, torch.randint(40, (2, 6), generator=g),
                   hint="one entry per layer l: the stream after block l, through hm.model.ln_final and "
                        "hm.model.unembed, then log_softmax over the vocabulary."),
        _lens_case("3 layers with MLPs, three inputs of 5 tokens", deep, torch.randint(40, (3, 5), generator=g),
                   hint="the stream after a block includes its MLP's write (the block's output)."),
        _lens_case("3 layers with MLPs, one input of 9 tokens", deep, torch.randint(40, (1, 9), generator=g),
                   hidden=True),
    ]
    named = naming_compare({id(c.expected): m for c, m in built}, atol=1e-4)

    def compare(got, expected):
        shape = tuple(getattr(got, "shape", ()))
        if len(shape) == 4 and shape[0] == expected.shape[0] + 1 and shape[1:] == expected.shape[1:]:
            return (f"{shape[0]} entries for {expected.shape[0]} layers: the embeddings are not a layer; "
                    "return one entry per layer, the stream after it")
        return named(got, expected)

    cases = [c for c, _ in built] + drawn(_drawn_lens_cases)
    run_cases(fn, cases, compare=compare, what="the logit lens",
              forbid=("headlab.analysis", "deviating.analysis", "deviating.exercises.by_hand"))


# ------------------------------------------------- cases drawn from the secret seed (:mod:`.drawn`)


def _drawn_keep_cases(rng: np.random.Generator) -> list[Case]:
    """Two tables: in layer 0, a peak head with the same effect M on every input and a tail head at
    0 but on one input, where it reaches 1.2-2 M; in layer 1, a leader at M / 4 everywhere; filler
    heads in [0, 0.2 M]; a head whose removal always helps (-3 M to -2 M); one filler in the
    circuit, two in a backup pair. Only the peak and the tail reach the bar M."""
    cases = []
    for _ in range(2):
        layers, heads, n = int(rng.integers(2, 4)), int(rng.integers(4, 6)), int(rng.integers(4, 7))
        big = rng.integers(8, 17) / 8  # dyadic: a mean of equal values is exact
        effects = rng.uniform(0.0, 0.2 * big, size=(layers, heads, n))
        peak, tail = ((0, int(h)) for h in rng.choice(heads, size=2, replace=False))
        leader = (1, int(rng.integers(heads)))
        rest = [(l, h) for l in range(layers) for h in range(heads) if (l, h) not in (peak, tail, leader)]
        helps, member, removed, backup = (rest[int(i)] for i in rng.choice(len(rest), 4, replace=False))
        effects[peak] = big
        effects[leader] = 0.25 * big
        effects[tail] = 0.0
        effects[tail][int(rng.integers(n))] = rng.uniform(1.2, 2.0) * big
        effects[helps] = rng.uniform(-3.0, -2.0, size=n) * big
        cases.append(Case(MARK + f": {layers} layers of {heads} heads, {n} inputs",
                          args=(effects, [member], [(removed, backup)]),
                          expected=sorted({peak, tail, member, removed, backup})))
    return cases


def _drawn_redundant_cases(rng: np.random.Generator) -> list[Case]:
    """Four kinds, with drawn sizes (dyadic numbers, so that a boundary is exact): helping heads that
    overlap and helping heads that cover for each other (the sign of the sum matters), a pair exactly
    at the margin, and a pair worse on one input and better on another with additive means."""
    def const(x, n):
        return np.full(n, x)

    n = int(rng.integers(2, 6))
    a, b = -rng.integers(4, 16) / 8, -rng.integers(4, 16) / 8  # removing either helps
    s = a + b
    pos_a, pos_b = rng.integers(4, 16) / 8, rng.integers(4, 16) / 8
    v = rng.integers(8, 16) / 4
    return [
        Case(MARK + ": two heads whose removal helps; together a little worse than the sum",
             args=(const(a, n), const(b, n), const(s + 0.05 * abs(s), n)), expected=False),
        Case(MARK + ": two heads whose removal helps; together far worse than the sum",
             args=(const(a, n), const(b, n), const(s + 0.5 * abs(s), n)), expected=True),
        Case(MARK + ": a pair exactly at the margin", args=(const(pos_a, n), const(pos_b, n),
             const(1.25 * (pos_a + pos_b), n)), kwargs={"margin": 0.25}, expected=False),
        Case(MARK + ": worse together on one input, better on the other",
             args=(np.array([pos_a, pos_a]), np.array([pos_b, pos_b]),
                   np.array([pos_a + pos_b + v, pos_a + pos_b - v])), expected=False),
    ]


def _drawn_target_cases(rng: np.random.Generator) -> list[Case]:
    """Two batches of three random causal patterns: input 0 has queries without a target and one
    with two targets; input 1 ends in padding, with a target at a padded query; input 2 has no
    target. The expected means are summed from the planted targets."""
    import torch

    cases = []
    for _ in range(2):
        pos, heads = int(rng.integers(5, 8)), int(rng.integers(2, 4))
        scores = torch.as_tensor(rng.normal(size=(3, heads, pos, pos)) * 2)
        p = torch.softmax(scores + torch.triu(torch.full((pos, pos), -1e9), 1).double(), -1).float()
        t = torch.zeros(3, pos, pos, dtype=torch.bool)
        q1, q2 = (int(x) for x in rng.choice(np.arange(2, pos), size=2, replace=False))
        t[0, q1, 0] = t[0, q2, 1] = t[0, q2, 0] = True  # q2 has two targets
        real = int(rng.integers(3, pos))  # input 1: positions >= real are padding
        t[1, real - 1, 0] = True
        t[1, pos - 1, 1] = True  # a padded query: it does not count
        mask = torch.ones(3, pos, dtype=torch.long)
        mask[1, real:] = 0
        w = p.double()
        first = (w[0, :, q1, 0] + w[0, :, q2, 0] + w[0, :, q2, 1]) / 2
        expected = torch.stack([first, w[1, :, real - 1, 0], torch.full((heads,), float("nan"))])
        cases.append(Case(MARK + f": 3 inputs, {heads} heads, {pos} positions", args=(p, t, mask),
                          expected=expected))
    return cases


def _drawn_lens_cases(rng: np.random.Generator) -> list[Case]:
    """A random book GPT of 2 or 3 layers, with or without MLPs, on drawn tokens."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    layers, mlp = int(rng.integers(2, 4)), int(rng.choice([0, 32]))
    hm = tiny_gpt(seed=int(rng.integers(1000)), n_layers=layers, n_heads=2, d_model=16, d_mlp=mlp)
    ids = torch.as_tensor(rng.integers(40, size=(int(rng.integers(1, 3)), int(rng.integers(4, 8)))))
    case, _ = _lens_case(MARK + f": {layers} layers, MLPs {bool(mlp)}", hm, ids)
    return [case]
