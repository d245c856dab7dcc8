"""Checks for chapter 08, "Are heads the right unit?"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, compare_arrays, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

_SAE = ("deviating.analysis.sae",)

__all__ = ["check_topk_activation", "check_fraction_recovered", "check_match_features", "check_units_for_mass", "check_sae_step"]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def check_topk_activation(fn: Callable) -> None:
    """Check ``fn(pre, k)``: keep the k largest entries of the last axis, zero the rest, then ReLU."""
    run_cases(fn, [
        Case("one row of positive pre-activations, k = 2: [0.5, 3, 1, 2]",
             args=(_t([0.5, 3.0, 1.0, 2.0]), 2), expected=[0.0, 3.0, 0.0, 2.0],
             hint="keep the values at the k largest positions and set every other entry to 0."),
        Case("k = 1 keeps only the largest: [1, -2, 4, 3.5]",
             args=(_t([1.0, -2.0, 4.0, 3.5]), 1), expected=[0.0, 0.0, 4.0, 0.0]),
        Case("a negative value among the top k is zeroed: [-1, -3, 0.5, -0.2], k = 2",
             args=(_t([-1.0, -3.0, 0.5, -0.2]), 2), expected=[0.0, 0.0, 0.5, 0.0],
             hint="the top 2 are 0.5 and -0.2; a feature activation is never negative, so apply a "
                  "ReLU to the kept values (at most k features are active, sometimes fewer)."),
        Case("a batch of two rows, each with its own top k: [[1, 5, 3], [6, 2, 4]], k = 2",
             args=(_t([[1.0, 5.0, 3.0], [6.0, 2.0, 4.0]]), 2), expected=[[0.0, 5.0, 3.0], [6.0, 0.0, 4.0]],
             hint="select along the last axis (dim=-1), separately for every row."),
        Case("k equal to the number of features is a plain ReLU: [[-1, 2, -3, 4]], k = 4",
             args=(_t([[-1.0, 2.0, -3.0, 4.0]]), 4), expected=[[0.0, 2.0, 0.0, 4.0]]),
        Case("a (batch, pos, n_features) input of shape (2, 1, 3), k = 1",
             args=(_t([[[0.1, 0.3, 0.2]], [[0.9, -0.5, 0.4]]]), 1), expected=[[[0.0, 0.3, 0.0]], [[0.9, 0.0, 0.0]]],
             hint="work on the last axis whatever the number of leading axes."),
        Case("two rows of five, k = 3", args=(_t([[0.2, -1.0, 3.0, 0.1, 2.5], [-0.3, -0.1, -0.2, 0.4, -2.0]]), 3),
             expected=[[0.2, 0.0, 3.0, 0.0, 2.5], [0.0, 0.0, 0.0, 0.4, 0.0]], hidden=True),
    ] + drawn(_drawn_topk_cases), what="a top-k activation", forbid=_SAE)


def _drawn_topk_cases(rng: np.random.Generator) -> list[Case]:
    """(batch, pos, n) inputs: in each row, k drawn positions hold the k largest values (in one
    row, one of them negative, the rest below it); the answer keeps the positive ones in place."""
    cases = []
    for _ in range(2):
        b, p, n = int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(6, 12))
        k = int(rng.integers(2, n - 2))
        pre = rng.uniform(-3.0, 0.9, size=(b, p, n))  # the rest: below every kept value
        pre[..., 0] = 0.5  # some of it positive
        kept = rng.uniform(1.0, 2.0, size=(b, p, k))
        kept[0, 0, 0] = -rng.uniform(0.5, 2.5)  # a negative among the top k
        pre[0, 0] = kept[0, 0, 0] - rng.uniform(0.5, 3.0, size=n)
        where = np.argsort(rng.random((b, p, n)), axis=-1)[..., :k]
        np.put_along_axis(pre, where, kept, axis=-1)
        expected = np.zeros((b, p, n))
        np.put_along_axis(expected, where, np.maximum(kept, 0.0), axis=-1)
        cases.append(Case(MARK + f": shape {(b, p, n)}, k = {k}", args=(_t(pre), k), expected=expected))
    return cases


def check_fraction_recovered(fn: Callable) -> None:
    """Check ``fn(clean, replaced, floor)`` = (floor - replaced) / (floor - clean)."""
    run_cases(fn, [
        Case("a perfect replacement: clean 2.0, replaced 2.0, floor 5.0", args=(2.0, 2.0, 5.0), expected=1.0,
             hint="a replacement as good as the clean model recovers all of the loss: 1."),
        Case("a replacement as bad as ablating the layer: clean 2.0, replaced 5.0, floor 5.0",
             args=(2.0, 5.0, 5.0), expected=0.0,
             hint="(floor - replaced) is 0 when the replacement is no better than the floor."),
        Case("halfway: clean 2.0, replaced 3.5, floor 5.0", args=(2.0, 3.5, 5.0), expected=0.5,
             hint="divide the loss the replacement recovers, floor - replaced, by what there is to "
                  "recover, floor - clean."),
        Case("worse than the floor: clean 2.0, replaced 6.5, floor 5.0", args=(2.0, 6.5, 5.0), expected=-0.5,
             hint="no clipping: a replacement worse than ablating the layer gets a negative fraction."),
        Case("numbers of the size this chapter measures: clean 2.04, replaced 2.10, floor 3.30",
             args=(2.04, 2.10, 3.30), expected=1.2 / 1.26),
        Case("clean 1.0, replaced 1.5, floor 3.0", args=(1.0, 1.5, 3.0), expected=0.75, hidden=True),
    ] + drawn(_drawn_recovered_cases), what="loss recovered", forbid=_SAE)


def _drawn_recovered_cases(rng: np.random.Generator) -> list[Case]:
    """A drawn clean loss and gap to the floor, and the replaced loss placed at a drawn fraction
    of the way back from the floor: that fraction is the answer (one of them below 0)."""
    cases = []
    for frac in (rng.uniform(0.2, 0.95), -rng.uniform(0.2, 0.8)):
        clean, gap = rng.uniform(1.0, 4.0), rng.uniform(0.5, 3.0)
        floor = clean + gap
        cases.append(Case(MARK + ": three losses", args=(clean, floor - frac * gap, floor), expected=float(frac)))
    return cases


def check_match_features(fn: Callable) -> None:
    """Check ``fn(dec_a, dec_b)``: for each row of dec_a, its largest cosine with a row of dec_b."""
    s = 1 / np.sqrt(2)
    run_cases(fn, [
        Case("identical dictionaries (the identity, 3 x 3)", args=(torch.eye(3), torch.eye(3)), expected=[1.0, 1.0, 1.0]),
        Case("the same directions in another order",
             args=(_t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), _t([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])),
             expected=[1.0, 1.0], hint="take the maximum over all rows of dec_b, not the row with the same index."),
        Case("rows of different lengths: a cosine ignores length",
             args=(_t([[3.0, 0.0], [0.0, 0.5]]), _t([[0.0, 2.0], [1.0, 0.0]])), expected=[1.0, 1.0],
             hint="divide each row by its norm before taking dot products."),
        Case("a direction at 45 degrees from the nearest one: [1, 0] against [1, 1] and [0, -1]",
             args=(_t([[1.0, 0.0]]), _t([[1.0, 1.0], [0.0, -1.0]])), expected=[s]),
        Case("an opposite direction is no match: [1, 0] against [-1, 0] and [0, 1]",
             args=(_t([[1.0, 0.0]]), _t([[-1.0, 0.0], [0.0, 1.0]])), expected=[0.0],
             hint="features only fire positively, so -d is a different feature from d: take the "
                  "maximum of the cosine itself, not of its absolute value."),
        Case("more features in dec_b than in dec_a: the answer has one entry per row of dec_a",
             args=(_t([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]),
                   _t([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 3.0, 4.0]])),
             expected=[s, 1.0]),
        Case("three features against two", args=(_t([[0.0, 2.0], [1.0, 1.0], [-3.0, 0.0]]),
                                                 _t([[0.0, 5.0], [-1.0, 1.0]])),
             expected=[1.0, s, s], hidden=True),
    ] + drawn(_drawn_match_cases), what="feature matches", forbid=_SAE)


def _drawn_match_cases(rng: np.random.Generator) -> list[Case]:
    """dec_b: scaled rows of a random orthonormal basis (more of them than in dec_a); each row of
    dec_a is cos(t) e_j + sin(t) u with u orthogonal to every row of dec_b, scaled: its best cosine
    is cos(t) (or 0 where cos(t) < 0, a direction opposite to e_j)."""
    cases = []
    for _ in range(2):
        n_a, n_b = int(rng.integers(3, 6)), int(rng.integers(6, 9))
        d = n_b + 2
        basis = np.linalg.qr(rng.normal(size=(d, d)))[0].T  # orthonormal rows
        dec_b = basis[:n_b] * rng.uniform(0.5, 3.0, size=(n_b, 1))
        t = rng.uniform(0.1, 1.3, size=n_a)
        t[0] = np.pi - t[0]  # one opposite direction
        j = (np.arange(n_a) + rng.integers(1, n_b)) % n_b  # never row i of dec_b for row i of dec_a
        u = basis[n_b + rng.integers(2, size=n_a)]
        dec_a = (np.cos(t)[:, None] * basis[j] + np.sin(t)[:, None] * u) * rng.uniform(0.5, 3.0, size=(n_a, 1))
        cases.append(Case(MARK + f": {n_a} features against {n_b}", args=(_t(dec_a), _t(dec_b)),
                          expected=np.maximum(np.cos(t), 0.0)))
    return cases


def check_units_for_mass(fn: Callable) -> None:
    """Check ``fn(contributions, mass)``: per row, the fewest units whose contributions reach
    ``mass`` of the row's total (0 for an all-zero row)."""
    run_cases(fn, [
        Case("one token, sorted contributions [5, 3, 2, 0], mass 0.5", args=(np.array([[5.0, 3.0, 2.0, 0.0]]), 0.5),
             expected=[1], hint="5 of the total 10 already is half."),
        Case("the same token, mass 0.75", args=(np.array([[5.0, 3.0, 2.0, 0.0]]), 0.75), expected=[2],
             hint="5 < 7.5, 5 + 3 = 8 >= 7.5: two units."),
        Case("unsorted contributions [2, 0, 5, 3], mass 0.75", args=(np.array([[2.0, 0.0, 5.0, 3.0]]), 0.75),
             expected=[2], hint="take the largest contributions first: sort each row in decreasing order."),
        Case("two tokens, one spread and one concentrated: [[1, 1, 1, 1], [10, 0, 0, 0]], mass 0.6",
             args=(np.array([[1.0, 1.0, 1.0, 1.0], [10.0, 0.0, 0.0, 0.0]]), 0.6), expected=[3, 1],
             hint="each row has its own total."),
        Case("a token where nothing is written: [0, 0, 0], mass 0.9", args=(np.array([[0.0, 0.0, 0.0]]), 0.9),
             expected=[0], hint="no unit is needed to carry nothing: return 0 for an all-zero row."),
        Case("three tokens, mass 0.9", args=(np.array([[1.0, 8.0, 1.0, 0.0], [3.0, 3.0, 3.0, 1.0],
                                                       [0.0, 0.0, 0.0, 0.0]]), 0.9),
             expected=[2, 3, 0], hidden=True),
    ] + drawn(_drawn_units_cases), what="units per token", forbid=_SAE)


