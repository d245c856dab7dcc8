"""Checks for chapter 7, "What breaks when specialisation is ignored"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_worst_case_order", "check_layer_mean_z", "check_flag_looking_back", "check_pruning_curve"]


def _same_order(got, expected) -> str | None:
    try:
        got = [tuple(int(v) for v in h) for h in got]
    except (TypeError, ValueError):
        return f"expected a list of (layer, head) pairs, got {type(got).__name__}"
    if len(got) != len(expected):
        return f"expected all {len(expected)} heads, got {len(got)}"
    if got != list(expected):
        first = next(i for i, (g, e) in enumerate(zip(got, expected)) if g != e)
        return f"a different order (least important first); the first difference is at place {first}"
    return None


def _many_ties() -> tuple[np.ndarray, list[tuple[int, int]]]:
    """4 layers x 16 heads whose worst cases take three values (0.1, 0.5, 0.9), many tied.

    The expected order lists the 0.1 heads in layer-major order, then the 0.5 heads, then the 0.9
    heads: what a stable sort gives, and what numpy's default (unstable) argsort does not."""
    n_layers, n_heads = 4, 16
    levels = (0.1, 0.5, 0.9)
    worst = np.array([[levels[(3 * l + 5 * h) % 3 if h % 4 else 1] for h in range(n_heads)]
                      for l in range(n_layers)])
    effects = np.stack([worst, worst / 2, np.zeros_like(worst)], axis=-1)  # the worst case is input 0
    expected = [(l, h) for level in levels for l in range(n_layers) for h in range(n_heads)
                if worst[l, h] == level]
    return effects, expected


def check_worst_case_order(fn: Callable) -> None:
    """``fn(effects)``: ``effects`` ``(n_layers, n_heads, n_inputs)`` is the increase of the loss on
    each input when each head is removed; returns every ``(layer, head)``, least important first by
    the *worst case*: the largest effect over the inputs (ties: layer-major order)."""
    # one layer of three heads, three inputs
    e1 = np.array([[[0.1, 0.1, 0.1],      # mean 0.1, worst 0.1
                    [0.0, 0.0, 0.9],      # mean 0.3, worst 0.9: a specialist for input 2
                    [0.4, 0.4, 0.4]]])    # mean 0.4, worst 0.4
    # two layers of two heads; a tie in the worst case between 0.1 and 1.0
    e2 = np.array([[[0.2, 0.2], [0.0, 0.5]],
                   [[0.5, 0.0], [0.3, 0.3]]])
    e3 = np.array([[[-0.9, -0.2], [0.1, -0.5]]])  # worst -0.2 and 0.1; largest |effect| 0.9 and 0.5
    ties, ties_order = _many_ties()
    e5 = np.array([[[0.3, 0.0], [0.0, 0.1]], [[0.2, 0.25], [-0.5, 0.6]], [[0.0, 0.0], [0.3, 0.05]]])
    run_cases(fn, [
        Case("a specialist with a small mean but a large worst case", args=(e1,),
             expected=[(0, 0), (0, 2), (0, 1)],
             hint="score each head by effects.max over the inputs (not the mean), then sort ascending."),
        Case("two layers, with a tie (keep layer-major order)", args=(e2,),
             expected=[(0, 0), (1, 1), (0, 1), (1, 0)],
             hint="use a stable sort on the flattened (layer, head) grid: np.argsort(..., kind='stable')."),
        Case("negative effects", args=(e3,), expected=[(0, 0), (0, 1)],
             hint="the worst case is the maximum, not the largest absolute value."),
        Case("4 layers x 16 heads, many ties", args=(ties,), expected=ties_order,
             hint="np.argsort's default algorithm is not stable on long arrays: pass kind='stable'."),
        Case("3 layers x 2 heads", args=(e5,), expected=[(2, 0), (0, 1), (1, 0), (0, 0), (2, 1), (1, 1)],
             hidden=True),
    ] + drawn(_drawn_worst_cases), compare=_same_order, what="worst case",
        forbid=("headlab.analysis.prune", "headlab.analysis.importance"))


def _drawn_worst_cases(rng: np.random.Generator) -> list[Case]:
    """The tie pattern of :func:`_many_ties` with three drawn levels (a sort sees only their order,
    so an unstable sort errs as on the fixed case); each head's worst case sits on a drawn input,
    the others lie below it, and one input per head is very negative (its largest |effect|)."""
    pattern, order = _many_ties()
    cases = []
    for _ in range(2):
        low, mid = sorted(rng.uniform(0.05, 0.9, size=2))
        levels = {0.1: low, 0.5: mid, 0.9: rng.uniform(1.0, 2.0)}
        worst = np.vectorize(levels.get)(pattern[..., 0])
        n_in = int(rng.integers(3, 7))
        effects = worst[..., None] * rng.uniform(-0.5, 0.95, size=(*worst.shape, n_in))
        at = rng.integers(n_in, size=worst.shape)
        np.put_along_axis(effects, at[..., None], worst[..., None], axis=-1)
        low_at = (at + 1 + rng.integers(n_in - 1, size=worst.shape)) % n_in  # never the worst input
        np.put_along_axis(effects, low_at[..., None], -rng.uniform(2.5, 4.0, size=(*worst.shape, 1)), axis=-1)
        cases.append(Case(MARK + f": 4 layers x 16 heads, {n_in} inputs, three tied levels", args=(effects,),
                          expected=order))
    return cases


