"""Checks for chapter 6's tool-building exercises: the top-k share, attention entropy, the Spearman
correlation and the pair effects of one layer.

Known answers follow from a construction: effects with planted large values, rows that spread their
weight evenly over a known number of keys, rankings built before the values that carry them, and
losses from a forward pass written out by hand (:mod:`deviating.exercises.by_hand`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_top_k_share", "check_attention_entropy", "check_spearman", "check_layer_pair_effects"]

_LIBRARY = ("headlab.analysis.importance", "headlab.stats", "headlab.analysis.detect", "headlab.analysis.sweep",
            "scipy.stats", "deviating.analysis")


# ------------------------------------------------------------------------------ top-k share


def _share_case(rng, n: int, k: int, name: str, hidden: bool = False) -> Case:
    """``k`` large effects (5-10), the others small (0-1) or negative: the share is the large ones' sum
    over the sum of every positive effect."""
    big = rng.uniform(5.0, 10.0, k)
    small = rng.uniform(0.0, 1.0, n - k)
    small[: (n - k) // 2] *= -3.0  # some heads whose removal helps
    effects = rng.permutation(np.r_[big, small])
    return Case(name, args=(effects, k), expected=float(big.sum() / (big.sum() + small.clip(0).sum())),
                hidden=hidden)


def check_top_k_share(fn: Callable) -> None:
    """Check ``fn(effects, k)``: the share of the total positive effect carried by the ``k`` heads with
    the largest effects (negative effects count as 0)."""
    rng = np.random.default_rng(2)
    cases = [Case("four heads, k = 1", args=(np.array([1.0, 3.0, 0.0, 4.0]), 1), expected=0.5,
                  hint="the largest effect over the sum of all of them."),
             Case("negative effects carry no share", args=(np.array([2.0, -2.0, 1.0, 1.0]), 2), expected=0.75,
                  hint="clip the effects at 0 before you add them up; the k largest, not the k smallest."),
             _share_case(rng, 12, 3, "12 heads, k = 3", hidden=True)]
    run_cases(fn, cases + drawn(_drawn_share_cases), compare=compare_number, what="the top-k share",
              forbid=_LIBRARY)


def _drawn_share_cases(rng: np.random.Generator) -> list[Case]:
    n = int(rng.integers(8, 40))
    return [_share_case(rng, n, int(rng.integers(1, n // 3)), MARK + f": {n} heads")]


# ------------------------------------------------------------------------- attention entropy


def _entropy_case(rng, batch: int, heads: int, pos: int, name: str, hidden: bool = False) -> Case:
    """Causal rows that spread their weight evenly over ``k`` random keys: entropy ``log k``, of
    ``log(i + 1)`` at most. Query 0 has one key and no spread."""
    pattern = np.zeros((batch, heads, pos, pos))
    ratio = np.zeros((batch, heads, pos))
    for b in range(batch):
        for h in range(heads):
            pattern[b, h, 0, 0] = 1.0
            for i in range(1, pos):
                k = int(rng.integers(1, i + 2))
                pattern[b, h, i, rng.choice(i + 1, size=k, replace=False)] = 1.0 / k
                ratio[b, h, i] = np.log(k) / np.log(i + 1)
    return Case(name, args=(pattern,), expected=ratio[:, :, 1:].mean(-1), hidden=hidden)


def check_attention_entropy(fn: Callable) -> None:
    """Check ``fn(pattern)``: ``pattern`` ``(batch, head, pos, pos)`` of a causal model; per input and
    head, the mean over queries ``i >= 1`` of the row's entropy over its largest possible value."""
    rng = np.random.default_rng(4)
    pos = 5
    uniform = np.tril(np.ones((pos, pos))) / np.arange(1, pos + 1)[:, None]
    first = np.zeros((pos, pos))
    first[:, 0] = 1.0
    cases = [Case("uniform causal attention, and attention on key 0 only", args=(np.stack([[uniform, first]]),),
                  expected=np.array([[1.0, 0.0]]),
                  hint="query i may attend to i + 1 keys: uniform attention over them is the most spread, "
                       "score 1; one key gets 0. Query 0 has a single key: leave it out."),
             _entropy_case(rng, 2, 3, 6, "rows spread evenly over random keys, 2 inputs x 3 heads"),
             _entropy_case(rng, 1, 2, 9, "one input, two heads, 9 positions", hidden=True)]
    cases[1] = Case(cases[1].name, cases[1].args, cases[1].expected,
                    hint="one score per input and head: do not average the patterns first, average the "
                         "rows' scores; the largest entropy of row i depends on i.")
    run_cases(fn, cases + drawn(_drawn_entropy_cases), compare=lambda got, exp: compare_arrays(
        got, exp, atol=1e-9, rtol=1e-9), what="normalised attention entropy", forbid=_LIBRARY)


