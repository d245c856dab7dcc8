#!/usr/bin/env python3
"""What each chapter asks of a student, and how long it takes: ``python scripts/course_plan.py``.

Read from the notebooks (issue 39), per page of a chapter (chapter 7's two pages and chapter 2's
appendix each have their own row and time):

- the exercises, from their exercise-start cells' metadata ``{"headlab": {"minutes": N,
  "essential": bool, "build": bool}}`` (:func:`deviating.exercises.notebook.find_exercises` checks
  it against the title);
- a **build**: an exercise whose metadata says ``"build": true``. The rule it must meet, checked
  by ``tests/test_course.py`` from the code: ★★☆ or ★★★, a solution of at least
  :data:`BUILD_LINES` lines of code (docstring aside), and a later code cell of the chapter
  (neither a solution nor a check) that calls the student's function;
- the reading time: every Markdown word of the page (:func:`prose_budget.count`, exercises
  included), read at :data:`READING_WPM` words a minute, rounded up to 5 minutes;
- the names the setup cell imports (``import numpy as np`` binds one, ``from x import a, b`` two),
  and those from ``headlab`` and ``deviating``.

``main`` prints the table and the time line each chapter's "you will learn" box states
(:func:`time_line`; ``tests/test_course.py`` checks that every chapter states its own).
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))

from book_toc import toc_files  # noqa: E402
from prose_budget import count, markdown_cells  # noqa: E402

__all__ = ["READING_WPM", "BUILD_LINES", "TARGETS", "ChapterPlan", "chapter_pages", "plan", "solution_lines",
           "later_uses", "setup_names", "time_line", "main"]

READING_WPM = 120   # words a minute: technical prose with formulas, figures and code to read beside it
BUILD_LINES = 10    # lines of the student's own code (docstring aside) that make an exercise a build
TARGETS = {"exercises": 80, "builds": 30, "setup_names": 15}  # issue 39's targets, printed beside the counts


@dataclass
class ChapterPlan:
    """One chapter's exercises, times and setup."""

    chapter: str
    pages: list[str] = field(default_factory=list)
    exercises: list = field(default_factory=list)   # deviating.exercises.notebook.Exercise
    words: int = 0
    setup: list[str] = field(default_factory=list)   # names the setup cells import
    library: list[str] = field(default_factory=list)  # of them, from headlab / deviating

    @property
    def reading_minutes(self) -> int:
        return 5 * math.ceil(self.words / READING_WPM / 5)

    @property
    def essential(self) -> list:
        return [e for e in self.exercises if e.essential]

    @property
    def optional(self) -> list:
        return [e for e in self.exercises if e.essential is False]


def chapter_pages() -> list[Path]:
    """The notebooks of _toc.yml whose folder is a chapter (``chapters/NN_...``), in order."""
    pages = [ROOT / f"{f}.ipynb" for f in toc_files() if re.match(r"chapters/\d\d_", f)]
    return [p for p in pages if p.is_file()]


def setup_names(nb: dict) -> tuple[list[str], list[str]]:
    """The names the setup cell binds by import, and those of them from headlab or deviating."""
    from deviating.exercises.notebook import setup_cell_index

    i = setup_cell_index(nb)
    if i is None:
        return [], []
    names, library = [], []
    for node in ast.walk(ast.parse("".join(nb["cells"][i]["source"]))):
        if isinstance(node, ast.Import):
            bound = [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            bound = [(a.asname or a.name, node.module or "") for a in node.names]
        else:
            continue
        for name, module in bound:
            names.append(name)
            if module.split(".")[0] in ("headlab", "deviating"):
                library.append(name)
    return names, library


def solution_lines(nb: dict, ex) -> int:
    """Lines of code in the solution's functions, their docstrings left out."""
    lines: set[tuple[int, int]] = set()
    for i in ex.solution_cells:
        for node in ast.parse("".join(nb["cells"][i]["source"])).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            body = node.body[1:] if node.body and isinstance(node.body[0], ast.Expr) and \
                isinstance(node.body[0].value, ast.Constant) else node.body
            lines |= {(i, n.lineno) for stmt in body for n in ast.walk(stmt) if hasattr(n, "lineno")}
    return len(lines)


def later_uses(nb: dict, ex) -> list[int]:
    """Code cells after the exercise's check (no solution, no check) that call its function."""
    call = re.compile(rf"\b{re.escape(ex.function or '')}\s*\(")
    return [i for i, c in enumerate(nb["cells"]) if i > (ex.check or ex.start) and c["cell_type"] == "code"
            and not {"solution", "exercise-check"} & set(c["metadata"].get("tags", []))
            and call.search("".join(c["source"]))]


def plan() -> dict[str, ChapterPlan]:
    """Every chapter page's plan, keyed by the page's name (chapter 7's two pages are two plans)."""
    from deviating.exercises.notebook import find_exercises

    out: dict[str, ChapterPlan] = {}
    for page in chapter_pages():
        nb = json.loads(page.read_text(encoding="utf-8"))
        p = out.setdefault(page.stem, ChapterPlan(page.parent.name))
        p.pages.append(page.stem)
        for ex in find_exercises(nb, page):
            ex.page = page.stem
            ex.solution_lines = solution_lines(nb, ex)
            ex.later_uses = later_uses(nb, ex)
            p.exercises.append(ex)
        p.words += count(markdown_cells(page)).words
        names, library = setup_names(nb)
        p.setup += names
        p.library += library
    return out


def time_line(p: ChapterPlan) -> str:
    """The sentence a chapter's "you will learn" box ends with."""
    def exercises(group: list, kind: str) -> str:
        minutes = sum(e.minutes or 0 for e in group)
        return f"{minutes} min for the {kind} exercise" if len(group) == 1 else \
            f"{minutes} min for the {len(group)} {kind} exercises"

    line = f"**Time:** about {p.reading_minutes} min of reading"
    if p.essential:
        line += ", " + exercises(p.essential, "essential")
    if p.optional and not p.essential:
        line += ", " + exercises(p.optional, "optional")
    elif p.optional:
        line += f" ({exercises(p.optional, 'optional').replace(' min for', ' min more for', 1)})"
    return line + "."


def main(argv: list[str] | None = None) -> int:
    plans = plan()
    print(f"{'chapter':28} {'ex':>3} {'build':>5} {'★★★':>3} {'ess':>3} {'opt':>3} {'min ess':>7} {'min opt':>7} "
          f"{'read':>4} {'setup':>5} {'lib':>4}")
    for key, p in plans.items():
        print(f"{key:28} {len(p.exercises):3d} {sum(e.build for e in p.exercises):5d} "
              f"{sum('★★★' in e.title for e in p.exercises):3d} {len(p.essential):3d} {len(p.optional):3d} "
              f"{sum(e.minutes or 0 for e in p.essential):7d} {sum(e.minutes or 0 for e in p.optional):7d} "
              f"{p.reading_minutes:4d} {len(p.setup):5d} {len(p.library):4d}")
    total = sum(len(p.exercises) for p in plans.values())
    builds = sum(e.build for p in plans.values() for e in p.exercises)
    print(f"targets (issue 39): exercises {total}/{TARGETS['exercises']}, builds {builds}/{TARGETS['builds']}, "
          f"setup names at most {TARGETS['setup_names']} (largest now {max(len(p.setup) for p in plans.values())})")
    for key, p in plans.items():
        if p.exercises:
            print(f"{key}: {time_line(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
