"""Grading: ``python -m deviating grade SUBMISSION.ipynb... --csv grades.csv [--gradescope results.json]``.

**The grade is decided in the grader's own process.** For each exercise the grader starts a
grading worker (:mod:`deviating.exercises.worker`): a fresh Python, in the submission's own empty
folder, under resource limits, that holds only the chapter's setup cell (from ``--reference``,
the handed-out notebook, when given) and that exercise's stub cell as the student filled it in.
None of the student's other cells ever runs. The book's check then runs *here*, in recording
mode (:func:`deviating.exercises.recording`), on a stand-in for the student's function
(:class:`deviating.exercises.remote.RemoteFunction`): each call sends the inputs the check chose
to the worker and gets back the returned value as data, decoded by
:func:`deviating.exercises.values.decode` into plain numbers, strings, arrays and tensors, checked
for type and shape on arrival. The expected values, the comparisons, the points and the reasons
live only in this process; nothing the worker prints or patches reaches it.

Why it holds: the only thing that crosses from the student's code to the grader is a value, built
by a strict decoder that runs none of the sender's code (no pickle, no ``__eq__``, no
``__array__``), so a submission can change what its function returns, never how it is judged.
What the worker could still do is *compute* the expected value itself, from the checks, the
solutions or the library's answer: the operating system keeps those out of its reach. Each
worker runs inside bubblewrap (:mod:`deviating.exercises.sandbox`: another user, its own PID and
network namespaces, a seccomp filter, and a filesystem view without the checks, the chapters, the
other submissions, the gradebook and the modules the exercise under grade must not call); its
audit hook (:mod:`deviating.exercises.worker`) stays as a second layer that explains refusals.
Without ``bwrap`` the grader refuses to grade, unless told ``--unsafe-no-isolation``, which every
grade then records in its notes. Forged output lines, a huge output, ``sys.exit``/``os._exit``,
a cell that never returns, a fork bomb or memory exhaustion end the worker or one call, and give 0
for the cases they touch, with the reason (:mod:`deviating.exercises.remote`).

Cases the student cannot know: each run draws extra cases from a secret seed (``os.urandom``,
or ``--seed``), with the checks' own constructions (:mod:`deviating.exercises.drawn`), the
expected values computed here. Where a check draws cases, only those count: the exercise earns
``points x passed drawn cases / drawn cases`` (the fixed cases, which students can read, still
run and are reported). Elsewhere it earns ``points x passed cases / cases``. Points come from the
difficulty (★☆☆ 1, ★★☆ 2, ★★★ 3) unless the exercise-start cell's metadata sets
``{"headlab": {"points": N}}``.

Which exercises a notebook has, and their points and checks, come from ``--reference`` (the
handed-out notebook: safest, since a student cannot edit it), else from the submission's metadata
(written by ``scripts/make_student.py``), else from its exercise markers; the check named must be
a ``check_*`` of a ``deviating.exercises.chNN`` module (or ``fused``). Files are copied into a submission's
folder only from the handed-out folder (``--handout``, default the reference's folder), never from
beside the submission. A submission that is a symbolic link or not a regular file is not read (0,
with the reason). A cell other than a stub that binds the name of a function a stub asks for is
reported in the notes (it is never run). The gradebook (``--csv``, ``--gradescope``) is written
atomically (a temporary file beside it, then a rename), after every worker and everything it
started has ended; no worker can see it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import textwrap
from pathlib import Path

from deviating.exercises import recording
from deviating.exercises.notebook import DEF_RE, STUB_TAG, MalformedExercise, bound_names, exercise_index, \
    setup_cell_index
from deviating.exercises.drawn import MARK, drawing
from deviating.exercises.gradebook import ExerciseGrade, Grade, gradescope_results, write_atomically, write_csv
from deviating.exercises.remote import Limits, RemoteFunction, StubProblem, WorkerFailed
from deviating.exercises.sandbox import IsolationUnavailable, Sandbox, hidden_modules

__all__ = ["ExerciseGrade", "Grade", "grade_notebook", "write_csv", "gradescope_results", "add_commands"]

CHECK_MODULE_RE = re.compile(r"^deviating\.exercises\.(ch\d{2}[a-z]?(_[a-z]+)?|fused)$")  # ch05, ch07_more, ch05b
CHECK_NAME_RE = re.compile(r"^check_[a-z0-9_]+$")
HANDOUT_LIMIT = 50_000_000  # bytes: a bigger handed-out file is not copied
UNSAFE_NOTE = ("graded WITHOUT operating-system isolation (--unsafe-no-isolation): the student's code could "
               "read the checks and other files; review this grade")


# ----------------------------------------------------------------------- the grader


def _stub_source(nb, function: str) -> tuple[int, str] | None:
    """The code that defines ``function``: the submission's stub cell, then any solution cell that defines
    it again (the book's own notebook, graded as a submission). (The stub's index, the joined source.)"""
    cells = [(i, cell.source) for i, cell in enumerate(nb.cells)
             if cell.cell_type == "code" and {STUB_TAG, "solution"} & set(cell.metadata.get("tags", []))
             and function in DEF_RE.findall(cell.source)]
    return (cells[0][0], "\n\n".join(src for _, src in cells)) if cells else None


def _check_of(spec: dict):  # noqa: ANN202
    module, name = str(spec.get("check_module")), str(spec.get("check"))
    if not CHECK_MODULE_RE.match(module) or not CHECK_NAME_RE.match(name):
        raise ValueError(f"the check {module}.{name} is not one of the book's (deviating.exercises.chNN[_part].check_*)")
    check = getattr(importlib.import_module(module), name, None)
    if check is None or name not in getattr(importlib.import_module(module), "__all__", ()):
        raise ValueError(f"the check {module}.{name} does not exist")
    return check


class _Probe:
    """Stands in once for a student's function, to learn which modules a check forbids (no call runs)."""

    def __init__(self, name: str):
        self.__name__ = name
        self.forbid: tuple = ()

    def remote_call(self, args, kwargs, forbid):  # noqa: ANN001, ANN201, ARG002
        self.forbid = tuple(forbid)
        raise NotImplementedError

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204 (a check that wraps it: .forbid is set)
        raise NotImplementedError