def _drawn_units_cases(rng: np.random.Generator) -> list[Case]:
    """Rows built to need a drawn number a of units: a values u with (a - 1) u < mass <= a u of a
    total of 1, the rest spread below u; each row shuffled and scaled (the first row by a large
    factor, so that one total for every row is wrong); a row whose two largest units carry exactly
    `mass` of it; a zero row."""
    cases = []
    for _ in range(2):
        mass, n = float(rng.choice([0.5, 0.625, 0.75, 0.875])), int(rng.integers(8, 13))
        rows, answers = [], []
        for i in range(4):
            a = int(rng.integers(2, 5))
            u = rng.uniform(mass / a, min(mass / (a - 1), 1.0 / a))  # the rest is not negative
            rest = 1.0 - a * u
            others = rng.dirichlet(np.ones(n - a)) * rest
            while others.max() > u:  # keep every other unit below u
                others = (others + rest / (n - a)) / 2
            row = np.concatenate([np.full(a, u), others])
            rows.append(rng.permutation(row) * (50.0 if i == 0 else rng.uniform(0.5, 2.0)))
            answers.append(a)
        exact = np.zeros(n)  # the two largest units carry exactly `mass` (dyadic: no rounding)
        exact[:2] = 16 * mass
        exact[2:2 + int(8 * (1 - mass))] = 4.0
        rows.append(rng.permutation(exact) * 2.0 ** int(rng.integers(-3, 4)))
        answers.append(2)
        rows.append(np.zeros(n))
        answers.append(0)
        cases.append(Case(MARK + f": 6 tokens of {n} units, mass {mass}", args=(np.array(rows), mass),
                          expected=answers))
    return cases


