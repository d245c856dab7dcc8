"""How a check compares what the reader's function returned with the known answer.

Each comparison returns ``None`` when the answer is right, else one sentence saying what is
wrong (shape, non-finite values, the largest difference), which :func:`run_cases` puts in
its failure message.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["to_numpy", "compare_arrays", "compare_number", "short_repr", "same_values"]


def to_numpy(value: Any) -> np.ndarray:
    """Convert an answer (numpy array, torch tensor, list, scalar) to a numpy array.

    Torch is not imported: a tensor is recognised by its ``detach`` method.
    """
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def compare_arrays(
    got: Any, expected: Any, *, atol: float = 1e-6, rtol: float = 1e-6
) -> str | None:
    """Compare an array-like answer with the exact expected array.

    Returns ``None`` when they agree (same shape, no NaN where a number is
    expected, every entry within ``atol + rtol * |expected|``), otherwise a
    one-paragraph description of the first thing that is wrong.
    """
    if got is None:
        return "got None: did the function forget to `return` its result?"
    try:
        got_arr = to_numpy(got).astype(float)
    except (TypeError, ValueError) as err:
        return f"the answer is not an array of numbers ({type(got).__name__}: {err})"
    exp_arr = np.asarray(expected, dtype=float)
    if got_arr.shape != exp_arr.shape:
        return f"wrong shape: expected {exp_arr.shape}, got {got_arr.shape}"
    bad_nan = np.isnan(got_arr) & ~np.isnan(exp_arr)
    if bad_nan.any():
        idx = tuple(int(i) for i in np.argwhere(bad_nan)[0])
        return (
            f"NaN at index {idx} where {exp_arr[idx]:.6g} was expected "
            f"({int(bad_nan.sum())} NaN entries in all)"
        )
    close = np.isclose(got_arr, exp_arr, atol=atol, rtol=rtol, equal_nan=True)
    if not close.all():
        idx = tuple(int(i) for i in np.argwhere(~close)[0])
        return (
            f"{int((~close).sum())} of {close.size} entries are off; the first is at "
            f"index {idx}: expected {exp_arr[idx]:.6g}, got {got_arr[idx]:.6g} "
            f"(tolerance {atol:g} + {rtol:g}·|expected|)"
        )
    return None


def compare_number(got: Any, expected: float, *, atol: float = 1e-6, rtol: float = 1e-6) -> str | None:
    """Compare an answer that must be one finite number (a float, a 0-d or 1-element array or
    tensor) with the exact expected value; ``None`` when within ``atol + rtol * |expected|``."""
    if got is None:
        return "got None: did the function forget to `return` its result?"
    try:
        array = to_numpy(got).astype(float)
    except (TypeError, ValueError):
        return f"expected one number, got {type(got).__name__}"
    if array.size != 1:
        return f"expected one number, got an array of shape {array.shape}"
    value = float(array.reshape(()))
    if not np.isfinite(value):
        return f"got {value}: the answer must be a finite number"
    if abs(value - expected) > atol + rtol * abs(expected):
        return f"expected {expected:.6g}, got {value:.6g}"
    return None


def short_repr(value: Any, limit: int = 300) -> str:
    """A compact, bounded ``repr`` of a value for a check's messages (arrays printed briefly)."""
    if isinstance(value, np.ndarray):
        with np.printoptions(precision=4, suppress=True, threshold=20, edgeitems=3):
            text = np.array2string(value, separator=", ")
    elif hasattr(value, "named_parameters") and hasattr(value, "forward"):  # a torch module: its class, not its tree
        config = getattr(value, "config", None)
        shape = ", ".join(f"{k}={getattr(config, k)}" for k in ("n_layer", "n_head", "n_embd")
                          if hasattr(config, k))
        text = f"<{type(value).__name__}{' ' + shape if shape else ''}>"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def same_values(a: Any, b: Any) -> bool:
    """Deep equality of two inputs of a case (arrays, tensors, dicts, lists, tuples; NaN equals NaN):
    whether the reader's function left its input as it was."""
    if hasattr(a, "detach") or isinstance(a, np.ndarray):
        try:
            return bool(np.array_equal(to_numpy(a), to_numpy(b), equal_nan=True))
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (an object without equality: treat as unchanged)
        return True
