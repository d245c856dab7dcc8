"""The machinery every exercise check uses.

A check calls the reader's function on **known-answer inputs** (inputs whose
correct output is known exactly, by construction, not by running a reference
implementation) and either prints one line saying it passed or raises
:class:`ExerciseFailed` with a message that says which input failed, what was
expected and what came back.

Checks never import solutions: the solutions live only in the notebooks.
Typical use in ``deviating.exercises.chNN``::

    def check_stable_softmax(fn):
        cases = [Case("a uniform row", args=(np.zeros(4),), expected=np.full(4, 0.25))]
        run_cases(fn, cases, compare=compare_arrays)

Three behaviours serve a class rather than one reader:

- A stub that still raises ``NotImplementedError`` is *unfinished*, not wrong: the
  check prints one line saying so and returns, so that "Run All" on a student
  notebook reaches its last cell. A wrong answer raises :class:`ExerciseFailed`,
  which IPython shows as its message alone (no traceback wall); after
  :func:`keep_going` (the student edition) it is printed, and the notebook goes on.
- A case marked ``hidden`` never prints its expected value, so an answer copied
  from a message cannot pass.
- Under :func:`recording` (what ``python -m deviating grade`` uses) every case runs
  and each one's verdict is recorded, for partial credit, instead of stopping at
  the first failure.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deviating.exercises.guard import CallGuard, forbidden_message
from deviating.exercises.comparing import (  # noqa: F401 (compare_* and to_numpy are re-exported)
    compare_arrays,
    compare_number,
    same_values,
    short_repr,
    to_numpy,
)

__all__ = [
    "Case",
    "CheckResult",
    "ExerciseFailed",
    "ForbiddenCall",
    "NotImplementedYet",
    "call_reader",
    "compare_arrays",
    "compare_number",
    "keep_going",
    "recording",
    "run_cases",
    "summary",
    "to_numpy",
]

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)  # headlab/


class ExerciseFailed(AssertionError):
    """The reader's answer to an exercise is missing or wrong.

    The message always says what to do next: fill in the stub, or which input
    gave which wrong output. In IPython and Jupyter the message is all that is
    shown (see :meth:`_render_traceback_`), plus the line of the reader's own
    code that raised, when their function crashed.
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython prints instead of a traceback: the message, then where the reader's code failed."""
        lines = [f"\x1b[31m✗ {type(self).__name__}\x1b[0m", *str(self).splitlines()]
        cause = self.__cause__
        if cause is not None and cause.__traceback__ is not None:
            frames = [f for f in traceback.extract_tb(cause.__traceback__)
                      if not str(Path(f.filename).resolve()).startswith(_PACKAGE_DIR)]
            if frames:
                last = frames[-1]
                lines.append(f"  where:    {last.filename}, line {last.lineno}, in {last.name}")
                if last.line:
                    lines.append(f"            {last.line}")
        return lines


class NotImplementedYet(ExerciseFailed):
    """The reader's function still raises ``NotImplementedError`` (the stub is not filled in).

    :func:`run_cases` catches it, prints its one-line message and returns, so that a
    student notebook runs to its end; :func:`call_reader` used on its own raises it.
    """


class ForbiddenCall(ExerciseFailed):
    """The reader's function called the library's own answer to the exercise (no credit for any case)."""

@dataclass(frozen=True)
class Case:
    """One known-answer input for a check.

    ``name`` says in words what the input exercises ("a row with -inf entries");
    ``args``/``kwargs`` are passed to the reader's function (deep-copied, so a
    function that modifies its input cannot spoil later cases); ``expected`` is
    the exact answer; ``hint`` is shown when this case fails. A ``hidden`` case
    never prints its expected value (its name and hint must not give it away
    either). With ``unchanged=True`` the function must also leave its inputs as
    they were (no in-place modification).
    """

    name: str
    args: tuple = ()
    expected: Any = None
    kwargs: dict = field(default_factory=dict)
    hint: str = ""
    hidden: bool = False
    unchanged: bool = False


@dataclass
class CheckResult:
    """The outcome of one check on one function: which cases passed, and why the others did not.

    ``status`` is ``"passed"``, ``"failed"`` or ``"not implemented"``; ``reason`` is the
    one-line explanation of a failure (empty when it passed); ``messages`` holds, per
    failed case, its full message.
    """

    function: str
    what: str
    total: int
    passed: list[bool] = field(default_factory=list)
    status: str = "passed"
    reason: str = ""
    messages: list[str] = field(default_factory=list)

    @property
    def n_passed(self) -> int:
        return int(sum(self.passed))

    def to_json(self) -> dict:
        return {"function": self.function, "what": self.what, "total": self.total,
                "n_passed": self.n_passed, "passed": list(self.passed), "status": self.status,
                "reason": self.reason, "messages": list(self.messages)}


# Results of the checks run in this process, by function name (for summary()).
_RESULTS: dict[str, CheckResult] = {}
# Set by recording(): a list that run_cases appends to, and runs every case.
_RECORDER: list[CheckResult] | None = None
# Set by keep_going(): a failed check prints its message instead of raising.
_KEEP_GOING = False


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__name__", repr(fn))


