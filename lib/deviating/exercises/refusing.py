"""Cases whose right answer is a refusal: on a bad input the reader's function must raise ``ValueError``.

A task that says "raise a ValueError when ..." is checked like any other requirement::

    run_cases(refusing(fn), cases + [Case("a mask that hides every key", args=..., expected=REFUSED)],
              compare=compare_refusal(compare_arrays))

:func:`refusing` turns the reader's ``ValueError`` into :data:`REFUSED`, both in this process and in
a grading worker (whose report of the exception is a ``WorkerFailed`` saying "raised ValueError");
:func:`compare_refusal` passes a refusal only where one is expected, and a ``ValueError`` on a valid
input still fails.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["REFUSED", "refusing", "compare_refusal"]

REFUSED = "a ValueError"  # the expected value of a case the function must refuse


def refusing(fn: Callable) -> Callable:
    """``fn``, wrapped: a ``ValueError`` it raises (here, or in a grading worker) returns :data:`REFUSED`."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValueError:
            return REFUSED
        except Exception as err:
            if type(err).__name__ == "WorkerFailed" and str(err).startswith("raised ValueError"):
                return REFUSED
            raise

    return call


def compare_refusal(compare: Callable[[Any, Any], str | None]) -> Callable[[Any, Any], str | None]:
    """``compare``, extended to the cases whose expected value is :data:`REFUSED`."""

    def check(got: Any, expected: Any) -> str | None:
        if isinstance(expected, str) and expected == REFUSED:
            if isinstance(got, str) and got == REFUSED:
                return None
            return "this input is invalid: the function must raise a ValueError that says why, not return an answer"
        if isinstance(got, str) and got == REFUSED:
            return "the function raised a ValueError on a valid input"
        return compare(got, expected)

    return check
