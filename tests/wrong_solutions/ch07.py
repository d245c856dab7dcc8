"""Wrong solutions students really write for the exercises of chapter 07."""

from __future__ import annotations

import numpy as np


def _order(score, stable=True):
    idx = np.argsort(score.ravel(), kind="stable" if stable else None)
    return [divmod(int(i), score.shape[1]) for i in idx]


def order_by_mean(effects):
    return _order(effects.mean(axis=-1))


def order_unstable(effects):
    return _order(effects.max(axis=-1), stable=False)


def order_by_abs(effects):
    return _order(np.abs(effects).max(axis=-1))


def order_descending(effects):
    return _order(effects.max(axis=-1))[::-1]


def mean_z_with_batch(z):
    return np.broadcast_to(z.mean(axis=(0, 2), keepdims=True), z.shape).copy()


def mean_z_in_place(z):
    z[...] = z.mean(axis=2, keepdims=True)
    return z


def mean_z_over_positions(z):
    return np.broadcast_to(z.mean(axis=(1, 2), keepdims=True), z.shape).copy()


def mean_z_keepdims_only(z):
    return z.mean(axis=2, keepdims=True)


def _before(rows, boundary, first=1, inclusive=True):
    keys = np.arange(rows.shape[-1])
    b = np.asarray(boundary)[:, None]
    mask = (keys[None, :] >= first) & ((keys[None, :] <= b) if inclusive else (keys[None, :] < b))
    return (rows * mask[:, None, None, :]).sum(-1)  # (n, layer, head)


def looking_back_with_sink(rows, boundary, x):
    return (_before(rows, boundary, first=0) > x).reshape(len(rows), -1).any(axis=1)


def looking_back_exclusive(rows, boundary, x):
    return (_before(rows, boundary, inclusive=False) > x).reshape(len(rows), -1).any(axis=1)


def looking_back_peak(rows, boundary, x):
    keys = np.arange(rows.shape[-1])
    mask = (keys[None, :] >= 1) & (keys[None, :] <= np.asarray(boundary)[:, None])
    return ((rows * mask[:, None, None, :]).max(-1) > x).reshape(len(rows), -1).any(axis=1)


def looking_back_mean(rows, boundary, x):
    return (_before(rows, boundary).mean(axis=2) > x).any(axis=1)


def looking_back_at_least(rows, boundary, x):
    return (_before(rows, boundary) >= x).reshape(len(rows), -1).any(axis=1)


def looking_back_first_layer(rows, boundary, x):
    return (_before(rows, boundary)[:, 0] > x).any(axis=1)


# --------------------------------------------------------------------------- pruning_curve


def _curve(hm, inputs, counts, removed, score=None):
    import contextlib

    import torch

    from headlab.metrics import next_token_loss

    out = []
    for k in counts:
        heads = removed(k)
        with torch.no_grad(), hm.ablate(heads) if heads else contextlib.nullcontext():
            logits = hm(inputs)
        out.append(float(next_token_loss(logits, inputs, reduction="mean")) if score is None
                   else score(logits, inputs))
    return np.array(out)


def curve_kth_head_only(hm, inputs, order, counts):
    """Removes only the k-th head of the order, not the first k."""
    return _curve(hm, inputs, counts, lambda k: order[k - 1:k] if k else [])


def curve_reversed(hm, inputs, order, counts):
    """Removes the last k heads of the order."""
    return _curve(hm, inputs, counts, lambda k: order[len(order) - k:] if k else [])


def curve_counts_from_one(hm, inputs, order, counts):
    """Counts from 1: removes order[:k + 1], one head already at k = 0."""
    return _curve(hm, inputs, counts, lambda k: order[:k + 1])


def curve_accuracy(hm, inputs, order, counts):
    """Scores the top-1 next-token accuracy instead of the loss."""
    return _curve(hm, inputs, counts, lambda k: order[:k],
                  lambda logits, ids: float((logits[:, :-1].argmax(-1) == ids[:, 1:]).float().mean()))


def curve_without_zero(hm, inputs, order, counts):
    """Leaves out k = 0 (hm.ablate refuses an empty list, so the count is skipped)."""
    return _curve(hm, inputs, [k for k in counts if k], lambda k: order[:k])


CATALOGUE: dict[str, list] = {
    "ex-07-worst-case-order": [order_by_mean, order_unstable, order_by_abs, order_descending],
    "ex-07-layer-mean-z": [mean_z_with_batch, mean_z_in_place, mean_z_over_positions, mean_z_keepdims_only],
    "ex-07-looking-back": [looking_back_with_sink, looking_back_exclusive, looking_back_peak, looking_back_mean,
                           looking_back_at_least, looking_back_first_layer],
    "ex-07-pruning-curve": [curve_kth_head_only, curve_reversed, curve_counts_from_one, curve_accuracy,
                            curve_without_zero],
}