def call_reader(fn: Callable, *args: Any, case: str = "", forbid: Sequence[str] = (), **kwargs: Any) -> Any:
    """Call the reader's function and translate its failures into ExerciseFailed.

    ``NotImplementedError`` (the stub) becomes :class:`NotImplementedYet`; any other
    exception becomes a failure that names the input (``case``) and the error. A call,
    during ``fn``, into a module listed in ``forbid`` (module names such as
    ``"headlab.analysis.importance"``; submodules included) is a failure too.
    """
    if not callable(fn):
        raise ExerciseFailed(
            f"The check expects a function, got {type(fn).__name__}: {short_repr(fn)}. "
            "Pass the function itself, e.g. check_x(my_function), not its result."
        )
    name = _fn_name(fn)
    owner = getattr(fn, "__module__", "") or ""
    if any(owner == f or owner.startswith(f + ".") for f in forbid):
        raise ForbiddenCall(
            f"{name} is {owner}.{name}, the book's own function, not yours: run your stub cell "
            "(define the function yourself) before this check.")
    guard = CallGuard(forbid)
    remote = getattr(fn, "remote_call", None)  # the grader's stand-in: the call runs in a grading worker
    if hasattr(inner := inspect.unwrap(fn), "remote_call"):  # a check may wrap it (fused.py): tell it too
        inner.forbid = tuple(forbid)
    try:
        with guard.watching() if remote is None else contextlib.nullcontext():
            result = remote(args, kwargs, tuple(forbid)) if remote is not None else fn(*args, **kwargs)
    except NotImplementedError:
        raise NotImplementedYet(
            f"{name} is not implemented yet: fill in the stub above "
            "(replace `raise NotImplementedError` with your code), run that cell, "
            "then run this check again."
        ) from None
    except ExerciseFailed:  # the grader's stand-in already says what went wrong
        raise
    except Exception as err:  # the reader's code crashed (or a grading worker's report): say where
        if guard.hit or remote is not None:
            raise (ForbiddenCall(forbidden_message(name, guard.hit)) if guard.hit else ExerciseFailed(f"{name} {err}")) from None
        where = f" on {case}" if case else ""
        raise ExerciseFailed(f"{name} raised {type(err).__name__}{where}: {err}") from err
    if guard.hit:
        raise ForbiddenCall(forbidden_message(name, guard.hit))
    return result


_HIDDEN = "(not shown: this case checks that the answer is computed, not copied from a message)"


def _case_problem(fn: Callable, case: Case, compare: Callable, forbid: Sequence[str]) -> tuple[Any, str | None]:
    """Run one case: (the answer, None) when right, (the answer, the problem) when wrong.

    Raises NotImplementedYet for a stub and ExerciseFailed for a crash or a forbidden call.
    """
    args = copy.deepcopy(case.args)
    kwargs = copy.deepcopy(case.kwargs)
    got = call_reader(fn, *args, case=case.name, forbid=forbid, **kwargs)
    problem = compare(got, case.expected)
    if problem is None and case.unchanged and not (same_values(args, case.args) and same_values(kwargs, case.kwargs)):
        problem = ("the function modified its input in place; work on a copy (e.g. z.copy()) "
                   "and return a new array, so the caller's data survive")
    return got, problem


def _show(expected: Any) -> str:
    """The expected value as a message shows it: numbers as an array, anything else as its repr."""
    if isinstance(expected, (list, tuple, np.ndarray, float, int)) and not isinstance(expected, bool):
        try:
            return short_repr(np.asarray(expected, dtype=float))
        except (TypeError, ValueError):
            pass
    return short_repr(expected)


def _failure_message(name: str, i: int, n: int, case: Case, got: Any, problem: str) -> str:
    if case.hidden:  # a problem string may quote the expected value: say only that it is wrong
        problem = "the answer differs from the expected one" if "shape" not in problem else problem
    lines = [
        f"{name} is wrong on case {i} of {n}, {case.name}:",
        f"  input:    {', '.join(short_repr(a) for a in case.args)}",
        f"  expected: {_HIDDEN if case.hidden else _show(case.expected)}",
        f"  got:      {short_repr(got if not hasattr(got, 'shape') else to_numpy(got))}",
        f"  problem:  {problem}",
    ]
    if case.hint:
        lines.append(f"  hint:     {case.hint}")
    return "\n".join(lines)