def _mean_z_cases() -> list[Case]:
    z = np.zeros((1, 2, 3, 2))  # (batch, pos, head, d_head)
    z[0, 0, :, 0] = [3.0, 0.0, -6.0]   # mean -1
    z[0, 0, :, 1] = [1.0, 1.0, 1.0]    # mean 1
    z[0, 1, :, 0] = [2.0, 4.0, 6.0]    # mean 4
    expected = np.zeros_like(z)
    expected[0, 0, :, 0], expected[0, 0, :, 1], expected[0, 1, :, 0] = -1.0, 1.0, 4.0
    z2 = np.arange(2 * 1 * 2 * 1, dtype=float).reshape(2, 1, 2, 1)  # two inputs: never mix them
    exp2 = np.array([[[[0.5], [0.5]]], [[[2.5], [2.5]]]])
    # (2, 3, 3, 2): at every input and position the heads are m - 1, m + 1, m around a known mean m
    means = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 1, 2) * 1.5 - 4.0
    z3 = np.concatenate([means - 1.0, means + 1.0, means], axis=2)
    return [
        Case("three heads at two positions", args=(z,), expected=expected, unchanged=True,
             hint="average over the head axis (axis 2) only, keeping the positions apart, in a new array."),
        Case("two inputs (the mean is per input and position)", args=(z2,), expected=exp2, unchanged=True,
             hint="do not average over the batch: each input keeps its own mean."),
        Case("two inputs, three positions, three heads", args=(z3,), expected=np.repeat(means, 3, axis=2),
             unchanged=True, hidden=True),
    ]


def check_layer_mean_z(fn: Callable) -> None:
    """``fn(z)``: ``z`` ``(batch, pos, n_heads, d_head)``; returns a new array of the same shape in
    which every head's output is the layer's mean head output at that input and position, and must
    not modify ``z``."""
    run_cases(fn, _mean_z_cases() + drawn(_drawn_mean_z_cases), what="the averaging ablation",
              forbid=("deviating.training.distill", "headlab.heads"))


def _drawn_mean_z_cases(rng: np.random.Generator) -> list[Case]:
    """A drawn mean per input and position, and head outputs spread around it by deviations whose
    sum over the heads is zero: the layer's mean is the drawn mean by construction."""
    cases = []
    for _ in range(2):
        b, p, h, d = (int(rng.integers(2, 5)) for _ in range(4))
        mean = rng.normal(size=(b, p, 1, d)) * 2.0
        dev = rng.normal(size=(b, p, h, d))
        z = mean + dev - dev.mean(axis=2, keepdims=True)
        cases.append(Case(MARK + f": z of shape {(b, p, h, d)}", args=(z,), expected=np.repeat(mean, h, axis=2),
                          unchanged=True))
    return cases


def _rows(spec, n_layers: int = 1, n_heads: int = 3, n_pos: int = 6) -> np.ndarray:
    """Rows ``(n, n_layers, n_heads, n_pos)`` from {(layer, head) or head: row}; every other head
    puts all its weight on the last key (the query's own sentence)."""
    rows = np.zeros((len(spec), n_layers, n_heads, n_pos))
    rows[..., -1] = 1.0
    for i, heads in enumerate(spec):
        for h, row in heads.items():
            layer, head = h if isinstance(h, tuple) else (0, h)
            rows[i, layer, head] = row
    return rows