@functools.lru_cache(maxsize=None)
def _forbidden(check) -> tuple[str, ...]:  # noqa: ANN001
    """The modules ``check`` forbids the student's function to call (what the sandbox hides)."""
    probe = _Probe(check.__name__)
    with recording(), contextlib.redirect_stdout(io.StringIO()):
        with contextlib.suppress(Exception):
            check(probe)
    return probe.forbid


@functools.lru_cache(maxsize=1)
def default_sandbox() -> Sandbox:
    """The grader's sandbox (one per process); IsolationUnavailable where bubblewrap cannot run."""
    return Sandbox()


_STUB_REASONS = {
    "missing": "no function {f!r} is defined: the stub cell was deleted, renamed, or does not define it",
    "broken": "its stub cell failed to run ({why}), so no function {f!r} is defined",
    "library": "{f} is the library's {why}, not the student's own function",
    "setup": "the chapter's setup cell failed in the grading worker ({why})",
}


def _import_hint(reason: str, hide: tuple[str, ...]) -> str:
    """What to add to a stub's failure to import a module the sandbox hides (the worker names the module)."""
    found = re.search(r"\(module ([\w.]+)\)", reason)
    module = found.group(1) if found else ""
    if module and any(module == m or module.startswith(m + ".") or m.startswith(module + ".") for m in hide):
        return f"; not importable while grading: {', '.join(hide)}, the library's own answer to this exercise"
    if module == "deviating.exercises" or module.startswith("deviating.exercises."):
        return "; the checks and the grader are not importable while grading"
    return ""


def _grade_exercise(e: ExerciseGrade, spec: dict, nb, setup: str, folder: str, limits: Limits,  # noqa: PLR0913
                    sandbox: Sandbox | None, seed: int) -> list[str]:
    """Grade one exercise into ``e``; return notes on what happened to its worker."""
    function = spec.get("function") or ""
    try:
        check = _check_of(spec)
    except (ImportError, ValueError) as err:
        e.reason = f"its check is unavailable: {err}"
        return []
    found = _stub_source(nb, function)
    if found is None:
        e.reason = _STUB_REASONS["missing"].format(f=function)
        return []
    hide = hidden_modules(_forbidden(check), sandbox.needed) if sandbox is not None else ()
    fn = RemoteFunction(function, setup, found[1], folder, limits, sandbox=sandbox, hide=hide)
    try:
        try:
            fn.start()
        except StubProblem as err:
            why = str(err) + _import_hint(str(err), hide)
            e.reason = _STUB_REASONS.get(err.kind, "{why}").format(f=function, why=why)
            return [f"cell {found[0]}: {e.reason}"] if err.kind == "broken" else []
        except WorkerFailed as err:
            e.reason = f"its grading worker failed before the first case: {err}"
            return []
        with drawing(seed) as counts, recording() as results, contextlib.redirect_stdout(io.StringIO()):
            try:
                check(fn)
            except Exception as err:  # noqa: BLE001 (a check that fails outside its cases: say so)
                e.reason = f"its check stopped: {type(err).__name__}: {str(err)[:200]}"
                return fn.events
    finally:
        fn.close()
    if not results:
        e.reason = "the check recorded no result"
        return fn.events
    r = results[-1]
    n = counts[-1] if counts else 0  # the drawn cases, last: only they count where there are some
    passed = (list(r.passed) + [False] * r.total)[:r.total]
    e.passed, e.total = int(sum(passed[-n:] if n else passed)), n or r.total
    e.points = round(e.max_points * e.passed / e.total, 6) if e.total else 0.0
    e.failures = list(r.messages)
    first = [m for m in r.messages if not n or MARK in m] or r.messages
    e.reason = "" if e.passed == e.total else ("not implemented yet" if r.status == "not implemented"
                                               else (first[0].splitlines()[0] if first else r.reason))
    counts = {event: fn.events.count(event) for event in fn.events}  # in order, each once
    return [f"{e.label}: {event}" + (f" ({n} times)" if n > 1 else "") for event, n in counts.items()]


