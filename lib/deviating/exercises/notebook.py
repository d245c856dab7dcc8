"""The book's exercise format, read from a notebook: where each exercise's parts sit.

An exercise is, cell by cell (CONTRIBUTING.md):

1. markdown: ```` ```{exercise-start} Title ★☆☆ ```` with ``:label: ex-NN-slug``, then the task;
2. code tagged ``exercise-stub``: a function whose body raises ``NotImplementedError``;
3. markdown: ```` ```{exercise-end} ````;
4. markdown: ```` ```{solution-start} ex-NN-slug ```` with ``:class: dropdown`` (nothing else);
5. code tagged ``solution``: the same function, solved (one or more cells);
6. markdown: ```` ```{solution-end} ````;
7. code tagged ``exercise-check``: ``check_<name>(<function>)``.

:func:`find_exercises` parses and validates it (``scripts/make_student.py`` and the tests use
it), :func:`deviating.exercises.student.student_notebook` removes the solutions, and the grader
(:mod:`deviating.exercises.grading`) reads which function each exercise asks for, which check
tests it and how many points it is worth. It lives in the library, not in ``scripts/``, so that
``python -m deviating grade`` works from an installed package.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Exercise", "MalformedExercise", "find_exercises", "time_tag", "setup_cell_index", "exercise_index", "bound_names", "shadowed_functions", "DIFFICULTIES", "POINTS"]

STUB_TAG, SOLUTION_TAG, CHECK_TAG = "exercise-stub", "solution", "exercise-check"
SKIP_TAG = "skip-execution"
DIFFICULTIES = ("★☆☆", "★★☆", "★★★")
POINTS = {"★☆☆": 1, "★★☆": 2, "★★★": 3}  # points per exercise by difficulty (metadata may override)
LABEL_RE = re.compile(r"^ex-(\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*$")
# A MyST directive opening line: ```{name} argument   or   :::{name} argument
DIRECTIVE_RE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[a-z-]+)\}[ \t]*(?P<arg>.*?)[ \t]*$", re.M)
MARKERS = ("exercise-start", "exercise-end", "solution-start", "solution-end")
UNGATED = ("exercise", "solution")  # the one-block forms, which cannot hold notebook cells
DEF_RE = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.M)
CHECK_CALL_RE = re.compile(r"\b(check_\w+)\(\s*([A-Za-z_]\w*)\s*[,)]")
CHECK_IMPORT_RE = re.compile(r"from\s+(deviating\.exercises\.\w+)\s+import")


class MalformedExercise(ValueError):
    """The exercises of a notebook do not follow the book's format.

    ``problems`` is a list of ``(cell_index, message)``; ``str()`` names the
    notebook and each cell.
    """

    def __init__(self, path: Path | str, problems: list[tuple[int | None, str]]):
        self.path = Path(path)
        self.problems = problems
        super().__init__(
            "\n".join(
                f"{_display(self.path)}: " + (f"cell {i}: " if i is not None else "") + msg
                for i, msg in problems
            )
        )


@dataclass
class Exercise:
    """Where one exercise's parts sit in its notebook (cell indices)."""

    label: str
    title: str
    start: int
    stub: int | None = None
    function: str | None = None
    end: int | None = None
    solution_start: int | None = None
    solution_cells: list[int] = field(default_factory=list)
    solution_end: int | None = None
    check: int | None = None
    check_module: str | None = None
    check_name: str | None = None
    points: float = 1.0
    minutes: int | None = None     # the estimated time (metadata headlab.minutes)
    essential: bool | None = None  # essential or optional (metadata headlab.essential)
    build: bool = False            # a build (metadata headlab.build; tests/test_course.py checks the rule)

    def to_json(self) -> dict:
        """What the student edition records in its metadata, for the grader."""
        return {"label": self.label, "title": self.title, "function": self.function,
                "check_module": self.check_module, "check": self.check_name, "points": self.points,
                "minutes": self.minutes, "essential": self.essential}


def time_tag(minutes: int, essential: bool) -> str:
    """How an exercise's title ends, from its metadata: `` · ~15 min · essential`` (or ``optional``).

    The site, the student edition and the Colab edition all show the title, so the time and the
    mark are written into it; :func:`find_exercises` checks that they agree with the metadata.
    """
    return f" · ~{minutes} min · {'essential' if essential else 'optional'}"


