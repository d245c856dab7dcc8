"""Input checks shared by every kernel: one place for each error message.

Each kernel accepts one *family* of arrays and returns the same family:
``"lists"`` (nested Python lists, the teaching backend), ``"numpy"`` and
``"torch"``. The helpers here work out the family, check shapes on plain
tuples (so they serve all three families), and raise a ``TypeError`` or
``ValueError`` that says what was wrong and what to do.
"""

from __future__ import annotations

import itertools
import math
import numbers
from typing import Any

import numpy as np
import torch

FAMILY_NAMES = {"lists": "nested Python lists", "numpy": "numpy arrays", "torch": "torch tensors"}

#: Which families each backend of :func:`deviating.kernels.attention` takes.
BACKEND_FAMILIES = {"loops": ("lists", "numpy"), "numpy": ("numpy",), "torch": ("torch",), "sdpa": ("torch",)}

_FAMILY_HINT = {
    "lists": "use backend='loops', or convert them with np.asarray and use backend='numpy'",
    "numpy": "use backend='numpy' (or 'loops' for tiny teaching examples)",
    "torch": "use backend='torch' (pattern returned) or backend='sdpa' (fast, no pattern)",
}

EMPTY_ROWS_CHOICES = ("raise", "zero")


def family_of(x: Any, name: str) -> str:
    """Return ``"torch"``, ``"numpy"`` or ``"lists"`` for ``x``; anything else is a TypeError."""
    if isinstance(x, torch.Tensor):
        return "torch"
    if isinstance(x, np.ndarray):
        return "numpy"
    if isinstance(x, (list, tuple)):
        return "lists"
    raise TypeError(f"{name} must be a torch tensor, a numpy array or nested lists; "
                    f"got {type(x).__module__}.{type(x).__qualname__}")


def common_family(**named: Any) -> str:
    """The one family shared by all non-None arguments; mixing families is a TypeError."""
    families = {name: family_of(x, name) for name, x in named.items() if x is not None}
    if len(set(families.values())) > 1:
        listing = ", ".join(f"{name} is {FAMILY_NAMES[f]}" for name, f in families.items())
        raise TypeError(
            f"inputs mix array types ({listing}); pass them all as one kind, "
            "e.g. all torch tensors (torch.as_tensor) or all numpy arrays (np.asarray)"
        )
    return next(iter(families.values()))


def check_backend(backend: str, family: str) -> None:
    """Check that ``backend`` exists and accepts arrays of ``family``."""
    if backend not in BACKEND_FAMILIES:
        choices = ", ".join(repr(b) for b in BACKEND_FAMILIES)
        raise ValueError(f"unknown backend {backend!r}; choose one of {choices}")
    if family not in BACKEND_FAMILIES[backend]:
        takes = " or ".join(FAMILY_NAMES[f] for f in BACKEND_FAMILIES[backend])
        raise TypeError(
            f"backend={backend!r} takes {takes}, but got {FAMILY_NAMES[family]}: "
            f"{_FAMILY_HINT[family]}"
        )


def check_choice(value: Any, name: str, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")


# ---------------------------------------------------------------------------
# Nested lists: shape, leaf types, finiteness
# ---------------------------------------------------------------------------

def list_shape(x: Any, name: str, *, boolean: bool = False) -> tuple[int, ...]:
    """Shape of a rectangular nested list; checks the leaves are real numbers (or bools).

    A ragged list or a leaf of the wrong type is a ValueError / TypeError.
    """
    if isinstance(x, (list, tuple)):
        shapes = [list_shape(item, name, boolean=boolean) for item in x]
        if not shapes:
            return (0,)
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"{name} is a ragged nested list (rows of shapes {sorted(set(shapes))}); "
                             "every row must have the same length")
        return (len(x),) + shapes[0]
    if boolean:
        if not isinstance(x, (bool, np.bool_)):
            raise TypeError(f"mask entries must be booleans (True = may attend); got {x!r}")
    elif isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} entries must be real numbers; got {x!r} of type {type(x).__name__}")
    return ()


def _first_nonfinite_in_list(x: Any, path: tuple[int, ...] = ()) -> tuple[tuple[int, ...], int] | None:
    """(index of the first non-finite leaf, count of non-finite leaves), or None."""
    if isinstance(x, (list, tuple)):
        first, count = None, 0
        for i, item in enumerate(x):
            found = _first_nonfinite_in_list(item, path + (i,))
            if found is not None:
                first = first if first is not None else found[0]
                count += found[1]
        return None if first is None else (first, count)
    return None if math.isfinite(x) else (path, 1)