def run_cases(
    fn: Callable,
    cases: Sequence[Case],
    *,
    compare: Callable[[Any, Any], str | None] = compare_arrays,
    what: str = "",
    forbid: Sequence[str] = (),
) -> None:
    """Run ``fn`` on every known-answer case; print one line on success.

    ``compare(got, expected)`` returns ``None`` when the answer is right and a
    description of the difference otherwise. ``what`` names the task in the
    success line ("a numerically stable softmax"). ``forbid`` lists modules whose
    functions compute the answer (``"headlab.analysis.importance"``): calling them
    from ``fn`` fails the case.

    A stub (``NotImplementedError``) prints one line and returns. A wrong case raises
    ``ExerciseFailed`` naming the input, the expected and the actual output (or, for a
    ``hidden`` case, not the expected). Under :func:`recording` every case runs, the
    result is recorded and nothing is raised.
    """
    if not cases:
        raise ValueError("run_cases needs at least one Case")
    name = _fn_name(fn)
    result = CheckResult(function=name, what=what, total=len(cases))
    _RESULTS[name] = result
    recorder = _RECORDER
    for i, case in enumerate(cases, start=1):
        try:
            got, problem = _case_problem(fn, case, compare, forbid)
        except NotImplementedYet as err:
            result.status, result.reason = "not implemented", str(err)
            result.passed = [False] * len(cases)
            print(f"✗ {err}")
            if recorder is not None:
                recorder.append(result)
            return
        except ExerciseFailed as err:
            if recorder is None:
                result.status, result.reason = "failed", str(err).splitlines()[0]
                if _KEEP_GOING:
                    return _tell(err)
                raise
            if isinstance(err, ForbiddenCall):  # the library's answer: no credit for any case
                result.status, result.reason = "failed", str(err)
                result.passed = [False] * len(cases)
                result.messages = [str(err)]
                recorder.append(result)
                print(f"✗ {err}")
                return
            got, problem = None, str(err)
            message = f"{name} is wrong on case {i} of {len(cases)}, {case.name}: {err}"
        else:
            message = None if problem is None else _failure_message(name, i, len(cases), case, got, problem)
        result.passed.append(message is None)
        if message is not None:
            result.messages.append(message)
            if result.status == "passed":
                result.status, result.reason = "failed", message.splitlines()[0]
            if recorder is None:
                if _KEEP_GOING:
                    return _tell(ExerciseFailed(message))
                raise ExerciseFailed(message)
    if recorder is not None:
        recorder.append(result)
        mark = "✓" if result.status == "passed" else "✗"
        print(f"{mark} {name}: {result.n_passed} of {result.total} known-answer checks passed.")
        return
    task = f" ({what})" if what else ""
    print(f"✓ {name}{task} passed all {len(cases)} known-answer checks.")


def _tell(err: ExerciseFailed) -> None:
    """keep_going()'s report of a failed check: the message as IPython would show it, on stderr."""
    print("\n".join(err._render_traceback_()), file=sys.stderr, flush=True)


def _show_in_ipython(shell, etype, value, tb, tb_offset=None) -> None:  # noqa: ANN001
    """IPython's handler of NotImplementedError under keep_going(): a stub's own ``raise
    NotImplementedError`` is shown as one message, any other as usual."""
    frames = traceback.extract_tb(tb)
    last = frames[-1] if frames else None
    if last is not None and (last.line or "").strip().startswith("raise NotImplementedError") \
            and not str(Path(last.filename).resolve()).startswith(_PACKAGE_DIR):
        lines = [f"\x1b[31m✗ NotImplementedError\x1b[0m in {last.name}",
                 f"{last.name} is a stub, not implemented yet: fill it in (replace `raise NotImplementedError` "
                 "with your code) and run its cell again."]
        value._render_traceback_ = lambda: lines  # what IPython's showtraceback prints, as for ExerciseFailed
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def keep_going(on: bool = True) -> None:
    """Student mode: a check that finds a wrong answer prints its message and returns instead of raising.

    So "Run All" on a notebook reaches its last cell, where :func:`summary` lists every exercise
    still to do; the student edition (``scripts/make_student.py``) calls it after its setup
    cell. In IPython it also shows a stub's bare ``NotImplementedError`` (the stub called outside a
    check) as one message, as :class:`ExerciseFailed` always is. ``keep_going(False)`` undoes it.
    """
    global _KEEP_GOING
    _KEEP_GOING = bool(on)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover (plain Python: nothing more to set)
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((NotImplementedError,) if on else (), _show_in_ipython)


@contextlib.contextmanager
def recording() -> Iterator[list[CheckResult]]:
    """Run checks in grading mode: every case runs, nothing is raised, each check's result is recorded.

    ::

        with recording() as results:
            check_stable_softmax(stable_softmax)
        results[0].n_passed, results[0].total
    """
    global _RECORDER
    previous, _RECORDER = _RECORDER, []
    try:
        yield _RECORDER
    finally:
        _RECORDER = previous


def summary() -> None:
    """Print where every exercise checked in this session stands: passed, unfinished or wrong.

    The student edition ends with a cell that calls it, so that "Run All" ends with the
    list of the exercises still to do, one line each.
    """
    if not _RESULTS:
        print("No exercise checked yet in this session: run the check cells (or Run All).")
        return
    done = [r for r in _RESULTS.values() if r.status == "passed"]
    print(f"{len(done)} of {len(_RESULTS)} exercises checked in this session pass.")
    for r in _RESULTS.values():
        if r.status == "passed":
            print(f"  ✓ {r.function}")
        elif r.status == "not implemented":
            print(f"  ✗ {r.function}: not implemented yet")
        else:
            print(f"  ✗ {r.function}: {r.reason}")