def _drawn_entropy_cases(rng: np.random.Generator) -> list[Case]:
    return [_entropy_case(rng, int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(4, 12)),
                          MARK)]


# ---------------------------------------------------------------------------- Spearman


def _spearman_case(rng, n: int, tied: bool, name: str, hidden: bool = False) -> Case:
    """Ranks built first (with groups of ties when ``tied``, each group at its average rank), then
    carried by random increasing values; the answer is the correlation of the ranks."""
    rank_b = rng.permutation(n) + 1.0
    if tied:
        sizes = rng.integers(1, 4, size=n)
        groups = np.repeat(np.arange(n), sizes)[:n]  # consecutive group labels, some repeated
        order = np.arange(1, n + 1, dtype=float)
        average = np.array([order[groups == g].mean() for g in groups])
        perm = rng.permutation(n)
        rank_a, levels = average[perm], groups[perm].astype(float)
    else:
        rank_a = rng.permutation(n) + 1.0
        levels = rank_a
    a = np.exp(levels / 2.0) * rng.uniform(0.5, 2.0)  # increasing, far from linear
    b = rank_b ** 3 - 50.0
    expected = float(np.corrcoef(rank_a, rank_b)[0, 1])
    return Case(name, args=(a.reshape(-1, 1) if n % 2 else a, b), expected=expected, hidden=hidden)


def check_spearman(fn: Callable) -> None:
    """Check ``fn(a, b)``: the Spearman correlation of two equally sized arrays (any shape, compared
    entry by entry), ties at their average rank."""
    rng = np.random.default_rng(6)
    grid = np.array([[0.1, 2.0], [30.0, 400.0]])
    cases = [Case("a 2 x 2 grid against its own cube", args=(grid, grid ** 3), expected=1.0,
                  hint="a rank correlation: any increasing function of a gives 1."),
             Case("reversed", args=(np.array([1.0, 2.0, 3.0, 4.0]), np.array([9.0, 5.0, 1.0, -20.0])),
                  expected=-1.0),
             Case("ties", args=(np.array([1.0, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])),
                  expected=float(np.corrcoef([1.5, 1.5, 3, 4], [1, 2, 3, 4])[0, 1]),
                  hint="tied values share their average rank (1.5 and 1.5 here), then correlate the ranks."),
             _spearman_case(rng, 9, False, "9 values, no tie", hidden=True)]
    run_cases(fn, cases + drawn(_drawn_spearman_cases), compare=lambda got, exp: compare_number(
        got, exp, atol=1e-9, rtol=1e-9), what="the Spearman correlation", forbid=_LIBRARY)


def _drawn_spearman_cases(rng: np.random.Generator) -> list[Case]:
    """One ranking with ties and one without; one case whose tie-free formula misses is drawn again."""
    while True:
        tied = _spearman_case(rng, int(rng.integers(8, 30)), True, MARK + ": with ties")
        a, b = (np.asarray(x, float).ravel() for x in tied.args)
        d = (np.argsort(np.argsort(a)) - np.argsort(np.argsort(b))).astype(float)
        n = a.size
        ordinal = np.corrcoef(np.argsort(np.argsort(a, kind="stable")), np.argsort(np.argsort(b)))[0, 1]
        if min(abs(1 - 6 * (d ** 2).sum() / (n * (n ** 2 - 1)) - tied.expected),
               abs(ordinal - tied.expected)) > 1e-6:
            break
    return [tied, _spearman_case(rng, int(rng.integers(8, 30)), False, MARK + ": no tie")]