# --------------------------------------------------------------------------- one SAE step


def _sae_step_answer(W_enc, b_enc, W_dec, b_dec, x, l1, lr, *, relu=True, mse="tokens", penalty="f",
                     sign=1.0, normalise="rows", loss_after=False):
    """One SGD step with gradients derived by hand (no autograd), in float64; the keyword arguments
    switch on one common mistake each, so that a wrong answer can be named.

    loss = mean_t ||x_t - x_hat_t||^2 + l1 * mean_t sum_i f_ti, f = ReLU(x W_enc + b_enc),
    x_hat = f W_dec + b_dec. By hand: dL/dx_hat = 2 r / n (r = x_hat - x), dW_dec = f^T dL/dx_hat,
    db_dec = sum_t dL/dx_hat, dL/df = dL/dx_hat W_dec^T + l1 / n, dpre = dL/df * [pre > 0],
    dW_enc = x^T dpre, db_enc = sum_t dpre.
    """
    W_enc, b_enc, W_dec, b_dec, x = (np.asarray(a, dtype=float) for a in (W_enc, b_enc, W_dec, b_dec, x))
    n, d = x.shape
    pre = x @ W_enc + b_enc
    f = np.maximum(pre, 0.0) if relu else pre
    r = f @ W_dec + b_dec - x
    scale = {"tokens": 1.0 / n, "entries": 1.0 / (n * d), "sum": 1.0}[mse]
    loss = scale * (r ** 2).sum() + (l1 / n * f.sum() if penalty == "f" else 0.0)
    if penalty == "weights":
        loss += l1 * (np.abs(W_enc).sum() + np.abs(W_dec).sum())
    g_xhat = 2.0 * scale * r
    g_Wdec = f.T @ g_xhat + (l1 * np.sign(W_dec) if penalty == "weights" else 0.0)
    g_bdec = g_xhat.sum(0)
    g_f = g_xhat @ W_dec.T + (l1 / n if penalty == "f" else 0.0)
    g_pre = g_f * (pre > 0) if relu else g_f
    g_Wenc = x.T @ g_pre + (l1 * np.sign(W_enc) if penalty == "weights" else 0.0)
    g_benc = g_pre.sum(0)
    new = [p - sign * lr * g for p, g in ((W_enc, g_Wenc), (b_enc, g_benc), (W_dec, g_Wdec), (b_dec, g_bdec))]
    if normalise == "rows":
        new[2] = new[2] / np.linalg.norm(new[2], axis=1, keepdims=True)
    elif normalise == "columns":
        new[2] = new[2] / np.linalg.norm(new[2], axis=0, keepdims=True)
    if loss_after:
        loss = _sae_step_answer(*new, x, l1, 0.0)[4]
    return (*new, float(loss))


