"""Checks for chapter 00, "How to use this book"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn
from deviating.exercises.refusing import REFUSED, compare_refusal, refusing

__all__ = ["check_stable_softmax", "check_temperature_for_entropy"]

_LOG = np.log  # the known answers are built from logs: softmax(log p) = p when sum(p) = 1


def _softmax_cases() -> list[Case]:
    """Rows whose softmax is known exactly: softmax(c + log p) = p / sum(p) for any c."""
    p4 = np.array([1.0, 2.0, 3.0, 4.0])  # weights 0.1, 0.2, 0.3, 0.4
    return [
        Case(
            "a uniform row (every key scores the same)",
            args=(np.full(5, 3.0),),
            expected=np.full(5, 0.2),
            hint="equal scores must give equal weights that sum to 1.",
        ),
        Case(
            "a small row with known weights: scores = log([1, 2, 3, 4])",
            args=(_LOG(p4),),
            expected=p4 / p4.sum(),
            hint="softmax(x)_j = exp(x_j) / sum_k exp(x_k).",
        ),
        Case(
            "a row with huge logits: scores = 1000 + log([1, 2, 3, 4])",
            args=(1000.0 + _LOG(p4),),
            expected=p4 / p4.sum(),
            hint="exp(1000) overflows to inf and inf/inf is NaN. Softmax does not change "
            "when you subtract the same number from every score: subtract the row's max first.",
        ),
        Case(
            "a row with very negative logits: scores = -1000 + log([1, 1, 2])",
            args=(-1000.0 + _LOG(np.array([1.0, 1.0, 2.0])),),
            expected=np.array([0.25, 0.25, 0.5]),
            hint="exp(-1000) underflows to 0 and 0/0 is NaN; subtracting the row max fixes this too.",
        ),
        Case(
            "a row with -inf entries (masked keys): [0, -inf, log 3, -inf]",
            args=(np.array([0.0, -np.inf, np.log(3.0), -np.inf]),),
            expected=np.array([0.25, 0.0, 0.75, 0.0]),
            hint="a masked key (-inf score) must get weight exactly 0; exp(-inf) is 0 in numpy.",
        ),
        Case(
            "a batch of two rows on very different scales, shape (2, 2)",
            args=(np.array([[1000.0, 1000.0 + np.log(3.0)], [np.log(3.0), 0.0]]),),
            expected=np.array([[0.25, 0.75], [0.75, 0.25]]),
            hint="normalise over the last axis only, and take the max of each row: "
            "scores.max(axis=-1, keepdims=True).",
        ),
        Case(
            "a row with a wide spread: [0, 800, 800 + log 3]",
            args=(np.array([0.0, 800.0, 800.0 + np.log(3.0)]),),
            expected=np.array([0.0, 0.25, 0.75]),
            hint="subtract the row's *max*: subtracting its min leaves exp(800), which overflows.",
        ),
        Case(
            "a batch of shape (2, 1, 3), each row shifted by its own constant",
            args=(np.array([[7.0 + _LOG(np.array([2.0, 3.0, 5.0]))],
                            [-3.0 + _LOG(np.array([1.0, 1.0, 8.0]))]]),),
            expected=np.array([[[0.2, 0.3, 0.5]], [[0.1, 0.1, 0.8]]]),
            hidden=True,
            hint="work on the last axis, whatever the number of leading axes.",
        ),
    ]


def check_stable_softmax(fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Check a softmax over the last axis of an array of attention scores.

    ``fn(scores)`` must return ``softmax(scores)`` along the last axis, with the
    same shape, finite for any finite row, and weight 0 for ``-inf`` scores.
    """
    run_cases(fn, _softmax_cases() + drawn(_drawn_softmax_cases), forbid=("deviating.kernels", "headlab.kernels"))


def _drawn_softmax_cases(rng: np.random.Generator) -> list[Case]:
    """The fixed cases' eight kinds, with random sizes, weights and shifts (drawn when grading:
    :mod:`deviating.exercises.drawn`). softmax(c + log p) = p / sum(p) gives every answer."""
    def weights(n: int) -> np.ndarray:
        return rng.uniform(0.5, 5.0, n)

    n = int(rng.integers(2, 10))
    p, big, small = weights(n), weights(int(rng.integers(2, 8))), weights(int(rng.integers(2, 8)))
    masked = weights(int(rng.integers(3, 8)))
    keep = rng.permutation(len(masked)) < int(rng.integers(1, len(masked)))  # at least one key kept and one masked
    m = int(rng.integers(2, 7))
    rows, row_scales = weights(m), [rng.uniform(900.0, 1100.0), rng.uniform(-3.0, 3.0)]
    rows2 = weights(m)
    spread, s = weights(int(rng.integers(2, 6))), rng.uniform(750.0, 900.0)  # exp(750) overflows
    a, b, k = int(rng.integers(2, 4)), int(rng.integers(1, 3)), int(rng.integers(2, 6))
    batch = rng.uniform(0.5, 5.0, (a, b, k))
    shifts = rng.uniform(-20.0, 20.0, (a, b, 1))
    name = MARK + ": "
    return [
        Case(name + f"a uniform row of {n}", args=(np.full(n, rng.uniform(-5.0, 5.0)),), expected=np.full(n, 1.0 / n)),
        Case(name + "log p plus a small constant", args=(np.log(p) + rng.uniform(-3.0, 3.0),), expected=p / p.sum()),
        Case(name + "log p plus about 1000", args=(np.log(big) + rng.uniform(900.0, 1100.0),), expected=big / big.sum()),
        Case(name + "log p minus about 1000", args=(np.log(small) - rng.uniform(900.0, 1100.0),),
             expected=small / small.sum()),
        Case(name + "masked keys (-inf)", args=(np.where(keep, np.log(masked), -np.inf),),
             expected=np.where(keep, masked, 0.0) / masked[keep].sum()),
        Case(name + "two rows on very different scales",
             args=(np.stack([np.log(rows) + row_scales[0], np.log(rows2) + row_scales[1]]),),
             expected=np.stack([rows / rows.sum(), rows2 / rows2.sum()])),
        Case(name + "a wide spread: 0, then about 800 + log p", args=(np.concatenate([[0.0], s + np.log(spread)]),),
             expected=np.concatenate([[0.0], spread / spread.sum()])),
        Case(name + f"a batch of shape {(a, b, k)}, each row shifted by its own constant",
             args=(np.log(batch) + shifts,), expected=batch / batch.sum(axis=-1, keepdims=True)),
    ]


