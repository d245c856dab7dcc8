"""Wrong solutions students really write for the exercises of chapter 00."""

from __future__ import annotations

import numpy as np


def sm_naive(scores):
    e = np.exp(np.asarray(scores, dtype=float))
    with np.errstate(invalid="ignore", over="ignore"):
        return e / e.sum(axis=-1, keepdims=True)


def sm_global_max(scores):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max())
    with np.errstate(invalid="ignore"):
        return e / e.sum(axis=-1, keepdims=True)


def sm_min_shift(scores):
    s = np.asarray(scores, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.min(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def sm_mask_as_zero(scores):
    s = np.asarray(scores, dtype=float)
    s = np.where(np.isinf(s), 0.0, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sm_axis0(scores):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def sm_library(scores):
    from deviating.kernels.reference import softmax

    return softmax(np.asarray(scores, dtype=float))


CATALOGUE: dict[str, list] = {
    "ex-00-softmax": [sm_naive, sm_global_max, sm_min_shift, sm_mask_as_zero, sm_axis0, sm_library],
}
