"""Cases the student cannot know: drawn, when grading, from a secret random seed.

A check's fixed cases ship with the package, so a student can read them at home and hand in
a table of their answers. So a check may also name a *generator* of cases: a function of a
numpy random generator that builds inputs with the check's own construction (random sizes,
weights, values) and the answer that follows from it, never from a reference implementation::

    def check_stable_softmax(fn):
        run_cases(fn, _softmax_cases() + drawn(_drawn_softmax_cases))

Outside grading, :func:`drawn` returns no case, and a check behaves for the student exactly as
before. Under :func:`drawing` (what ``python -m deviating grade`` uses, with a seed from
``os.urandom`` unless ``--seed`` is given) it returns the generator's cases, appended after the
fixed ones, and records how many: the grader then counts *only* those cases towards the points
(:mod:`deviating.exercises.grading`). The expected values are computed in the grader's process;
a grading worker never holds them. One seed gives every submission of a run the same cases.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["drawing", "drawn", "MARK"]

MARK = "a case drawn from the secret seed"  # how a drawn case's name begins

_STATE: dict = {"seed": None, "counts": None}


@contextlib.contextmanager
def drawing(seed: int) -> Iterator[list[int]]:
    """Within it, :func:`drawn` returns cases drawn from ``seed``; yields the list of their counts, one per call."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"the secret seed must be a non-negative int, got {seed!r}")
    previous = dict(_STATE)
    _STATE.update(seed=seed, counts=[])
    try:
        yield _STATE["counts"]
    finally:
        _STATE.update(previous)


def drawn(make: Callable[[np.random.Generator], list]) -> list:
    """The cases ``make(rng)`` builds from the secret seed (under :func:`drawing`); else none.

    ``rng`` depends on the seed and on ``make``'s module and name only, so one check draws the same
    cases for every submission graded with one seed.
    """
    seed = _STATE["seed"]
    if seed is None:
        return []
    key = zlib.crc32(f"{make.__module__}.{make.__qualname__}".encode())
    cases = list(make(np.random.default_rng([seed, key])))
    if not cases:
        raise ValueError(f"{make.__qualname__} drew no case: a generator must build at least one")
    _STATE["counts"].append(len(cases))
    return cases