_TIME_TAG_RE = re.compile(r" · ~\d+ min · (essential|optional)$")


def _course_metadata(ex: Exercise, meta: dict, i: int, problems: list) -> None:
    """Read ``minutes``, ``essential`` and ``build`` from the exercise-start cell's ``headlab``
    metadata into ``ex``, and check that the title ends with their :func:`time_tag`."""
    minutes, essential, build = meta.get("minutes"), meta.get("essential"), meta.get("build", False)
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or minutes <= 0):
        problems.append((i, f"{ex.label}: metadata headlab.minutes must be a positive whole number of minutes, "
                            f"got {minutes!r}"))
        minutes = None
    if essential is not None and not isinstance(essential, bool):
        problems.append((i, f"{ex.label}: metadata headlab.essential must be true or false, got {essential!r}"))
        essential = None
    if not isinstance(build, bool):
        problems.append((i, f"{ex.label}: metadata headlab.build must be true or false, got {build!r}"))
        build = False
    ex.minutes, ex.essential, ex.build = minutes, essential, build
    if (minutes is None) != (essential is None):
        problems.append((i, f"{ex.label}: metadata headlab needs both 'minutes' and 'essential' (or neither)"))
    elif minutes is not None and not ex.title.endswith(time_tag(minutes, essential)):
        problems.append((i, f"{ex.label}: the title must end with {time_tag(minutes, essential)!r}, as its "
                            f"metadata says (got {ex.title!r})"))
    elif minutes is None and _TIME_TAG_RE.search(ex.title):
        problems.append((i, f"{ex.label}: the title states a time but the cell's metadata headlab has no "
                            "'minutes' and 'essential'"))


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _option(text: str, name: str) -> str | None:
    match = re.search(rf"^:{name}:[ \t]*(.*?)[ \t]*$", text, re.M)
    return match.group(1) if match else None