# ------------------------------------------------------------------------ pair effects


def _pairs_case(hm, ids, layer: int, name: str, hidden: bool = False) -> Case:
    """Mean next-token loss increases from the forward pass by hand, with heads zeroed."""
    from deviating.exercises.by_hand import mean_loss, run_by_hand

    clean = mean_loss(run_by_hand(hm, ids), ids)
    heads = [(layer, h) for h in range(hm.n_heads)]
    singles = {h: mean_loss(run_by_hand(hm, ids, zero=[h]), ids) - clean for h in heads}
    pairs = {(a, b): mean_loss(run_by_hand(hm, ids, zero=[a, b]), ids) - clean
             for i, a in enumerate(heads) for b in heads[i + 1:]}
    return Case(name, args=(hm, ids, layer), expected=(singles, pairs), hidden=hidden)


def _compare_pairs(got, expected) -> str | None:
    try:
        singles, pairs = got
        singles = {tuple(int(x) for x in h): float(v) for h, v in singles.items()}
        pairs = {tuple(tuple(int(x) for x in h) for h in ab): float(v) for ab, v in pairs.items()}
    except (TypeError, ValueError, AttributeError):
        return f"expected (singles, pairs), two dicts, got {type(got).__name__}"
    for what, mine, theirs in (("singles", singles, expected[0]), ("pairs", pairs, expected[1])):
        if set(mine) != set(theirs):
            return (f"the {what} have keys {sorted(mine)[:6]}..., expected {sorted(theirs)[:6]}... (each pair "
                    "once, (a, b) with a before b)")
        for key, value in theirs.items():
            if abs(mine[key] - value) > 1e-4:
                return f"the {what} entry {key} is {mine[key]:.5f}, which is not right"
    return None


def check_layer_pair_effects(fn: Callable) -> None:
    """Check ``fn(hm, input_ids, layer)``: ``(singles, pairs)``, the mean increase of the next-token
    loss when each head of ``layer`` is zero-ablated, and when each pair ``(a, b)`` (a before b) is."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    g = torch.Generator().manual_seed(8)
    small, deep = tiny_gpt(seed=7, n_heads=3, d_model=24), tiny_gpt(seed=9, n_layers=3, n_heads=3, d_model=24,
                                                                     d_mlp=48)
    ids, ids_b = torch.randint(40, (3, 8), generator=g), torch.randint(40, (2, 10), generator=g)
    cases = [_pairs_case(small, ids, 1, "layer 1 of a 2-layer model with 3 heads, three inputs"),
             _pairs_case(deep, ids_b, 0, "layer 0 of a 3-layer model with MLPs"),
             _pairs_case(deep, ids_b, 2, "layer 2 of the same model", hidden=True)]
    cases[0] = Case(cases[0].name, cases[0].args, cases[0].expected,
                    hint="ablate both heads of a pair *together* (one hm.ablate with both), and report the "
                         "loss minus the clean loss, not the loss itself.")
    run_cases(fn, cases + drawn(_drawn_pairs_cases), compare=_compare_pairs,
              what="single and pair ablation effects", forbid=_LIBRARY)


def _drawn_pairs_cases(rng: np.random.Generator) -> list[Case]:
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    n_heads = int(rng.integers(2, 4))
    hm = tiny_gpt(seed=int(rng.integers(2**31)), n_layers=2, n_heads=n_heads, d_model=8 * n_heads)
    ids = torch.as_tensor(rng.integers(40, size=(int(rng.integers(2, 4)), int(rng.integers(6, 12)))))
    return [_pairs_case(hm, ids, int(rng.integers(2)), MARK + f": {n_heads} heads")]
