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


CATALOGUE: dict[str, list] = {
    "ex-07-worst-case-order": [order_by_mean, order_unstable, order_by_abs, order_descending],
    "ex-07-layer-mean-z": [mean_z_with_batch, mean_z_in_place, mean_z_over_positions, mean_z_keepdims_only],
    "ex-07-looking-back": [looking_back_with_sink, looking_back_exclusive, looking_back_peak, looking_back_mean,
                           looking_back_at_least, looking_back_first_layer],
}