def check_flag_looking_back(fn: Callable) -> None:
    """``fn(rows, boundary, x)``: ``rows`` ``(n, n_layers, n_heads, pos)`` are every head's
    attention row at the query of each input, ``boundary`` ``(n,)`` the last position before
    the input's own sentence; returns a boolean array ``(n,)``: True where some head puts *more
    than* ``x`` of its attention, in total, on keys ``1 .. boundary[i]`` (key 0, the sink, left out)."""
    spread = [0.0, 0.45, 0.45, 0.0, 0.0, 0.1]  # 0.9 before the sentence, no single key above 0.45
    sink = [0.95, 0.0, 0.0, 0.0, 0.0, 0.05]
    rows = _rows([{}, {1: [0.0, 0.9, 0.0, 0.0, 0.0, 0.1]}, {0: sink}, {2: spread}])
    b = np.array([2, 2, 2, 2])
    later = _rows([{0: [0.0, 0.0, 0.0, 0.9, 0.0, 0.1]}] * 2)  # weight on key 3
    exact = _rows([{1: [0.0, 0.3, 0.3, 0.0, 0.0, 0.4]}])  # exactly 0.6 before the sentence
    one_of_four = _rows([{3: [0.0, 0.9, 0.0, 0.0, 0.0, 0.1]}], n_heads=4)  # the layer mean: 0.225
    deep = _rows([{(1, 2): [0.0, 0.0, 0.8, 0.0, 0.0, 0.2]}, {(0, 0): sink}], n_layers=2)
    hidden = _rows([{(1, 0): [0.0, 0.2, 0.2, 0.2, 0.0, 0.4]}, {(0, 1): [0.3, 0.3, 0.0, 0.0, 0.0, 0.4]},
                    {(1, 1): [0.0, 0.0, 0.0, 0.0, 0.7, 0.3]}], n_layers=2)
    run_cases(fn, [
        Case("clean, one head looking back, parked on the sink, spread over two keys", args=(rows, b, 0.8),
             expected=np.array([False, True, False, True]),
             hint="sum each head's weight over keys 1..boundary (not its largest single weight), "
                  "and leave key 0 out."),
        Case("the boundary differs per input (key 3 is before the sentence only when boundary >= 3)",
             args=(later, np.array([2, 3]), 0.5), expected=np.array([False, True]),
             hint="keys 1..boundary[i] inclusive, with each input's own boundary."),
        Case("exactly x before the sentence", args=(exact, np.array([2]), 0.6), expected=np.array([False]),
             hint="'more than x' is '>', not '>='."),
        Case("one head of four looks back (the layer's mean would not)", args=(one_of_four, np.array([2]), 0.6),
             expected=np.array([True]), hint="inspect every head on its own; do not average the heads first."),
        Case("two layers: a head of the second layer looks back", args=(deep, np.array([2, 2]), 0.6),
             expected=np.array([True, False]), hint="inspect every layer, not only the first: rows[:, layer, head]."),
        Case("two layers, boundaries 3, 1 and 3", args=(hidden, np.array([3, 1, 3]), 0.5),
             expected=np.array([True, False, False]), hidden=True),
    ] + drawn(_drawn_looking_back_cases), what="where heads look", forbid=("deviating.analysis.inspection",))


def _drawn_looking_back_cases(rng: np.random.Generator) -> list[Case]:
    """Inputs of 2 layers, each with one trap: weight on the sink, on the key just after the
    boundary, spread over keys, in one head of many, in the second layer, exactly x; each input's
    answer is set by where its one looking head puts its weight (x is dyadic, so sums are exact)."""
    cases = []
    for _ in range(2):
        pos, n_heads = int(rng.integers(8, 11)), int(rng.integers(3, 5))
        x = float(rng.choice([0.5, 0.625, 0.75]))
        b = [int(rng.integers(3, pos - 3)) for _ in range(7)]

        def row(weights: dict) -> list:
            r = np.zeros(pos)
            for key, w in weights.items():
                r[key] += w
            r[-1] += 1.0 - sum(weights.values())
            return list(r)

        spec, expected = [], []
        for i, trap in enumerate(("sink", "after", "spread", "one", "deep", "exact", "plain")):
            head = (int(trap == "deep" or rng.integers(2)), int(rng.integers(n_heads)))
            keys = rng.choice(np.arange(1, b[i] + 1), size=2, replace=b[i] >= 2)
            if trap == "sink":  # most of it on the sink, the rest just under x before the sentence
                w, answer = {0: 0.9 - x / 2, int(keys[0]): x / 2 + 0.05}, False
            elif trap == "after":  # on the first key of the sentence
                w, answer = {b[i] + 1: x + 0.1}, False
            elif trap == "spread":
                w, answer = {1: x / 2 + 0.05, b[i]: x / 2 + 0.05}, True
            elif trap == "exact":
                w, answer = {1: x / 2, b[i]: x / 2}, False
            else:
                w, answer = {int(keys[0]): x + 0.1}, True
            spec.append({head: row(w)})
            expected.append(answer)
        rows = _rows(spec, n_layers=2, n_heads=n_heads, n_pos=pos)
        cases.append(Case(MARK + f": 7 inputs, 2 layers of {n_heads} heads, x = {x}", args=(rows, np.array(b), x),
                          expected=np.array(expected)))
    return cases


# --------------------------------------------------------------------------- a pruning curve


