"""The cell packs of new exercises (tests/data/packs/*.json) are ready to insert into their chapters.

A pack holds an exercise's cells in the book's format and the code cell they go after
(scripts/insert_pack.py inserts it). This checks that each pack parses as an exercise of its
chapter, and, while the chapter does not hold it yet, that its anchors each name exactly one cell.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT
from insert_pack import insert

from deviating.exercises.notebook import find_exercises

PACKS = sorted((ROOT / "tests" / "data" / "packs").glob("*.json"))


def _groups(pack: dict) -> list[dict]:
    return pack.get("groups") or [{"after": pack["after"], "cells": pack["cells"]}]


@pytest.mark.parametrize("path", PACKS, ids=lambda p: p.stem)
def test_a_pack_is_one_exercise_of_its_chapter(path: Path) -> None:
    pack = json.loads(path.read_text(encoding="utf-8"))
    assert pack["label"] == path.stem, f"{path.name}: its label is {pack['label']!r}"
    assert (ROOT / pack["chapter"]).exists(), f"{path.name}: no chapter {pack['chapter']}"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.from_dict(c) for g in _groups(pack) for c in g["cells"]]
    found = find_exercises(nb, ROOT / pack["chapter"])  # raises MalformedExercise when a cell is off
    assert [ex.label for ex in found] == [pack["label"]]


@pytest.mark.parametrize("path", PACKS, ids=lambda p: p.stem)
def test_a_pack_goes_after_one_code_cell(path: Path, tmp_path: Path) -> None:
    pack = json.loads(path.read_text(encoding="utf-8"))
    chapter = nbformat.read(ROOT / pack["chapter"], as_version=4)
    if any(f":label: {pack['label']}" in c.source for c in chapter.cells):
        pytest.skip(f"{pack['label']} is already in its chapter")
    for group in _groups(pack):
        hits = [i for i, c in enumerate(chapter.cells) if group["after"] in c.source]
        assert len(hits) == 1, f"{path.name}: the anchor {group['after']!r} is in cells {hits}"
        assert chapter.cells[hits[0]].cell_type == "code", f"{path.name}: anchor cell {hits[0]} is Markdown"
    copy = tmp_path / pack["chapter"]
    copy.parent.mkdir(parents=True)
    nbformat.write(chapter, copy)
    assert insert(pack, tmp_path) and not insert(pack, tmp_path)  # inserted once, then left alone
    after = nbformat.read(copy, as_version=4)
    assert len(after.cells) == len(chapter.cells) + sum(len(g["cells"]) for g in _groups(pack))
    assert pack["label"] in [ex.label for ex in find_exercises(after, ROOT / pack["chapter"])]
