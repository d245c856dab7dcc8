#!/usr/bin/env python3
"""Write the student edition of the chapters: ``python scripts/make_student.py [--out student] [notebooks...]``.

The student edition is the same notebooks with every solution removed (the
``solution-start`` marker cell, the cells tagged ``solution`` and the
``solution-end`` marker cell), stubs and checks kept, all outputs and the saved
widget state cleared. Files next to a chapter notebook (images, data) are copied
too; the folder structure under ``chapters/`` is preserved. Nobody edits a
student notebook by hand: regenerate it.

Before writing anything every notebook's exercises are validated against the
book's exercise format (CONTRIBUTING.md). A malformed exercise stops the script
with exit status 1 and one line per problem: ``notebook: cell N: what is wrong``.
``--check`` validates without writing.

The exercise format, cell by cell:

1. markdown: ```` ```{exercise-start} Title ★☆☆ ```` with ``:label: ex-NN-slug``, then the task;
2. code tagged ``exercise-stub``: a function whose body raises ``NotImplementedError``;
3. markdown: ```` ```{exercise-end} ````;
4. markdown: ```` ```{solution-start} ex-NN-slug ```` with ``:class: dropdown`` (nothing else);
5. code tagged ``solution``: the same function, solved (one or more cells);
6. markdown: ```` ```{solution-end} ````;
7. code tagged ``exercise-check``: ``check_<name>(<function>)``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

STUB_TAG, SOLUTION_TAG, CHECK_TAG = "exercise-stub", "solution", "exercise-check"
SKIP_TAG = "skip-execution"
DIFFICULTIES = ("★☆☆", "★★☆", "★★★")
LABEL_RE = re.compile(r"^ex-(\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*$")
# A MyST directive opening line: ```{name} argument   or   :::{name} argument
DIRECTIVE_RE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[a-z-]+)\}[ \t]*(?P<arg>.*?)[ \t]*$", re.M)
MARKERS = ("exercise-start", "exercise-end", "solution-start", "solution-end")
UNGATED = ("exercise", "solution")  # the one-block forms, which cannot hold notebook cells
DEF_RE = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.M)
CHECK_CALL_RE = re.compile(r"\b(check_\w+)\(\s*([A-Za-z_]\w*)\s*[,)]")


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


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
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
                if "headlab.exercises" not in src:
                    problems.append((i, "the check cell must import its check from headlab.exercises.chNN"))
                target.check = i
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


def student_notebook(nb: dict, path: Path | str = "<notebook>") -> dict:
    """The student edition of a notebook (a new dict): solution blocks removed, outputs cleared."""
    import copy

    exercises = find_exercises(nb, path)
    drop: set[int] = set()
    for ex in exercises:
        assert ex.solution_start is not None and ex.solution_end is not None  # validated
        drop.update(range(ex.solution_start, ex.solution_end + 1))
    out = copy.deepcopy(nb)
    cells = []
    for i, cell in enumerate(out["cells"]):
        if i in drop:
            continue
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
            cell.get("metadata", {}).pop("execution", None)
        cells.append(cell)
    out["cells"] = cells
    out.get("metadata", {}).pop("widgets", None)
    out.setdefault("metadata", {})["headlab"] = {
        "edition": "student",
        "generated_by": "scripts/make_student.py (do not edit by hand; regenerate)",
    }
    return out


def _target(nb_path: Path, out: Path) -> Path:
    try:
        return out / nb_path.resolve().relative_to(CHAPTERS.resolve())
    except ValueError:
        return out / nb_path.name


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook under chapters/")
    parser.add_argument("--out", type=Path, default=ROOT / "student", help="output folder (default: student/)")
    parser.add_argument("--check", action="store_true", help="only validate the exercises; write nothing")
    args = parser.parse_args(argv)

    notebooks = args.notebooks or sorted(
        p for p in CHAPTERS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
    )
    if not notebooks:
        print("make_student: no notebooks found", file=sys.stderr)
        return 1
    editions, errors = {}, []
    for nb_path in notebooks:
        if not nb_path.is_file():
            errors.append(f"{nb_path}: no such notebook")
            continue
        nb = nbformat.read(nb_path, as_version=4)
        try:
            editions[nb_path] = (student_notebook(nb, nb_path), len(find_exercises(nb, nb_path)))
        except MalformedExercise as err:
            errors.append(str(err))
    if errors:
        print("make_student: malformed exercises, nothing written:\n" + "\n".join(errors), file=sys.stderr)
        return 1
    if args.check:
        print(f"make_student: {len(editions)} notebooks, {sum(n for _, n in editions.values())} exercises, all well-formed")
        return 0
    for nb_path, (edition, n_ex) in editions.items():
        target = _target(nb_path, args.out)
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.from_dict(edition), target)
        for extra in nb_path.parent.iterdir():  # images, data next to the notebook
            if extra.is_file() and extra.suffix != ".ipynb" and not extra.name.startswith("."):
                shutil.copy2(extra, target.parent / extra.name)
        print(f"make_student: {_display(nb_path)} -> {target} ({n_ex} exercises, solutions removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
