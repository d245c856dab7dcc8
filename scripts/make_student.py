#!/usr/bin/env python3
"""Write the student edition of the chapters: ``python scripts/make_student.py [--out student] [notebooks...]``.

The student edition is the same notebooks with every solution removed (the
``solution-start`` marker cell, the cells tagged ``solution`` and the
``solution-end`` marker cell), stubs and checks kept, all outputs and the saved
widget state cleared (:mod:`deviating.exercises.student`); the list of exercises is
recorded in the notebook's metadata (for ``python -m deviating grade``), a cell after
the setup cell makes a failed check print its message instead of stopping "Run All",
and a last cell lists each exercise still unfinished. It is written for Colab and
JupyterLab as the Colab edition is (``scripts/colab_edition.py``): plain Markdown, no
MyST markup, and the install cell pinned to the commit (``--commit``, default the
checkout's HEAD). Files next to a chapter notebook (images, data) are copied too; the
folder structure under ``chapters/`` is preserved. Nobody edits a student notebook by
hand: regenerate it.

Before writing anything every notebook's exercises are validated against the
book's exercise format (CONTRIBUTING.md). A malformed exercise stops the script
with exit status 1 and one line per problem: ``notebook: cell N: what is wrong``.
``--check`` validates without writing.

The exercise format (parsed by :mod:`deviating.exercises.notebook`, which the grader shares), cell by cell:

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
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
sys.path.insert(0, str(ROOT / "lib"))  # the library of this checkout, installed or not

from deviating.exercises.notebook import (  # noqa: E402  (re-exported: tests and tools import them from here)
    Exercise,
    MalformedExercise,
    find_exercises,
    setup_cell_index,
)
from deviating.exercises.student import student_notebook  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab_edition import book_links, build_commit, outside_notebook  # noqa: E402

__all__ = ["Exercise", "MalformedExercise", "find_exercises", "setup_cell_index", "student_notebook", "main"]


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


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
    parser.add_argument("--commit", help="the commit the Colab install cells pin (default: git rev-parse HEAD)")
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
    commit = args.commit or build_commit()
    for nb_path, (edition, n_ex) in editions.items():
        target = _target(nb_path, args.out)
        target.parent.mkdir(parents=True, exist_ok=True)
        # plain Markdown and the install cell pinned, as in the Colab edition (scripts/colab_edition.py)
        edition = outside_notebook(edition, book_links(nb_path, commit), require_install=False)
        nbformat.write(nbformat.from_dict(edition), target)
        for extra in nb_path.parent.iterdir():  # images, data next to the notebook
            if extra.is_file() and extra.suffix != ".ipynb" and not extra.name.startswith("."):
                shutil.copy2(extra, target.parent / extra.name)
        print(f"make_student: {_display(nb_path)} -> {target} ({n_ex} exercises, solutions removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
