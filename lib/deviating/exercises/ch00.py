"""Checks for chapter 00, "How to use this book"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, run_cases

__all__ = ["check_stable_softmax"]

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
    run_cases(fn, _softmax_cases(), forbid=("deviating.kernels", "headlab.kernels"))
