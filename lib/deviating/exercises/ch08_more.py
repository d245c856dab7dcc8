"""Checks for chapter 8's builds: the loss recovered by a splice, run live; which head owns a
feature; and a feature's AUROC for a label."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_splice_recovered", "check_head_ownership", "check_feature_auroc"]

_SAE = ("deviating.analysis.sae", "deviating.exercises.by_hand")


# --------------------------------------------------------------------------- a splice, live


def _splice_answer(hm, layer, ids, z_hat) -> tuple[float, float, float, float]:
    """Runs by hand: the clean loss, the loss with the layer's z replaced by ``z_hat``, with it
    zeroed, and where the replaced loss lies between the floor (0) and the clean loss (1)."""
    from deviating.exercises.by_hand import mean_loss, run_by_hand

    heads = range(hm.model.config.n_heads)
    clean = mean_loss(run_by_hand(hm, ids), ids)
    replaced = mean_loss(run_by_hand(hm, ids, replace={(layer, h): z_hat[:, :, h] for h in heads}), ids)
    floor = mean_loss(run_by_hand(hm, ids, zero=[(layer, h) for h in heads]), ids)
    return clean, replaced, floor, (floor - replaced) / (floor - clean)


def _compare_splice(got, expected) -> str | None:
    if not isinstance(got, (tuple, list)) or len(got) != 4:
        return f"expected a tuple of 4 (clean, replaced, floor, fraction), got {type(got).__name__}"
    for name, g, e in zip(("clean", "replaced", "floor", "fraction"), got, expected):
        problem = compare_number(g, e, atol=2e-4, rtol=1e-3)
        if problem:
            return f"{name}: {problem}"
    return None


def _splice_case(name, hm, layer, ids, noise, seed, hint="", hidden=False) -> Case:
    """``z_hat``: the layer's own z (by hand) plus noise of size ``noise``: a reconstruction
    that is good but not perfect, so that the three losses differ."""
    import torch

    from deviating.exercises.by_hand import run_by_hand

    z = run_by_hand(hm, ids).z[layer]
    g = torch.Generator().manual_seed(seed)
    z_hat = (z + noise * z.std() * torch.randn(z.shape, generator=g, dtype=torch.float64)).float()
    return Case(name, args=(hm, layer, ids, z_hat), expected=_splice_answer(hm, layer, ids, z_hat.double()),
                hint=hint, hidden=hidden)


def check_splice_recovered(fn: Callable) -> None:
    """``fn(hm, layer, inputs, z_hat)``: ``(clean, replaced, floor, fraction)``, the mean next-token
    losses of the model as it is, with layer ``layer``'s head outputs replaced by ``z_hat``
    ``(batch, pos, n_heads, d_head)``, and with them zeroed; and the fraction of loss recovered."""
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    g = torch.Generator().manual_seed(21)
    small, deep = tiny_gpt(seed=22), tiny_gpt(seed=23, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    cases = [
        _splice_case("a 2-layer model, layer 1, a close reconstruction", small, 1,
                     torch.randint(40, (3, 8), generator=g), 0.3, 0,
                     hint="replace every head of the layer at every position, and zero every head of that layer "
                          "(only that layer) for the floor."),
        _splice_case("the same model, layer 0, a rough reconstruction", small, 0,
                     torch.randint(40, (2, 9), generator=g), 1.0, 1,
                     hint="the fraction: 1 at the clean loss, 0 at the floor; a rough reconstruction is "
                          "far from 1."),
        _splice_case("3 layers with MLPs, layer 1", deep, 1, torch.randint(40, (2, 10), generator=g), 0.5, 2,
                     hint="the loss is the mean next-token cross-entropy over every position of every input."),
        _splice_case("3 layers with MLPs, layer 2", deep, 2, torch.randint(40, (3, 7), generator=g), 0.7, 3,
                     hidden=True),
    ] + drawn(_drawn_splice_cases)
    run_cases(fn, cases, compare=_compare_splice, what="a splice", forbid=_SAE)


def _drawn_splice_cases(rng: np.random.Generator) -> list[Case]:
    import torch

    from deviating.exercises.by_hand import tiny_gpt

    n_layers, n_heads = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    hm = tiny_gpt(seed=int(rng.integers(1000, 10**6)), n_layers=n_layers, n_heads=n_heads, d_model=24,
                  d_mlp=int(rng.choice([0, 32])))
    ids = torch.as_tensor(rng.integers(40, size=(2, int(rng.integers(6, 10)))))
    layer = int(rng.integers(n_layers))
    return [_splice_case(MARK + f": {n_layers} layers x {n_heads} heads, layer {layer}", hm, layer, ids,
                         float(rng.uniform(0.3, 0.8)), int(rng.integers(10**6)))]


# --------------------------------------------------------------------------- which head owns a feature


def _planted_ownership(shares: np.ndarray, d_head: int, rng) -> np.ndarray:
    """Rows whose block h has squared length shares[i, h] * L_i^2 (a random direction in the block)."""
    n_features, n_heads = shares.shape
    out = np.zeros((n_features, n_heads, d_head))
    for i in range(n_features):
        length = rng.uniform(0.5, 3.0)
        for h in range(n_heads):
            v = rng.normal(size=d_head)
            out[i, h] = v / np.linalg.norm(v) * np.sqrt(shares[i, h]) * length
    return out.reshape(n_features, n_heads * d_head)


def _ownership_case(name, shares, d_head, seed, hint="", hidden=False) -> Case:
    import torch

    shares = np.asarray(shares, dtype=float)
    W_dec = _planted_ownership(shares, d_head, np.random.default_rng(seed))
    return Case(name, args=(torch.tensor(W_dec, dtype=torch.float32), shares.shape[1]), expected=shares,
                hint=hint, hidden=hidden)


def check_head_ownership(fn: Callable) -> None:
    """``fn(W_dec, n_heads)``: ``(n_features, n_heads)``, the share of each row's squared length
    that lies in each head's block of ``d_head`` columns (head 0 first); rows sum to 1."""
    cases = [
        _ownership_case("one feature inside head 1 of 2", [[0.0, 1.0]], 3, 0,
                        hint="head h's block is the columns h * d_head .. (h + 1) * d_head - 1."),
        _ownership_case("a feature split 0.64 / 0.36 between two heads", [[0.64, 0.36]], 4, 1,
                        hint="shares of the squared length: a block holding 0.8 of the length holds 0.64 of it."),
        _ownership_case("three features of different lengths, 3 heads of 2 columns",
                        [[0.5, 0.25, 0.25], [0.0, 0.1, 0.9], [1 / 3, 1 / 3, 1 / 3]], 2, 2,
                        hint="each row is divided by its own total: every row sums to 1, whatever its length."),
        _ownership_case("4 heads of 3 columns", [[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.3, 0.0]], 3, 3, hidden=True),
    ] + drawn(_drawn_ownership_cases)
    run_cases(fn, cases, compare=lambda got, exp: compare_arrays(got, exp, atol=1e-5, rtol=1e-4),
              what="head ownership", forbid=_SAE)


