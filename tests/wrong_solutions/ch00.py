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


# --------------------------------------------------------------------------- temperature_for_entropy


def _entropy(scores, t, log=np.log, stable=True):
    z = np.asarray(scores, dtype=float) / t
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(z - z.max()) if stable else np.exp(z)
        w = w / w.sum()
        w = w[w > 0]
        return float(-(w * log(w)).sum())


def _search(scores, target, *, log=np.log, stable=True, low=1.0, high=1.0, grow=True, steps=200):
    entropy = lambda t: _entropy(scores, t, log, stable)  # noqa: E731
    for _ in range(60 if grow else 0):  # (bounded: a target no temperature reaches must not hang the test)
        if entropy(low) <= target:
            break
        low /= 2
    for _ in range(60 if grow else 0):
        if entropy(high) >= target:
            break
        high *= 2
    for _ in range(steps):
        middle = (low + high) / 2
        if entropy(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def temperature_log2(scores, target):
    return _search(scores, target, log=np.log2)


def temperature_inverse(scores, target):
    return 1.0 / _search(scores, target)


def temperature_searched_below_1(scores, target):
    return _search(scores, target, low=1e-3, high=1.0, grow=False)


def temperature_naive_softmax(scores, target):
    return _search(scores, target, stable=False)


def temperature_no_refusal(scores, target):
    """Right on every reachable target; on an unreachable one it returns where its search stopped."""
    return _search(scores, target)


def temperature_ten_steps(scores, target):
    return _search(scores, target, low=1e-3, high=1e3, grow=False, steps=10)


CATALOGUE: dict[str, list] = {
    "ex-00-temperature": [temperature_log2, temperature_inverse, temperature_searched_below_1,
                          temperature_naive_softmax, temperature_ten_steps, temperature_no_refusal],
    "ex-00-softmax": [sm_naive, sm_global_max, sm_min_shift, sm_mask_as_zero, sm_axis0, sm_library],
}