def shape_of(x: Any, family: str, name: str, *, boolean: bool = False) -> tuple[int, ...]:
    return list_shape(x, name, boolean=boolean) if family == "lists" else tuple(x.shape)


# ---------------------------------------------------------------------------
# Shapes (plain tuples, so the same checks serve every family)
# ---------------------------------------------------------------------------

class _NoBroadcast(Exception):
    pass


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting rule on shape tuples, in pure Python (raises _NoBroadcast)."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            raise _NoBroadcast
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def check_qkv_shapes(q_shape, k_shape, v_shape) -> tuple[tuple[int, ...], int, int, int, int]:
    """Check q ``(..., n_q, d)``, k ``(..., n_k, d)``, v ``(..., n_k, d_v)``.

    Returns ``(batch, n_q, n_k, d, d_v)`` where ``batch`` is the broadcast of the
    three leading shapes.
    """
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) < 2:
            raise ValueError(f"{name} must have shape (..., n, d), at least 2 dimensions; got shape {shape}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d (each query is compared with each key "
            f"by a dot product); got q of shape {q_shape} and k of shape {k_shape}"
        )
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(
            f"k and v must have the same length n_k (one value per key); "
            f"got k of shape {k_shape} and v of shape {v_shape}"
        )
    if q_shape[-1] == 0:
        raise ValueError(f"the query/key size d must be at least 1 (the scale is d ** -0.5); got q of shape {q_shape}")
    try:
        batch = broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    except _NoBroadcast:
        raise ValueError(
            f"the batch dimensions of q {q_shape}, k {k_shape} and v {v_shape} do not broadcast "
            "against each other"
        ) from None
    return batch, q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]


def check_mask_shape(mask_shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    """The mask must broadcast to ``target = (*batch, n_q, n_k)`` without enlarging it."""
    try:
        ok = broadcast_shapes(mask_shape, target) == target
    except _NoBroadcast:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {mask_shape} does not broadcast to (..., n_q, n_k) = {target}, "
            "the shape of the attention pattern"
        )


# ---------------------------------------------------------------------------
# Dtypes, devices and finiteness of numpy / torch arrays
# ---------------------------------------------------------------------------

def check_numeric(x: Any, family: str, name: str) -> None:
    """q, k, v and weights: real numbers (numpy: int or float; torch: floating point)."""
    if family == "numpy":
        if x.dtype == np.bool_ or not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
            raise TypeError(f"{name} must hold real numbers (an integer or float dtype); got dtype {x.dtype}")
    elif family == "torch" and not torch.is_floating_point(x):
        raise TypeError(f"{name} must be a floating-point tensor; got {x.dtype} (convert with {name}.float())")


def check_same_dtype_device(named: dict[str, torch.Tensor]) -> None:
    """Torch inputs must share one dtype and one device (as SDPA requires)."""
    (first_name, first), *rest = named.items()
    for name, x in rest:
        if x.device != first.device:
            raise ValueError(
                f"{name} is on {x.device} but {first_name} is on {first.device}; "
                f"move them to one device (e.g. {name}.to({first_name}.device))"
            )
        if x.dtype != first.dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but {first_name} has {first.dtype}; "
                f"convert them to one dtype (e.g. {name}.to({first_name}.dtype))"
            )


def check_mask_dtype(mask: Any, family: str, device: Any = None) -> None:
    if family == "numpy" and mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean (True = may attend); got dtype {mask.dtype}. "
                        "An additive float mask converts with mask = (additive == 0)")
    if family == "torch":
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be boolean (True = may attend); got {mask.dtype}. "
                            "An additive float mask converts with mask = (additive == 0)")
        if mask.device != device:
            raise ValueError(f"mask is on {mask.device} but q is on {device}; move it with mask.to(q.device)")