_SAE_PARTS = ("W_enc", "b_enc", "W_dec", "b_dec", "loss")
_SAE_MISTAKES = {
    "no ReLU (f = x W_enc + b_enc, negative activations kept)": {"relu": False},
    "the L1 penalty on the weights instead of on the activations f": {"penalty": "weights"},
    "no L1 penalty at all": {"penalty": "none"},
    "the squared error averaged over every entry (tokens x d_in), not summed over d_in and averaged over "
    "tokens": {"mse": "entries"},
    "the squared error summed over tokens instead of averaged": {"mse": "sum"},
    "a step up the gradient (p + lr * grad): the loss grows": {"sign": -1.0},
    "the rows of W_dec left unnormalised after the step": {"normalise": "none"},
    "the columns of W_dec normalised instead of its rows (a row is one feature's direction)":
        {"normalise": "columns"},
    "the loss after the step returned, not the loss before it": {"loss_after": True},
}


def _compare_sae(got, expected, args) -> str | None:
    if got is None:
        return "got None: did the function forget to `return` its result?"
    if not isinstance(got, (tuple, list)) or len(got) != 5:
        return f"expected a tuple of 5 (new W_enc, b_enc, W_dec, b_dec, loss), got {type(got).__name__}" + (
            f" of length {len(got)}" if isinstance(got, (tuple, list)) else "")
    problems = []
    for name, g, e in zip(_SAE_PARTS, got, expected):
        p = compare_number(g, e, atol=1e-8, rtol=1e-8) if name == "loss" else \
            compare_arrays(g, e, atol=1e-8, rtol=1e-8)
        if p is not None:
            problems.append(f"{name}: {p}")
    if not problems:
        return None
    for what, flags in _SAE_MISTAKES.items():
        answer = _sae_step_answer(*args, **flags)
        if all((compare_number if i == 4 else compare_arrays)(g, a, atol=1e-8, rtol=1e-8) is None
               for i, (g, a) in enumerate(zip(got, answer))):
            return f"{problems[0]}; this is the answer with {what}"
    return "; ".join(problems[:2])