def _drawn_ownership_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for _ in range(2):
        n_features, n_heads, d_head = int(rng.integers(3, 7)), int(rng.integers(2, 5)), int(rng.integers(2, 5))
        shares = rng.dirichlet(np.full(n_heads, 0.7), size=n_features)
        cases.append(_ownership_case(MARK + f": {n_features} features, {n_heads} heads of {d_head}", shares,
                                     d_head, int(rng.integers(10**6))))
    return cases


# --------------------------------------------------------------------------- a feature's AUROC


def _auroc(acts, positive) -> np.ndarray:
    """By construction: per feature, the share of (positive, negative) token pairs where the
    positive token's activation is higher, a tie counting one half."""
    a, pos = np.asarray(acts, dtype=float), np.asarray(positive, dtype=bool)
    p, n = a[pos], a[~pos]
    higher = (p[:, None, :] > n[None, :, :]).sum((0, 1))
    tied = (p[:, None, :] == n[None, :, :]).sum((0, 1))
    return (higher + 0.5 * tied) / (len(p) * len(n))


def _auroc_case(name, acts, positive, hint="", hidden=False) -> Case:
    import torch

    acts = np.asarray(acts, dtype=float)
    return Case(name, args=(torch.tensor(acts, dtype=torch.float32), torch.tensor(np.asarray(positive, bool))),
                expected=_auroc(acts, positive), hint=hint, hidden=hidden)


def check_feature_auroc(fn: Callable) -> None:
    """``fn(acts, positive)``: ``acts`` ``(n_tokens, n_features)``, ``positive`` ``(n_tokens,)`` bool;
    per feature, the AUROC of its activation as a score for the label (ties count one half)."""
    cases = [
        _auroc_case("a feature that fires on exactly the labelled tokens, and one that never fires",
                    [[2.0, 0.0], [0.0, 0.0], [1.5, 0.0], [0.0, 0.0]], [True, False, True, False],
                    hint="a feature that is 0 everywhere ties every pair: its AUROC is 0.5."),
        _auroc_case("zeros tie: a feature that fires on one of two labelled tokens",
                    [[1.0], [0.0], [0.0], [0.0], [0.0]], [True, True, False, False, False],
                    hint="ties (most tokens are 0 for a sparse feature) count one half, whichever comes first."),
        _auroc_case("a feature that fires on the unlabelled tokens scores below 0.5",
                    [[0.0, 0.5], [3.0, 0.5], [2.0, 0.0], [0.0, 1.0]], [True, False, False, True],
                    hint="do not fold an AUROC below 0.5 up: a feature whose activation marks the opposite is "
                         "no detector of the label."),
        _auroc_case("six tokens, three features", [[0.0, 1.0, 2.0], [0.5, 0.0, 2.0], [0.5, 0.0, 0.0],
                                                   [0.0, 2.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]],
                    [True, True, False, False, True, False], hidden=True),
    ] + drawn(_drawn_auroc_cases)
    run_cases(fn, cases, compare=lambda got, exp: compare_arrays(got, exp, atol=1e-6, rtol=1e-6),
              what="a feature's AUROC", forbid=(*_SAE, "sklearn", "scipy.stats"))


def _drawn_auroc_cases(rng: np.random.Generator) -> list[Case]:
    """Sparse activations (most tokens 0, values on a grid of quarters: ties); one feature fires on
    the labelled tokens, one on the others (AUROC below 0.5)."""
    cases = []
    for _ in range(2):
        n_tokens, n_features = int(rng.integers(20, 40)), int(rng.integers(4, 8))
        positive = rng.random(n_tokens) < 0.3
        positive[:2] = True, False
        acts = rng.integers(1, 8, size=(n_tokens, n_features)) / 4.0 * (rng.random((n_tokens, n_features)) < 0.3)
        acts[:, 0] = np.where(positive, rng.integers(0, 3, size=n_tokens) / 4.0, acts[:, 0] / 8)
        acts[:, 1] = np.where(positive, 0.0, rng.integers(1, 4, size=n_tokens) / 4.0)
        cases.append(_auroc_case(MARK + f": {n_tokens} tokens, {n_features} features", acts, positive))
    return cases
