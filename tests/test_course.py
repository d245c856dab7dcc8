"""The course around the exercises (issue 39): each exercise's time and mark, builds, each chapter's time.

Prints, per chapter page: exercises, builds, ★★★, essential/optional (count and minutes), reading
minutes, "Predict, then run" boxes, open problems and the names the setup cell imports, with the
issue's targets beside the book's totals. It asserts what holds now: every exercise has its minutes
and its mark; a build is marked exactly where the rule of ``scripts/course_plan.py`` holds; every
numbered chapter keeps at least one ★★★ exercise and two "Predict, then run" boxes; every page with
exercises states its time in its "you will learn" box; the syllabus's problem sets name real
exercises and cover every essential one; and issue 39's targets: at least 80 exercises, 30 of them
builds, and at most 15 names imported by any page's setup cells.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from types import SimpleNamespace

import pytest

from conftest import ROOT
from course_plan import BUILD_LINES, TARGETS, ChapterPlan, plan, time_line
from test_teaching_counts import counts

PLANS = plan()
SYLLABUS = ROOT / "chapters" / "syllabus.md"
GUIDE = ROOT / "chapters" / "lecturers_guide.md"


def _page(stem: str):
    return next(ROOT.glob(f"chapters/*/{stem}.ipynb"))


def _markdown(stem: str) -> list[str]:
    cells = json.loads(_page(stem).read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def test_the_course_table(record_property) -> None:
    rows = [f"{'page':28} {'ex':>3} {'build':>5} {'★★★':>3} {'ess':>3} {'opt':>3} {'min ess':>7} {'min opt':>7} "
            f"{'read':>4} {'predict':>7} {'open':>4} {'setup':>5} {'lib':>3}"]
    per_chapter: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for stem, p in PLANS.items():
        c = counts(_markdown(stem))
        stars = sum("★★★" in e.title for e in p.exercises)
        rows.append(f"{stem:28} {len(p.exercises):3d} {sum(e.build for e in p.exercises):5d} {stars:3d} "
                    f"{len(p.essential):3d} {len(p.optional):3d} {sum(e.minutes or 0 for e in p.essential):7d} "
                    f"{sum(e.minutes or 0 for e in p.optional):7d} {p.reading_minutes:4d} {c['predict']:7d} "
                    f"{c['open']:4d} {len(p.setup):5d} {len(p.library):3d}")
        if re.match(r"0[1-9]_", p.chapter) and stem.startswith(p.chapter[:2]) and stem != "02b_under_the_hood":
            per_chapter[p.chapter]["three_star"] += stars
            per_chapter[p.chapter]["predict"] += c["predict"]
    exercises = [e for p in PLANS.values() for e in p.exercises]
    builds = sum(e.build for e in exercises)
    largest = max(PLANS.values(), key=lambda p: len(p.setup))
    rows.append(f"totals: {len(exercises)} exercises (target {TARGETS['exercises']}), {builds} builds (target "
                f"{TARGETS['builds']}), {sum(e.minutes for e in exercises if e.essential)} min essential, "
                f"{sum(e.minutes for e in exercises if not e.essential)} min optional; setup names at most "
                f"{TARGETS['setup_names']} is the target, the largest setup imports {len(largest.setup)} "
                f"({largest.pages[0]})")
    record_property("summary", "The course, per page (issue 39):\n" + "\n".join(rows))

    missing = [e.label for e in exercises if e.minutes is None or e.essential is None]
    assert not missing, f"exercises without metadata headlab.minutes / essential: {missing}"
    assert len(per_chapter) == 9, sorted(per_chapter)
    assert len(exercises) >= TARGETS["exercises"], f"{len(exercises)} exercises, below issue 39's {TARGETS['exercises']}"
    assert builds >= TARGETS["builds"], f"{builds} builds, below issue 39's {TARGETS['builds']}"
    crowded = {p.pages[0]: len(p.setup) for p in PLANS.values() if len(p.setup) > TARGETS["setup_names"]}
    assert not crowded, f"setup cells importing more than {TARGETS['setup_names']} names: {crowded}"
    short = {k: dict(v) for k, v in per_chapter.items() if v["three_star"] < 1 or v["predict"] < 2}
    assert not short, f"chapters below one ★★★ exercise or two 'Predict, then run' boxes: {short}"


@pytest.mark.parametrize("ex", [e for p in PLANS.values() for e in p.exercises], ids=lambda e: e.label)
def test_a_build_is_marked_where_the_rule_holds(ex) -> None:
    """A build: ★★☆ or ★★★, at least BUILD_LINES lines of the student's code, used by a later cell.
    Marked where it holds and nowhere else, so the count of builds cannot drift from the code."""
    rule = ("★★☆" in ex.title or "★★★" in ex.title) and ex.solution_lines >= BUILD_LINES and bool(ex.later_uses)
    assert ex.build == rule, (
        f"{ex.label}: metadata build={ex.build}, but the rule says {rule} ({ex.solution_lines} lines of code, "
        f"used later in cells {ex.later_uses})")


@pytest.mark.parametrize("stem", [s for s, p in PLANS.items() if p.exercises])
def test_each_page_states_its_time(stem) -> None:
    """The "you will learn" box ends with its time, computed here: the exercises' minutes exactly, the
    reading time within 5 minutes (a prose edit elsewhere may move it by one step)."""
    p = PLANS[stem]
    head = _markdown(stem)[0]
    box = re.search(r"```\{admonition\}[^\n]*you will learn[^\n]*\n(.*?)\n```", head, re.S)
    assert box, f"{stem}: the first cell has no 'you will learn' box"
    stated = re.findall(r"^\*\*Time:\*\*.*$", box.group(1), re.M)
    assert len(stated) == 1, f"{stem}: the box should end with one line: {time_line(p)}"
    reading = int(re.match(r"\*\*Time:\*\* about (\d+) min of reading", stated[0]).group(1))
    assert abs(reading - p.reading_minutes) <= 5, f"{stem}: states {reading} min of reading, counted {p.reading_minutes}"
    assert re.sub(r"about \d+ min", "about R min", stated[0]) == re.sub(r"about \d+ min", "about R min", time_line(p)), \
        f"{stem}: states {stated[0]!r}; python scripts/course_plan.py gives {time_line(p)!r}"


def test_the_time_line_reads_right() -> None:
    ex = lambda m, e: SimpleNamespace(minutes=m, essential=e, title="x")  # noqa: E731
    p = ChapterPlan("01_x", exercises=[ex(10, True), ex(15, True), ex(5, False)], words=1300)
    assert p.reading_minutes == 15  # 1300 / 120 = 10.8 min, rounded up to 5
    assert time_line(p) == ("**Time:** about 15 min of reading, 25 min for the 2 essential exercises "
                            "(5 min more for the optional exercise).")
    p = ChapterPlan("07b_x", exercises=[ex(10, False), ex(10, False)], words=100)
    assert time_line(p) == "**Time:** about 5 min of reading, 20 min for the 2 optional exercises."


def _problem_sets() -> dict[str, list[str]]:
    """The syllabus's weeks and the exercise labels each one's problem set names."""
    text = SYLLABUS.read_text(encoding="utf-8")
    weeks = re.split(r"^## ", text, flags=re.M)[1:]
    return {w.split("\n", 1)[0]: re.findall(r"ex-\d\d-[a-z0-9-]+[a-z0-9]", w) for w in weeks
            if w.startswith("Week")}


def test_the_syllabus_sets_real_exercises_and_every_essential_one() -> None:
    labels = {e.label: e for p in PLANS.values() for e in p.exercises}
    weeks = _problem_sets()
    assert 10 <= len(weeks) <= 12, f"the syllabus plans {len(weeks)} weeks (10 to 12 wanted)"
    named = [label for week in weeks.values() for label in week]
    unknown = sorted(set(named) - set(labels))
    assert not unknown, f"the syllabus names exercises the book does not have: {unknown}"
    essential = sorted(label for label, e in labels.items() if e.essential and label not in named)
    assert not essential, f"essential exercises in no week's problem set: {essential}"


def test_the_teaching_pages_are_in_the_toc() -> None:
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for page in (SYLLABUS, GUIDE):
        assert page.is_file() and f"file: chapters/{page.stem}" in toc, page.name