def _sae_inputs(seed: int, n: int, d: int, k: int, l1: float, lr: float) -> tuple:
    g = torch.Generator().manual_seed(seed)
    W_dec = torch.randn(k, d, generator=g, dtype=torch.float64)
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
    return (W_dec.T.clone() + 0.1 * torch.randn(d, k, generator=g, dtype=torch.float64),
            0.3 * torch.randn(k, generator=g, dtype=torch.float64), W_dec,
            0.2 * torch.randn(d, generator=g, dtype=torch.float64),
            torch.randn(n, d, generator=g, dtype=torch.float64), l1, lr)


def _d(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def check_sae_step(fn: Callable) -> None:
    """Check ``fn(W_enc, b_enc, W_dec, b_dec, x, l1, lr)``: one SGD step on
    ``mean_t ||x_t - x_hat_t||^2 + l1 * mean_t sum_i f_ti`` (``f = ReLU(x W_enc + b_enc)``,
    ``x_hat = f W_dec + b_dec``), then each row of ``W_dec`` rescaled to norm 1; returns the four
    new parameters and the loss before the step."""
    # one token, one feature, one dimension, by hand: pre = 2 * 1 + 0.5 = 2.5 = f = x_hat, r = 0.5,
    # loss = 0.25 + 0.1 * 2.5 = 0.5; dL/dx_hat = 1, dW_dec = 2.5, db_dec = 1, dL/df = 1 + 0.1 = 1.1,
    # dW_enc = 2 * 1.1, db_enc = 1.1; after a step of 0.1: W_enc 0.78, b_enc 0.39, W_dec 0.75 -> 1, b_dec -0.1
    hand = (_d([[1.0]]), _d([0.5]), _d([[1.0]]), _d([0.0]), _d([[2.0]]), 0.1, 0.1)
    # feature 1 is off on both tokens (pre < 0), feature 0 on one of them only
    relu = (_d([[1.0, -1.0], [0.0, -0.5]]), _d([0.0, -0.2]), _d([[0.6, 0.8], [0.0, 1.0]]), _d([0.1, 0.0]),
            _d([[1.0, 2.0], [-1.0, 0.5]]), 0.2, 0.05)
    cases = []
    for name, args, hint, hidden in [
        ("one token, one feature, d_in = 1, worked by hand", hand,
         "loss 0.25 + 0.1 x 2.5 = 0.5; W_enc 1 - 0.1 x 2 x 1.1 = 0.78; b_enc 0.39; W_dec 0.75, rescaled to 1; "
         "b_dec -0.1. Step down the gradient, and return the loss computed before the step.", False),
        ("two tokens, two features, negative pre-activations", relu,
         "f = ReLU(x W_enc + b_enc): a feature whose pre-activation is negative is 0 and passes no gradient.",
         False),
        ("8 tokens, d_in = 4, 6 features, l1 = 0 (reconstruction only)", _sae_inputs(0, 8, 4, 6, 0.0, 0.1),
         "the loss sums the squared error over the d_in coordinates and averages it over the tokens "
         "(F.mse_loss averages over both: d_in times smaller).", False),
        ("8 tokens, d_in = 4, 6 features, l1 = 0.05", _sae_inputs(1, 8, 4, 6, 0.05, 0.1),
         "the penalty is l1 times the mean over tokens of sum_i f_i, on the activations, not the weights; "
         "after the step, divide each row of W_dec (one feature's direction) by its norm.", False),
        ("16 tokens, d_in = 5, 12 features", _sae_inputs(2, 16, 5, 12, 0.03, 0.2), "", True),
    ]:
        cases.append(Case(name, args=args, expected=_sae_step_answer(*args), hint=hint, hidden=hidden))
    cases += drawn(_drawn_sae_cases)
    by_id = {id(c.expected): c.args for c in cases}
    run_cases(fn, cases, compare=lambda got, exp: _compare_sae(got, exp, by_id[id(exp)]),
              what="one training step of a sparse autoencoder", forbid=(*_SAE, "deviating.training"))


def _drawn_sae_cases(rng: np.random.Generator) -> list[Case]:
    """Random SAEs and batches of drawn sizes, penalties and step sizes; answers by hand."""
    cases = []
    for _ in range(2):
        n, d, k = int(rng.integers(6, 14)), int(rng.integers(3, 7)), int(rng.integers(4, 12))
        args = _sae_inputs(int(rng.integers(10**6)), n, d, k, float(rng.uniform(0.02, 0.1)),
                           float(rng.uniform(0.05, 0.2)))
        cases.append(Case(MARK + f": {n} tokens, d_in = {d}, {k} features", args=args,
                          expected=_sae_step_answer(*args)))
    return cases
