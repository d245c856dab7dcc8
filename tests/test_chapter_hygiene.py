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


NUMPY_REPR = re.compile(r"^np\.(float|int|bool)\w*\(")


def glued_numpy_scalars(cells) -> list[str]:
    """Glued values whose stored text is a numpy repr (``np.float64(2.8)``): the prose's
    ``{glue:text}`key:.3f``` cannot format them, and the site prints a warning instead of the number."""
    bad = []
    for c in cells:
        for out in c.get("outputs", []):
            key = out.get("metadata", {}).get("scrapbook", {}).get("name")
            data = out.get("data", {})
            prefix = out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix", "")
            text = "".join(data.get(prefix + "text/plain", ""))
            if key and NUMPY_REPR.match(text):
                bad.append(f"{key} = {text}")
    return bad


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_glued_numbers_are_plain_python_numbers(notebook):
    bad = glued_numpy_scalars(json.loads(notebook.read_text())["cells"])
    assert not bad, f"{notebook.name}: glue plain floats/ints (float(x)), not numpy scalars: {bad[:5]}"


def test_the_numpy_scalar_check_finds_one():
    record = "application/papermill.record/"
    cells = [{"outputs": [{"metadata": {"scrapbook": {"name": "loss", "mime_prefix": record}},
                           "data": {record + "text/plain": "np.float64(2.8039)"}}]},
             {"outputs": [{"metadata": {"scrapbook": {"name": "ok"}}, "data": {"text/plain": "2.8039"}}]}]
    assert glued_numpy_scalars(cells) == ["loss = np.float64(2.8039)"]


PYOBJECT = re.compile(r"^:pyobject:\s*(\S+)", re.M)


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_chapters_show_only_public_library_code(notebook):
    """A chapter that prints a library function's source teaches its name: it must be public."""
    text = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"])
    private = [name for name in PYOBJECT.findall(text) if any(part.startswith("_") for part in name.split("."))]
    assert not private, f"{notebook.name} shows private library code: {private}; make it public where it lives"


def test_the_pyobject_pattern_finds_a_private_name():
    assert PYOBJECT.findall("```{literalinclude} x.py\n:pyobject: _tiled\n```") == ["_tiled"]


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_stored_outputs_come_from_the_current_code(notebook):
    """The site shows the stored outputs without running anything (``execute_notebooks: off``),
    so they must be those of the code the page shows: scripts/execute_notebooks.py stamps each
    notebook with the hash of its code cells, and a code change without re-execution fails here."""
    import nbformat
    from execute_notebooks import STAMP, code_hash

    nb = nbformat.read(notebook, as_version=4)
    stamp = nb.metadata.get(STAMP, {}).get("code_sha256")
    assert stamp == code_hash(nb), (
        f"{notebook.name}: its code changed after its outputs were stored (stamp {stamp!r}); "
        f"run `python scripts/execute_notebooks.py {notebook.relative_to(CHAPTERS.parent)}`")


def test_the_code_hash_sees_code_and_ignores_prose():
    import nbformat
    from execute_notebooks import code_hash

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("prose"), nbformat.v4.new_code_cell("x = 1")])
    before = code_hash(nb)
    nb.cells[0].source = "other prose"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="1")]
    assert code_hash(nb) == before
    nb.cells[1].source = "x = 2"
    assert code_hash(nb) != before


_BAR = re.compile(r"\d+%\|[█▉▊▋▌▍▎▏ #]*\||\d+(\.\d+)?(it/s|s/it)\]")


def progress_bars(nb) -> list[int]:
    """Code cells whose stored outputs hold a progress bar (tqdm's ``45%|████  | 9/20 [00:01<...]``
    or its rate): a page shows it frozen mid-way, so no bar may be stored."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text = "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
            if _BAR.search(text) or "application/vnd.jupyter.widget-view+json" in o.get("data", {}) and \
                    "Progress" in "".join(o.get("data", {}).get("text/plain", "")):
                out.append(i)
                break
    return out


@pytest.mark.parametrize("notebook", chapter_notebooks(), ids=lambda p: str(p.relative_to(CHAPTERS)))
def test_no_progress_bar_is_stored(notebook):
    bars = progress_bars(json.loads(notebook.read_text()))
    assert not bars, f"{notebook.name}: cells {bars} store a progress bar; pass progress=False or clear it"


def test_the_progress_bar_scan_finds_one():
    nb = {"cells": [{"cell_type": "code", "outputs": [{"text": "train: 45%|████▌     | 9/20 [00:01<00:02, 5.1it/s]"}]},
                    {"cell_type": "code", "outputs": [{"text": "loss 0.45 | 12 of 20 heads"}]}]}
    assert progress_bars(nb) == [0]