def _read_submission(path: Path):  # noqa: ANN202
    """The notebook at ``path``, read without following a symbolic link; ValueError saying why not."""
    import nbformat

    try:
        st = os.lstat(path)
    except OSError as err:
        raise ValueError(f"not readable ({err.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(f"refused: the submission is a symbolic link (to {os.readlink(path)}), not a file; "
                         "hand in the notebook itself")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("refused: the submission is not a regular file (a folder, a pipe or a device)")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, encoding="utf-8") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("refused: the submission is not a regular file")
        try:
            return nbformat.read(fh, as_version=4)
        except Exception as err:  # noqa: BLE001 (any unreadable file: 0, with the reason)
            raise ValueError(f"not a readable notebook: {type(err).__name__}: {str(err)[:200]}") from None


def _read_reference(reference: str | Path):  # noqa: ANN202
    import nbformat

    try:
        return nbformat.read(reference, as_version=4)
    except Exception as err:  # noqa: BLE001 (say which file, and why)
        raise ValueError(f"--reference {reference}: not a readable notebook ({type(err).__name__}: "
                         f"{str(err)[:160]}); give the handed-out .ipynb") from None


def grade_notebook(path: str | Path, *, reference: str | Path | None = None, timeout: int = 60,  # noqa: PLR0913
                   startup_timeout: int = 120, handout: str | Path | None = None,
                   limits: Limits | None = None, sandbox: Sandbox | None = None, unsafe: bool = False,
                   seed: int | None = None) -> Grade:
    """Grade every exercise of one submission, each in its own grading worker (see the module docstring).

    ``timeout`` is the limit of each call of the student's function, ``startup_timeout`` that of a
    worker's setup, in seconds; ``limits`` sets the others (memory, CPU time, ...). ``handout`` is
    the folder whose files (not notebooks) are copied into the submission's folder: by default the
    reference's folder, and none without a reference. The workers run in ``sandbox`` (by default
    :func:`default_sandbox`, which raises IsolationUnavailable where bubblewrap is missing), or, with
    ``unsafe=True``, as plain processes (noted in the grade). ``seed`` draws the hidden cases
    (:mod:`deviating.exercises.drawn`); by default a fresh one from ``os.urandom``.
    """
    path = Path(path)
    limits = limits or Limits(timeout=timeout, startup=startup_timeout)
    sandbox = None if unsafe else (sandbox or default_sandbox())
    seed = int.from_bytes(os.urandom(8), "big") if seed is None else seed
    grade = Grade(submission=path.stem)
    ref_nb = _read_reference(reference) if reference is not None else None
    try:
        nb = _read_submission(path)
    except ValueError as err:
        nb = None
        grade.notes.append(str(err))
    try:
        specs = exercise_index(ref_nb if ref_nb is not None else nb, reference or path) if (ref_nb or nb) else []
    except MalformedExercise as err:
        raise ValueError(f"{path}: cannot tell which exercises it holds ({err}); pass --reference with the "
                         "handed-out notebook") from None
    if nb is not None and not specs:
        raise ValueError(f"{path}: no exercise found (no student-edition metadata, no exercise markers); pass "
                         "--reference with the handed-out notebook")
    grade.exercises = [ExerciseGrade(s["label"], s["title"], 0.0, float(s["points"])) for s in specs]
    if unsafe:
        grade.notes.append(UNSAFE_NOTE)
    if nb is None:
        for e in grade.exercises:
            e.reason = grade.notes[0]
        return grade
    source = ref_nb if ref_nb is not None else nb
    index = setup_cell_index(source)
    setup = source.cells[index].source if index is not None else ""
    asked = {s["function"]: s["label"] for s in specs if s.get("function")}
    for i, c in enumerate(nb.cells):  # a cell that provides what a stub asks for (e.g. imports the library's)
        if c.cell_type == "code" and not {STUB_TAG, "solution"} & set(c.metadata.get("tags", [])) \
                and (ref_nb is not None or i != index):
            for name in sorted(bound_names(c.source) & asked.keys()):
                grade.notes.append(f"cell {i}: binds {name}, the function that {asked[name]} asks the student to "
                                   "write (it is never run: only the stub counts)")
    handout = Path(handout) if handout is not None else (Path(reference).parent if reference is not None else None)
    if handout is not None and not handout.is_dir():
        raise ValueError(f"the handed-out folder {handout} does not exist: pass --handout with the folder of files "
                         "handed out with the notebook")
    with tempfile.TemporaryDirectory(prefix="headlab-grade-") as folder:
        for extra in sorted(handout.iterdir()) if handout is not None else ():
            if extra.is_file() and not extra.is_symlink() and extra.suffix != ".ipynb" \
                    and extra.stat().st_size < HANDOUT_LIMIT:
                shutil.copy2(extra, Path(folder) / extra.name)
        for e, spec in zip(grade.exercises, specs):
            grade.notes += _grade_exercise(e, spec, nb, setup, folder, limits, sandbox, seed)
    return grade


