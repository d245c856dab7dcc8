"""The machinery every exercise check uses.

A check calls the reader's function on **known-answer inputs** (inputs whose
correct output is known exactly, by construction, not by running a reference
implementation) and either prints one line saying it passed or raises
:class:`ExerciseFailed` with a message that says which input failed, what was
expected and what came back.

Checks never import solutions: the solutions live only in the notebooks.

Typical use in ``headlab.exercises.chNN``::

    def check_stable_softmax(fn):
        cases = [Case("a uniform row", args=(np.zeros(4),), expected=np.full(4, 0.25))]
        run_cases(fn, cases, compare=compare_arrays)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Case",
    "ExerciseFailed",
    "call_reader",
    "compare_arrays",
    "compare_number",
    "run_cases",
    "to_numpy",
]


class ExerciseFailed(AssertionError):
    """The reader's answer to an exercise is missing or wrong.

    The message always says what to do next: fill in the stub, or which input
    gave which wrong output.
    """


@dataclass(frozen=True)
class Case:
    """One known-answer input for a check.

    ``name`` says in words what the input exercises ("a row with -inf entries");
    ``args``/``kwargs`` are passed to the reader's function (deep-copied, so a
    function that modifies its input cannot spoil later cases); ``expected`` is
    the exact answer; ``hint`` is shown when this case fails.
    """

    name: str
    args: tuple = ()
    expected: Any = None
    kwargs: dict = field(default_factory=dict)
    hint: str = ""


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__name__", repr(fn))


def _short(value: Any, limit: int = 300) -> str:
    """A compact, bounded ``repr`` for error messages."""
    if isinstance(value, np.ndarray):
        with np.printoptions(precision=4, suppress=True, threshold=20, edgeitems=3):
            text = np.array2string(value, separator=", ")
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def call_reader(fn: Callable, *args: Any, case: str = "", **kwargs: Any) -> Any:
    """Call the reader's function and translate its failures into ExerciseFailed.

    ``NotImplementedError`` (the stub) becomes "not implemented yet"; any other
    exception becomes a failure that names the input (``case``) and the error.
    """
    if not callable(fn):
        raise ExerciseFailed(
            f"The check expects a function, got {type(fn).__name__}: {_short(fn)}. "
            "Pass the function itself, e.g. check_x(my_function), not its result."
        )
    name = _fn_name(fn)
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise ExerciseFailed(
            f"{name} is not implemented yet: fill in the stub above "
            "(replace `raise NotImplementedError` with your code), run that cell, "
            "then run this check again."
        ) from None
    except Exception as err:  # the reader's code crashed: say where
        where = f" on {case}" if case else ""
        raise ExerciseFailed(
            f"{name} raised {type(err).__name__}{where}: {err}"
        ) from err


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


def run_cases(
    fn: Callable,
    cases: Sequence[Case],
    *,
    compare: Callable[[Any, Any], str | None] = compare_arrays,
    what: str = "",
) -> None:
    """Run ``fn`` on every known-answer case; print one line on success.

    ``compare(got, expected)`` returns ``None`` when the answer is right and a
    description of the difference otherwise. ``what`` names the task in the
    success line ("a numerically stable softmax"). Raises ``ExerciseFailed`` at
    the first wrong case, naming the input, the expected and the actual output.
    """
    if not cases:
        raise ValueError("run_cases needs at least one Case")
    name = _fn_name(fn)
    for i, case in enumerate(cases, start=1):
        args = copy.deepcopy(case.args)
        kwargs = copy.deepcopy(case.kwargs)
        got = call_reader(fn, *args, case=case.name, **kwargs)
        problem = compare(got, case.expected)
        if problem is not None:
            lines = [
                f"{name} is wrong on case {i} of {len(cases)}, {case.name}:",
                f"  input:    {', '.join(_short(a) for a in case.args)}",
                f"  expected: {_short(np.asarray(case.expected))}",
                f"  got:      {_short(got if not hasattr(got, 'shape') else to_numpy(got))}",
                f"  problem:  {problem}",
            ]
            if case.hint:
                lines.append(f"  hint:     {case.hint}")
            raise ExerciseFailed("\n".join(lines))
    task = f" ({what})" if what else ""
    print(f"✓ {name}{task} passed all {len(cases)} known-answer checks.")