def check_finite(named: dict[str, Any], family: str) -> None:
    """NaN or +-inf anywhere in the arrays is a ValueError naming the array and the first bad index.

    Torch fast path (``torch.isfinite`` is ~30x slower than a sum on CPU): a
    sum is finite only if every term is (NaN and inf propagate through
    addition), so one reduction per tensor and one device sync for all of them
    clear the common case. A non-finite sum can also be an overflow of finite
    values: then the exact element-wise check decides.
    """
    if family == "torch":
        sums = torch.stack([x.detach().sum(dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
                            for x in named.values()])
        if bool(torch.isfinite(sums).all()):
            return
    for name, x in named.items():
        _check_finite_exact(x, family, name)


def _check_finite_exact(x: Any, family: str, name: str) -> None:
    if family == "lists":
        found = _first_nonfinite_in_list(x)
        if found is None:
            return
        first, count = found
    else:
        bad = ~torch.isfinite(x.detach()).cpu().numpy() if family == "torch" else ~np.isfinite(x)
        if not bad.any():
            return
        first, count = tuple(int(i) for i in np.argwhere(bad)[0]), int(bad.sum())
    raise ValueError(f"{name} contains {count} non-finite value(s) (NaN or inf), the first at index {first}; "
                     "attention needs finite inputs (to exclude keys, pass a boolean mask instead of -inf scores)")


# ---------------------------------------------------------------------------
# Query rows with no key to attend to
# ---------------------------------------------------------------------------

def empty_row_error(full_index: tuple[int, ...], n_k: int, masked: bool, causal: bool) -> ValueError:
    """The one message for a query row that may attend to no key."""
    *batch, row = full_index
    where = f"query row {row}" + (f" of batch element {tuple(batch)}" if batch else "")
    if n_k == 0:
        why = "there are no keys (n_k = 0)"
    else:
        by = " and ".join(w for w, on in (("the mask", masked), ("causal=True", causal)) if on)
        why = f"{by} exclude{'s' if ' and ' not in by else ''} all {n_k} keys"
    return ValueError(f"{where} has no key it may attend to: {why}. Fix the mask, or pass "
                      "empty_rows='zero' to get a zero output row and a zero pattern row there")


def first_empty_row(has_key: np.ndarray, batch_and_rows: tuple[int, ...]) -> tuple[int, ...]:
    """Index, in full ``(*batch, n_q)`` coordinates, of the first False in a broadcast ``has_key``.

    ``has_key`` may have fewer or size-1 leading dims (it comes from a broadcast
    mask); broadcast dims map to index 0, which is also the first full index.
    """
    first = tuple(int(i) for i in np.argwhere(~has_key)[0])
    pad = len(batch_and_rows) - len(first)
    return (0,) * pad + first


def iter_batch(batch: tuple[int, ...]):
    """All batch indices in C order (one empty tuple when there are no batch dims)."""
    return itertools.product(*(range(size) for size in batch))


def broadcast_get(nested: Any, shape: tuple[int, ...], full_index: tuple[int, ...]) -> Any:
    """Index a nested list of ``shape`` with an index into a broadcast shape.

    The shapes are right-aligned, and size-1 dims of ``shape`` are read at 0:
    the pure-Python equivalent of NumPy broadcasting for one element (or slab).
    """
    index = full_index[len(full_index) - len(shape):] if shape else ()
    node = nested
    for size, i in zip(shape, index):
        node = node[0 if size == 1 else i]
    return node


def scores_may_overflow(q: Any, k: Any, scale: float | None = None) -> bool:
    """Whether some score ``scale * q_i . k_j`` (default scale ``d ** -0.5``) may exceed the range
    of the dtype the kernels compute in (float32 for float16 and bfloat16): a bound, the largest
    entries of ``q`` and ``k`` times ``d``, against a quarter of the dtype's largest value.

    Finite inputs past it (``q * 1e30`` in float32) would give infinite scores, which a softmax
    turns into NaN, or which a kernel takes for a row with no key; the kernels recompute such
    inputs in float64.
    """
    if q.size == 0 if isinstance(q, np.ndarray) else q.numel() == 0:
        return False
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    if isinstance(q, np.ndarray):
        dtype = np.result_type(q.dtype, k.dtype, np.float32)
        top = float(np.abs(q).max()) * float(np.abs(k).max())
        limit = float(np.finfo(dtype).max) if dtype.kind == "f" else float(np.finfo(np.float64).max)
    else:
        dtype = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
        top = float(q.detach().abs().amax()) * float(k.detach().abs().amax())
        limit = torch.finfo(dtype).max
    return top * d * scale >= limit / 4