# ----------------------------------------------------------------------- outputs


def _cmd_grade(args) -> int:  # noqa: ANN001
    if args.gradescope and len(args.submissions) != 1:
        raise ValueError("--gradescope writes one results.json: give exactly one submission")
    for name in [*args.submissions, *([args.reference] if args.reference else [])]:
        if not os.path.lexists(name):
            raise ValueError(f"{name}: no such file; give the path of a submitted .ipynb (and --reference the "
                             "handed-out notebook)")
    if args.reference:
        _read_reference(args.reference)
    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {args.seed}")
    sandbox = None
    if not args.unsafe_no_isolation:
        try:
            sandbox = default_sandbox()
        except IsolationUnavailable as err:
            raise ValueError(f"refusing to grade: {err}") from None
    seed = int.from_bytes(os.urandom(8), "big") if args.seed is None else args.seed
    grades = []
    for sub in args.submissions:
        g = grade_notebook(sub, reference=args.reference, timeout=args.timeout, handout=args.handout,
                           limits=Limits(timeout=args.timeout, memory_mb=args.memory_mb, cpu_s=args.cpu_s),
                           sandbox=sandbox, unsafe=args.unsafe_no_isolation, seed=seed)
        grades.append(g)
        print(f"{g.submission}: {g.points:g} / {g.max_points:g}")
        for e in g.exercises:
            print(f"  {e.label:<20} {e.points:>4g} / {e.max_points:g}  {textwrap.shorten(e.reason, 64, placeholder=' ...')}".rstrip())
            if args.details:
                for failure in e.failures:
                    print(textwrap.indent(failure, "      "))
        for note in g.notes:
            print(f"  note: {textwrap.shorten(note, 86, placeholder=' ...')}")
    if args.csv:
        write_csv(grades, args.csv)
        print(f"wrote {args.csv}")
    if args.gradescope:
        write_atomically(args.gradescope, lambda fh: fh.write(json.dumps(gradescope_results(grades[0]), indent=1)))
        print(f"wrote {args.gradescope}")
    return 0


def add_commands(sub) -> None:  # noqa: ANN001
    p = sub.add_parser("grade", help="grade student notebooks: points per exercise, CSV and Gradescope output")
    p.add_argument("submissions", nargs="+", help="the students' .ipynb files")
    p.add_argument("--csv", help="write the gradebook here (one row per submission)")
    p.add_argument("--gradescope", help="write Gradescope's results.json here (one submission)")
    p.add_argument("--reference", help="the handed-out notebook (which exercises, how many points)")
    p.add_argument("--handout", help="the folder of files handed out with the notebook, copied into each "
                                     "submission's folder (default: the reference's folder)")
    p.add_argument("--timeout", type=int, default=60, help="seconds per call of a student's function "
                                                          "(default %(default)s)")
    p.add_argument("--memory-mb", type=int, default=4096, help="memory of a grading worker (default %(default)s)")
    p.add_argument("--cpu-s", type=int, default=600, help="CPU seconds of a grading worker (default %(default)s)")
    p.add_argument("--details", action="store_true", help="print every failed case: input, expected, got")
    p.add_argument("--seed", type=int, help="the secret seed of the drawn cases (default: a fresh one from "
                                            "os.urandom; give one only to reproduce a run)")
    p.add_argument("--unsafe-no-isolation", action="store_true",
                   help="grade without bubblewrap: the students' code runs as plain processes that can read the "
                        "checks and other files (every grade records it)")
    p.set_defaults(func=_cmd_grade)