# --------------------------------------------------------------------------- a temperature for an entropy


def _entropy_at(scores: np.ndarray, temperature: float) -> float:
    """The entropy in nats of softmax(scores / temperature): the check's own construction of a target."""
    z = scores / temperature
    w = np.exp(z - z.max())
    w /= w.sum()
    w = w[w > 0]
    return float(-(w * np.log(w)).sum())


def _temperature_case(name: str, scores, temperature: float, hidden: bool = False, hint: str = "") -> Case:
    """A row and the entropy it has at ``temperature``: the answer is that temperature (the entropy
    of a row of unequal scores grows strictly with the temperature, so no other one fits)."""
    scores = np.asarray(scores, dtype=float)
    return Case(name, args=(scores, _entropy_at(scores, temperature)), expected=temperature, hidden=hidden, hint=hint)


def check_temperature_for_entropy(fn: Callable[[np.ndarray, float], float]) -> None:
    """Check ``temperature_for_entropy(scores, target)``: the temperature T at which the softmax of
    ``scores / T`` has an entropy of ``target`` nats, to a relative 1e-4. Each target is the entropy
    the check computed at a temperature it chose; that temperature is the answer."""
    chapter_row = [0.5, 2.0, -1.0, 0.0, 1.0, 3.0]  # the chapter's row of six scores
    cases = [
        _temperature_case("two keys, scores [0, 2], at T = 1", [0.0, 2.0], 1.0,
                          hint="the entropy grows with T: a T too small gives too little entropy, one too large "
                               "too much. Narrow down T until it is right to a relative 1e-4."),
        _temperature_case("the chapter's row of six scores, at T = 0.5", chapter_row, 0.5,
                          hint="the entropy is in nats (natural log), of softmax(scores / T), not of the scores."),
        _temperature_case("the chapter's row, a spread-out target: T = 6", chapter_row, 6.0,
                          hint="the answer can exceed 1: do not stop the search at a fixed upper bound."),
        _temperature_case("scores in the hundreds: [0, 300, 500, 800], at T = 150", [0.0, 300.0, 500.0, 800.0], 150.0,
                          hint="at small T, scores / T is huge: use a stable softmax while you search."),
        _temperature_case("scores around 1000: 1000 + [0, 1, 2.5], at T = 0.8", [1000.0, 1001.0, 1002.5], 0.8,
                          hint="exp(1000 / T) overflows: subtract the row's max before exponentiating."),
        _temperature_case("a sharp target: [1, 0, 0, 0, 0], at T = 0.2", [1.0, 0.0, 0.0, 0.0, 0.0], 0.2,
                          hint="the answer can be well below 1: do not stop the search at a fixed lower bound."),
        _temperature_case("five keys at T = 0.7", [2.0, -1.0, 0.5, 0.5, 3.0], 0.7, hidden=True),
        Case("a target above log k: 1.5 nats for 4 keys (at most log 4 = 1.386)", args=(np.array([0.0, 1, 2, 3]), 1.5),
             expected=REFUSED, hint="no temperature spreads k keys beyond log k nats: raise a ValueError, do not "
                                    "search forever."),
        Case("equal scores: every temperature gives log 3", args=(np.full(3, 2.0), 0.5), expected=REFUSED,
             hint="equal scores give a uniform row at every temperature: raise a ValueError."),
    ]
    run_cases(refusing(fn), cases + drawn(_drawn_temperature_cases),
              compare=compare_refusal(lambda got, exp: compare_number(got, exp, atol=0, rtol=1e-4)),
              what="a temperature for an entropy")


def _drawn_temperature_cases(rng: np.random.Generator) -> list[Case]:
    """Random rows and temperatures (drawn when grading): one below 1, one above, and one on scores
    around 1000 whose unshifted exponentials overflow."""
    cases = []
    for (low, high), offset in (((0.1, 0.9), 0.0), ((1.5, 12.0), 0.0), ((0.5, 0.95), rng.uniform(900.0, 1000.0))):
        scores = offset + rng.normal(0.0, 2.0, int(rng.integers(3, 9)))
        t = float(np.exp(rng.uniform(np.log(low), np.log(high))))
        cases.append(_temperature_case(MARK + f": {len(scores)} keys at T = {t:.3g}", scores, t))
    k = int(rng.integers(2, 9))
    cases.append(Case(MARK + f": a target above log {k}", args=(rng.normal(0.0, 2.0, k), np.log(k) + rng.uniform(0.01, 1)),
                      expected=REFUSED))
    return cases
