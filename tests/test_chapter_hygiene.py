"""What a reader of any chapter must never see: the test harness's plumbing in code cells.

nbval reads cell *tags* (``nbval-check-output``, ``nbval-ignore-output``, ``nbval-skip``); its
comment markers (``# NBVAL_CHECK_OUTPUT``) would be printed on the site, in Colab and in
JupyterLab, so no chapter may carry one.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import CHAPTERS, chapter_notebooks

MARKER = re.compile(r"^\s*#\s*(NBVAL|PYTEST_VALIDATE)_[A-Z_]+", re.M)


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_no_nbval_comment_markers(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    offenders = [i for i, c in enumerate(cells)
                 if c["cell_type"] == "code" and MARKER.search("".join(c["source"]))]
    assert not offenders, f"{notebook.name}: cells {offenders} carry an nbval comment marker; use the cell tag"


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_checked_cells_are_tagged_and_have_outputs(notebook):
    """A cell tagged for checking must have stored outputs to check against (else nbval checks nothing)."""
    cells = json.loads(notebook.read_text())["cells"]
    empty = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
             and "nbval-check-output" in c["metadata"].get("tags", []) and not c.get("outputs")]
    assert not empty, f"{notebook.name}: checked cells {empty} have no stored output"


def test_the_marker_pattern_finds_a_marker():
    assert MARKER.search("x = 1\n# NBVAL_CHECK_OUTPUT\n")
    assert not MARKER.search("print('NBVAL_CHECK_OUTPUT is a tag name')")
