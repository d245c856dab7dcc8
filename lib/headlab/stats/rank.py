"""The one rank correlation of the library: Spearman's, computed by :func:`scipy.stats.spearmanr`."""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

__all__ = ["spearman"]


def _flat(values, name: str) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, without importing torch here
        values = values.detach().cpu().numpy()
    x = np.asarray(values, dtype=float).ravel()
    if not np.isfinite(x).all():
        raise ValueError(f"{name} has non-finite values; drop or fill them before ranking")
    return x


def spearman(a, b) -> float:
    """Spearman rank correlation of two equally sized score arrays (any shape: both are flattened,
    so two ``(n_layers, n_heads)`` grids compare head by head; ties get their average rank).

    A thin wrapper over :func:`scipy.stats.spearmanr` that adds the input checks scipy leaves
    to the caller (scipy reads the columns of a 2-d array as separate variables, and returns
    NaN with a warning for a constant input).

    Raises:
        ValueError: for arrays of different sizes, fewer than two values, non-finite values,
            or a constant array (its ranking is undefined).
    """
    x, y = _flat(a, "a"), _flat(b, "b")
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"need two arrays of equal size >= 2, got {x.size} and {y.size}")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        raise ValueError("one of the arrays is constant: its ranking is undefined")
    return float(sps.spearmanr(x, y).statistic)