def _curve_case(name, hm, ids, order, counts, hint="", hidden=False):
    """A case of pruning_curve: the losses by hand, and the curves of the usual mistakes."""
    from deviating.exercises.by_hand import mean_loss, run_by_hand

    def curve(removed, score=mean_loss):
        return np.array([score(run_by_hand(hm, ids, zero=removed(k)), ids) for k in counts])

    def accuracy(run, ids):
        return float((run.logits[:, :-1].argmax(-1) == ids[:, 1:]).double().mean())

    def last_only(run, ids):
        return float(-run.logits[:, -2].log_softmax(-1).gather(-1, ids[:, -1:]).mean())

    n = len(order)
    mistakes = {
        "only the k-th head of the order is removed; remove the first k heads together": curve(
            lambda k: order[k - 1:k] if k else []),
        "the last k heads of the order are removed; the order lists heads from the first removed": curve(
            lambda k: order[n - k:] if k else []),
        "one head too many is removed (order[:k + 1]); at k = 0 nothing is removed": curve(lambda k: order[:k + 1]),
        "the first head of the order is skipped (order[1:k + 1]); remove order[:k]": curve(lambda k: order[1:k + 1]),
        "this is the top-1 accuracy; the curve is the loss (mean next-token cross-entropy)": curve(
            lambda k: order[:k], accuracy),
        "only the last position's prediction is scored; average the loss over every position": curve(
            lambda k: order[:k], last_only),
    }
    case = Case(name, args=(hm, ids, order, counts), expected=curve(lambda k: order[:k]), hint=hint, hidden=hidden)
    return case, mistakes


def check_pruning_curve(fn: Callable) -> None:
    """Check ``fn(hm, inputs, order, counts)``: for each ``k`` of ``counts``, the mean next-token loss of
    ``hm`` on ``inputs`` with the first ``k`` heads of ``order`` zero-ablated together (``k = 0``: the
    model as it is). Expected values: from runs by hand with those heads' outputs set to zero."""
    import torch

    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    g = torch.Generator().manual_seed(7)
    small, deep = tiny_gpt(seed=8), tiny_gpt(seed=9, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    ids, ids_b = torch.randint(40, (3, 8), generator=g), torch.randint(40, (2, 10), generator=g)
    every = [(1, 2), (0, 3), (1, 0), (0, 0), (1, 3), (0, 1), (0, 2), (1, 1)]
    built = [
        _curve_case("a 2-layer model, every head in order, counts 0, 1, 2, 4, 8", small, ids, every,
                    [0, 1, 2, 4, 8], hint="for each k, ablate order[:k] together (k = 0: nothing removed; "
                                          "hm.ablate needs at least one head, so run the model as it is)."),
        _curve_case("the same model, an order of five heads, counts 0, 3, 5", small, ids,
                    [(0, 2), (1, 1), (0, 0), (1, 3), (0, 1)], [0, 3, 5],
                    hint="the loss is the mean next-token cross-entropy over every position of every input."),
        _curve_case("3 layers with MLPs, counts 0, 1, 6", deep, ids_b, [(2, 0), (0, 1), (1, 1), (2, 1), (0, 0), (1, 0)],
                    [0, 1, 6]),
        _curve_case("3 layers with MLPs, another order, counts 0, 2, 4", deep, ids_b,
                    [(1, 0), (2, 1), (0, 0), (1, 1)], [0, 2, 4], hidden=True),
    ]

    def compare(got, expected):
        if np.ndim(got) == 1 and len(got) == len(expected) - 1:
            return (f"{len(got)} values for {len(expected)} counts: one per count, k = 0 included (the model "
                    "with nothing removed; hm.ablate needs at least one head, so run the model as it is)")
        return named(got, expected)

    built += drawn(_drawn_curve_cases)
    named = naming_compare({id(c.expected): m for c, m in built}, atol=1e-4)
    run_cases(fn, [c for c, _ in built], compare=compare, what="a pruning curve",
              forbid=("deviating.analysis", "headlab.analysis", "deviating.exercises.by_hand"))


def _drawn_curve_cases(rng: np.random.Generator) -> list:
    """A random model of drawn size and seed, a drawn order and counts (0, then three more)."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    n_layers, n_heads = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    hm = tiny_gpt(seed=int(rng.integers(1000, 10**6)), n_layers=n_layers, n_heads=n_heads, d_model=24,
                  d_mlp=int(rng.choice([0, 32])))
    ids = torch.as_tensor(rng.integers(40, size=(2, int(rng.integers(6, 10)))))
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    order = [heads[i] for i in rng.permutation(len(heads))]
    counts = [0, *sorted(int(k) for k in rng.choice(np.arange(1, len(order) + 1), size=3, replace=False))]
    case, mistakes = _curve_case(MARK + f": {n_layers} layers x {n_heads} heads, counts {counts}",
                                 hm, ids, order, counts)
    return [(case, mistakes)]
