"""The values a student's function returns, as data: what the grading worker sends and the grader takes.

A grading worker (:mod:`deviating.exercises.worker`) runs the student's code; the grader
(:mod:`deviating.exercises.grading`) decides the grade. Between them only *data* travels, in
this module's format: JSON holding ``None``, booleans, integers, floats (NaN and infinities
included), strings, lists, and tagged objects for tuples, dicts, numpy arrays and scalars and
torch tensors (their bytes in base64, with dtype and shape).

:func:`decode`, run by the grader, is strict: it builds only plain values of those types (a
``float`` is a ``float``, an array an ``ndarray`` of a numeric dtype whose byte count matches
its shape), refuses anything else with :class:`BadValue` naming what came, and caps the depth,
the size of the message and of every array. No code of the sender runs when a value is
decoded: there is no pickle, no class named by the sender, no ``__eq__`` or ``__array__`` of
the sender's. So an object that lies (an ``__eq__`` that is always true, a float subclass, an
``__array__`` that changes its answer) arrives as the plain numbers it converts to.

:func:`encode`, run by the worker, turns a returned value into that format and raises
:class:`BadValue` for a type the grader does not take (a function, a model, a custom class).
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np

__all__ = ["BadValue", "encode", "decode", "MAX_BYTES", "MAX_DEPTH", "MAX_ELEMENTS"]

MAX_BYTES = 64 * 2**20  # a whole message
MAX_DEPTH = 32  # nested lists, tuples and dicts
MAX_ELEMENTS = 2**24  # of one array (16 M numbers)
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
_TAGS = ("tuple", "dict", "ndarray", "npscalar", "tensor")


class BadValue(ValueError):
    """A value the grader does not take (the wrong type, too big, too deep, or malformed)."""


def _array(a: np.ndarray) -> dict:
    if a.dtype.name not in DTYPES:
        raise BadValue(f"an array of dtype {a.dtype} (the grader takes numeric and boolean arrays only)")
    if a.size > MAX_ELEMENTS:
        raise BadValue(f"an array of {a.size} elements (at most {MAX_ELEMENTS})")
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}


def _encode(x: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise BadValue(f"a value nested more than {MAX_DEPTH} levels deep")
    if x is None or isinstance(x, (bool, np.bool_)) and not isinstance(x, np.ndarray):
        return None if x is None else bool(x)
    if isinstance(x, int) and not isinstance(x, np.generic):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, str):
        return str(x)
    if isinstance(x, np.generic):
        return {"npscalar": _array(np.asarray(x))}
    if isinstance(x, np.ndarray):
        return {"ndarray": _array(np.asarray(x))}
    if type(x).__module__.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter"):
        t = x.detach().cpu()
        t = t.float() if str(t.dtype) == "torch.bfloat16" else t
        return {"tensor": _array(t.numpy())}
    if isinstance(x, list):
        return [_encode(v, depth + 1) for v in x]
    if isinstance(x, tuple):
        return {"tuple": [_encode(v, depth + 1) for v in x]}
    if isinstance(x, dict):
        return {"dict": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in x.items()]}
    raise BadValue(f"a {type(x).__module__}.{type(x).__qualname__} (the grader takes numbers, strings, "
                   "numpy arrays, torch tensors, and lists, tuples or dicts of them)")


def encode(x: Any) -> bytes:
    """``x`` as this module's JSON bytes; BadValue for a type the grader does not take."""
    return json.dumps(_encode(x, 0)).encode()


def _decode_array(d: Any) -> np.ndarray:
    if not isinstance(d, dict) or set(d) != {"dtype", "shape", "data"}:
        raise BadValue("a malformed array (it needs exactly dtype, shape and data)")
    dtype, shape, data = d["dtype"], d["shape"], d["data"]
    if dtype not in DTYPES:
        raise BadValue(f"an array of dtype {dtype!r} (the grader takes {', '.join(DTYPES)})")
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)) or len(shape) > 32:
        raise BadValue(f"an array of shape {str(shape)[:80]} (a list of at most 32 non-negative integers)")
    size = math.prod(shape)
    if size > MAX_ELEMENTS or not isinstance(data, str):
        raise BadValue(f"an array of {size} elements (at most {MAX_ELEMENTS})")
    raw = base64.b64decode(data, validate=True)
    if len(raw) != size * np.dtype(dtype).itemsize:
        raise BadValue(f"an array whose {len(raw)} bytes do not fill its shape {tuple(shape)} of {dtype}")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _decode(x: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise BadValue(f"a value nested more than {MAX_DEPTH} levels deep")
    if x is None or type(x) in (bool, int, float, str):
        return x
    if type(x) is list:
        return [_decode(v, depth + 1) for v in x]
    if type(x) is not dict or len(x) != 1 or next(iter(x)) not in _TAGS:
        raise BadValue(f"an object of the wrong form ({str(x)[:60]})")
    (tag, body), = x.items()
    if tag == "tuple":
        if type(body) is not list:
            raise BadValue("a malformed tuple")
        return tuple(_decode(v, depth + 1) for v in body)
    if tag == "dict":
        if type(body) is not list or not all(type(p) is list and len(p) == 2 for p in body):
            raise BadValue("a malformed dict")
        out = {}
        for k, v in body:
            key = _decode(k, depth + 1)
            if type(key) not in (str, int, bool, float) and key is not None and type(key) is not tuple:
                raise BadValue(f"a dict key of type {type(key).__name__}")
            out[key] = _decode(v, depth + 1)
        return out
    array = _decode_array(body)
    if tag == "ndarray":
        return array
    if tag == "npscalar":
        if array.shape != ():
            raise BadValue(f"a numpy scalar of shape {array.shape}")
        return array[()]
    import torch

    return torch.from_numpy(array)


def decode(message: bytes) -> Any:
    """The value in ``message`` (JSON bytes of this format), built from plain types only; BadValue otherwise."""
    if len(message) > MAX_BYTES:
        raise BadValue(f"a message of {len(message)} bytes (at most {MAX_BYTES})")
    try:
        data = json.loads(message)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise BadValue(f"something that is not JSON, or nested too deep ({type(err).__name__})") from None
    try:
        return _decode(data, 0)
    except (ValueError, TypeError, RecursionError) as err:
        raise err if isinstance(err, BadValue) else BadValue(f"a malformed value ({type(err).__name__})") from None