def setup_cell_index(nb: dict) -> int | None:
    """The chapter's setup cell: the first code cell that the build executes."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code" and SKIP_TAG not in _tags(cell):
            return i
    return None


def _chapter_number(path: Path) -> str | None:
    for part in reversed(path.resolve().parts[:-1]):
        match = re.match(r"^(\d{2})_", part)
        if match:
            return match.group(1)
    return None


def find_exercises(nb: dict, path: Path | str = "<notebook>") -> list[Exercise]:
    """Parse and validate the exercises of a notebook; raise MalformedExercise if any is off."""
    path = Path(path)
    problems: list[tuple[int | None, str]] = []
    exercises: dict[str, Exercise] = {}
    open_ex: Exercise | None = None
    open_sol: Exercise | None = None
    last_closed: Exercise | None = None
    chapter = _chapter_number(path)

    for i, cell in enumerate(nb["cells"]):
        src, tags = _source(cell), _tags(cell)
        if cell["cell_type"] == "markdown":
            if SOLUTION_TAG in tags or STUB_TAG in tags or CHECK_TAG in tags:
                problems.append((i, f"a markdown cell carries an exercise tag {tags}; only code cells do"))
            for m in DIRECTIVE_RE.finditer(src):
                name, arg = m.group("name"), m.group("arg")
                if name in UNGATED:
                    problems.append(
                        (i, f"a one-block {{{name}}} directive: use the gated {{{name}-start}} ... "
                            f"{{{name}-end}} form, which make_student.py and the site understand")
                    )
                    continue
                if name not in MARKERS:
                    continue
                if open_sol is not None and name != "solution-end":
                    problems.append(
                        (i, f"{{{name}}} inside the solution of {open_sol.label!r} (opened in cell "
                            f"{open_sol.solution_start}); close it with {{solution-end}} first")
                    )
                    continue
                if name == "exercise-start":
                    if open_ex is not None:
                        problems.append(
                            (i, f"{{exercise-start}} while exercise {open_ex.label!r} (cell {open_ex.start}) "
                                "is still open: add its {exercise-end}")
                        )
                    label = _option(src[m.end():], "label") or ""
                    if not LABEL_RE.match(label):
                        problems.append(
                            (i, f"exercise label {label!r} must look like ex-NN-slug (e.g. ex-00-softmax), "
                                "given as ':label: ex-NN-slug' on the line after {exercise-start}")
                        )
                    elif chapter and label[3:5] != chapter:
                        problems.append((i, f"exercise label {label!r} does not carry this chapter's number {chapter}"))
                    if label in exercises:
                        problems.append((i, f"exercise label {label!r} is used twice (first in cell {exercises[label].start})"))
                    if not any(d in arg for d in DIFFICULTIES):
                        problems.append((i, f"exercise title {arg!r} must carry a difficulty: one of {', '.join(DIFFICULTIES)}"))
                    open_ex = Exercise(label=label, title=arg, start=i)
                    stars = [d for d in DIFFICULTIES if d in arg]
                    meta = cell.get("metadata", {}).get("headlab", {})
                    open_ex.points = float(meta.get("points", POINTS[stars[0]] if stars else 1))
                    _course_metadata(open_ex, meta, i, problems)
                    exercises[label] = open_ex
                elif name == "exercise-end":
                    if open_ex is None:
                        problems.append((i, "{exercise-end} without an {exercise-start} before it"))
                        continue
                    if open_ex.stub is None:
                        problems.append(
                            (open_ex.start, f"exercise {open_ex.label!r} has no stub: a code cell tagged "
                                            f"{STUB_TAG!r} between its start and end")
                        )
                    open_ex.end = i
                    last_closed, open_ex = open_ex, None
                elif name == "solution-start":
                    if open_ex is not None:
                        problems.append((i, f"{{solution-start}} inside exercise {open_ex.label!r}; close it with {{exercise-end}} first"))
                        continue
                    target = exercises.get(arg)
                    if target is None:
                        problems.append(
                            (i, f"{{solution-start}} refers to {arg!r}, which matches no exercise above "
                                f"(known: {sorted(exercises) or 'none'})")
                        )
                        target = Exercise(label=arg, title="", start=i)  # keep parsing
                    elif target.solution_start is not None:
                        problems.append((i, f"exercise {arg!r} has a second solution (first in cell {target.solution_start})"))
                    if (_option(src[m.end():], "class") or "").split().count("dropdown") != 1:
                        problems.append((i, "a solution must be collapsed: add ':class: dropdown' to {solution-start}"))
                    rest = DIRECTIVE_RE.sub("", src)
                    rest = re.sub(r"^:[a-z-]+:.*$", "", rest, flags=re.M).replace("`", "").replace(":::", "").strip()
                    if rest:
                        problems.append(
                            (i, "the {solution-start} cell must hold only the directive; put explanations "
                                "in the solution code as comments")
                        )
                    target.solution_start = i
                    open_sol = target
                elif name == "solution-end":
                    if open_sol is None:
                        problems.append((i, "{solution-end} without a {solution-start} before it"))
                        continue
                    if not open_sol.solution_cells:
                        problems.append(
                            (open_sol.solution_start, f"the solution of {open_sol.label!r} has no code cell tagged {SOLUTION_TAG!r}")
                        )
                    open_sol.solution_end = i
                    open_sol = None
        elif cell["cell_type"] == "code":
            if STUB_TAG in tags:
                if open_ex is None:
                    problems.append((i, f"a cell tagged {STUB_TAG!r} outside any exercise (between exercise-start and -end)"))
                    continue
                if open_ex.stub is not None:
                    problems.append((i, f"exercise {open_ex.label!r} has a second stub (first in cell {open_ex.stub})"))
                open_ex.stub = i
                names = DEF_RE.findall(src)
                open_ex.function = names[0] if names else None
                if not names:
                    problems.append((i, "the stub must define a function (def name(...) -> ...:)"))
                if "raise NotImplementedError" not in src:
                    problems.append((i, "the stub's body must be `raise NotImplementedError`"))
            elif SOLUTION_TAG in tags:
                if open_sol is None:
                    problems.append((i, f"a cell tagged {SOLUTION_TAG!r} outside any {{solution-start}} ... {{solution-end}} block"))
                    continue
                open_sol.solution_cells.append(i)
                if open_sol.function and open_sol.function not in DEF_RE.findall(src) and len(open_sol.solution_cells) == 1:
                    problems.append(
                        (i, f"the solution must define the stub's function {open_sol.function!r} "
                            f"(it defines {DEF_RE.findall(src) or 'no function'})")
                    )
            elif CHECK_TAG in tags:
                target = last_closed
                if open_ex is not None or open_sol is not None:
                    problems.append((i, "a check cell inside an exercise or solution block; put it after {solution-end}"))
                    continue
                if target is None:
                    problems.append((i, f"a cell tagged {CHECK_TAG!r} with no exercise before it"))
                    continue
                if target.check is not None:
                    problems.append((i, f"exercise {target.label!r} has a second check (first in cell {target.check})"))
                    continue
                calls = CHECK_CALL_RE.findall(src)
                if not calls or (target.function and all(arg != target.function for _, arg in calls)):
                    problems.append(
                        (i, f"the check cell must call check_<name>({target.function or '<function>'}) "
                            f"for exercise {target.label!r}")
                    )
                if "deviating.exercises" not in src:
                    problems.append((i, "the check cell must import its check from deviating.exercises.chNN"))
                target.check = i
                module = CHECK_IMPORT_RE.search(src)
                target.check_module = module.group(1) if module else None
                target.check_name = next((name for name, arg in calls if arg == target.function),
                                         calls[0][0] if calls else None)
            elif open_sol is not None:
                problems.append(
                    (i, f"an untagged code cell inside the solution of {open_sol.label!r}: tag it {SOLUTION_TAG!r} "
                        "or move it out")
                )
        elif open_sol is not None:
            problems.append((i, f"a {cell['cell_type']} cell inside the solution of {open_sol.label!r}"))
        if cell["cell_type"] == "markdown" and open_sol is not None and not any(
            m.group("name") in MARKERS for m in DIRECTIVE_RE.finditer(src)
        ):
            problems.append(
                (i, f"a markdown cell inside the solution of {open_sol.label!r}: only cells tagged "
                    f"{SOLUTION_TAG!r} may sit between solution-start and solution-end")
            )

    if open_ex is not None:
        problems.append((open_ex.start, f"exercise {open_ex.label!r} is never closed: add an {{exercise-end}} cell"))
    if open_sol is not None:
        problems.append((open_sol.solution_start, f"the solution of {open_sol.label!r} is never closed: add a {{solution-end}} cell"))
    for ex in exercises.values():
        if ex.end is None:
            continue
        if ex.solution_start is None:
            problems.append((ex.start, f"exercise {ex.label!r} has no solution (a {{solution-start}} {ex.label} block)"))
        if ex.check is None:
            problems.append(
                (ex.start, f"exercise {ex.label!r} has no check: a code cell tagged {CHECK_TAG!r} calling "
                           f"check_<name>({ex.function or '<function>'}) after its solution")
            )
    if exercises and setup_cell_index(nb) is None:
        problems.append((None, "the notebook has exercises but no setup cell (a code cell that the build executes)"))
    if problems:
        problems.sort(key=lambda p: -1 if p[0] is None else p[0])
        raise MalformedExercise(path, problems)
    return list(exercises.values())


def exercise_index(nb: dict, path: Path | str = "<notebook>") -> list[dict]:
    """The exercises a notebook asks for (label, title, function, check module and name, points):
    from a student edition's metadata when it has it, else parsed from its cells."""
    recorded = nb.get("metadata", {}).get("headlab", {}).get("exercises")
    if recorded:
        return [dict(e) for e in recorded]
    return [ex.to_json() for ex in find_exercises(nb, path)]




def bound_names(source: str) -> set[str]:
    """The names a cell's code binds at its top level: imports (``as`` names included), ``def``,
    ``class``, assignments and loop targets. A cell that does not parse binds nothing."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # and not the names bound inside it
            continue
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if not isinstance(node, ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return names


def shadowed_functions(nb: dict, path: Path | str = "<notebook>") -> list[tuple[int, str, str]]:
    """Cells outside an exercise's stub and solution that bind the name of a function a stub asks
    for, as ``(cell index, function, exercise label)``: e.g. a setup cell that imports the
    library's ``match_features`` while a stub asks the reader to write ``match_features``.

    Such a notebook lets a reader who skips (or deletes) the stub pass with the library's answer;
    ``python -m deviating grade`` gives that exercise 0 and says why, and the book's tests fail.
    """
    exercises = find_exercises(nb, path)
    asked = {ex.function: ex.label for ex in exercises if ex.function}
    own = {ex.stub for ex in exercises} | {i for ex in exercises for i in ex.solution_cells}
    found = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code" and i not in own:
            found += [(i, name, asked[name]) for name in sorted(bound_names(_source(cell)) & asked.keys())]
    return found
