"""What each chapter asks of its reader, counted (issue 25): exercises, ★★★ exercises that build a
tool or design a baseline, "Predict, then run" boxes, and open problems.

The table is printed at the end of the run (``record_property("summary", ...)``, see conftest), and
every numbered chapter must meet the minimums. A chapter's pages (chapter 7 has two) count together.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from prose_budget import chapter_of, numbered_chapters

MINIMUM = {"exercises": 3, "three_star": 1, "predict": 2, "open_min": 3, "open_max": 5}
_EXERCISE = re.compile(r"```\{exercise-start\}\s*(?P<title>[^\n]*)")
_PREDICT = re.compile(r"```\{admonition\}\s*Predict, then run")
# a hint: a dropdown, or an admonition with the dropdown class (either form folds it on the site)
_HINT = re.compile(r"```\{dropdown\}|```\{admonition\}[^\n]*\n\s*:class:[^\n]*\bdropdown\b")
_OPEN = re.compile(r"^## Open problems\s*$(?P<body>.*?)(?=^## |\Z)", re.M | re.S)


def counts(markdown: list[str]) -> dict[str, int]:
    """The four counts of one page's Markdown cells; an open problem is one with a hint (a dropdown)
    in the "## Open problems" section."""
    text = "\n\n".join(markdown)
    titles = [m["title"] for m in _EXERCISE.finditer(text)]
    open_section = _OPEN.search(text)
    return {
        "exercises": len(titles),
        "three_star": sum("★★★" in t for t in titles),
        "predict": len(_PREDICT.findall(text)),
        "open": len(_HINT.findall(open_section["body"])) if open_section else 0,
    }


def _markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


def chapter_counts() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for page in numbered_chapters():
        for key, value in counts(_markdown(page)).items():
            out[chapter_of(page)][key] += value
    return {k: dict(v) for k, v in out.items()}


def test_the_counter_counts_what_it_must():
    page = ["```{exercise-start} Build it ★★★\n:label: ex-x\n```", "```{exercise-start} Easy ★☆☆\n```",
            "```{admonition} Predict, then run\n:class: note\nGuess.\n```",
            "## Open problems\n\n**One.**\n\n```{dropdown} Hint\nh\n```\n\n**Two.**\n\n```{dropdown} Hint\nh\n```"
            "\n\n**Three.**\n\n   ```{admonition} Hint\n   :class: dropdown\n   h\n   ```"
            "\n\n## What comes next\n\n```{dropdown} Not a problem\nx\n```"]
    assert counts(page) == {"exercises": 2, "three_star": 1, "predict": 1, "open": 3}


def test_every_chapter_asks_enough_of_its_reader(record_property):
    table = chapter_counts()
    lines = [f"{'chapter':22} exercises  ★★★  predict  open problems"]
    lines += [f"{k:22} {v['exercises']:9d} {v['three_star']:4d} {v['predict']:8d} {v['open']:8d}"
              for k, v in sorted(table.items())]
    record_property("summary", "Teaching, per chapter (issue 25):\n" + "\n".join(lines))
    short = {k: v for k, v in table.items()
             if v["exercises"] < MINIMUM["exercises"] or v["three_star"] < MINIMUM["three_star"]
             or v["predict"] < MINIMUM["predict"] or not MINIMUM["open_min"] <= v["open"] <= MINIMUM["open_max"]}
    assert len(table) == 9, f"expected the nine numbered chapters, got {sorted(table)}"
    assert not short, "chapters below the minimums " + str(MINIMUM) + ":\n" + "\n".join(
        line for line in lines if line.split()[0] in short)
