"""Wrong solutions students really write for the exercises of chapter 06."""

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


def hijack_with_sink(rows, x):
    return (rows.max(axis=-1) > x).reshape(len(rows), -1).any(axis=1)


def hijack_at_least(rows, x):
    return (rows[..., 1:].max(axis=-1) >= x).reshape(len(rows), -1).any(axis=1)


def hijack_head_mean(rows, x):
    return (rows.mean(axis=2)[..., 1:].max(axis=-1) > x).any(axis=1)


def hijack_first_layer(rows, x):
    return (rows[:, 0, :, 1:].max(axis=-1) > x).any(axis=1)


CATALOGUE: dict[str, list] = {
    "ex-07-worst-case-order": [order_by_mean, order_unstable, order_by_abs, order_descending],
    "ex-07-layer-mean-z": [mean_z_with_batch, mean_z_in_place, mean_z_over_positions, mean_z_keepdims_only],
    "ex-07-flag-hijacked": [hijack_with_sink, hijack_at_least, hijack_head_mean, hijack_first_layer],
}
