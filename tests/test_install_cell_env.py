"""A chapter runs with only what its Colab install cell installs (issue 39, "Colab can run a chapter").

Colab's install cell installs one requirement (``headlab[minilm] @ git+...``). A chapter whose
setup cell imports a package outside that requirement's dependencies (``myst_nb``, which only the
``book`` extra installs) fails in Colab at its setup cell, and every later cell with it.

This test needs no network. It reads the install cell's requirement from the notebook, takes its
dependency closure from ``pyproject.toml`` (the extras the cell names) and the installed
distributions' metadata (their own requirements, markers evaluated), adds the kernel's own
(``ipykernel``: Colab runs notebooks in one), and makes every other installed distribution's
top-level modules unimportable with a ``sys.meta_path`` blocker, the first cell the kernel runs.
It then executes, in one fresh kernel, each chapter's first cells (up to its first exercise, at
most ``FIRST_CODE_CELLS`` code cells, the install cell skipped). The cheapest chapter, the ledger,
runs in full behind the same blocker in ``tests/test_run_alone.py``, from the wheel: one run for
both conditions. The requirement, its closure and the blocker live in ``tests/install_cell.py``.

What it proves: no cell it runs imports, directly or through the library, a module of a
distribution outside the install cell's closure, and those cells run. What it does not prove:
that ``pip`` resolves the requirement at that commit (versions, wheels), that the package built
from the git URL ships the data files the source tree has (the test runs the worktree's ``lib/``),
that later cells of the other chapters run, nor anything about Colab's own preinstalled packages
(which could only add modules, never remove one).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from install_cell import FIRST_CODE_CELLS, first_cells, install_cell_blocker, install_requirement

@pytest.fixture(scope="module")
def blocker() -> tuple[str, set[str]]:
    return install_cell_blocker()


def test_the_closure_leaves_out_the_book_only_packages(blocker) -> None:
    """The blocker's list is what the test stands on: the book extra's packages must be in it, the
    install cell's own dependencies must not."""
    _, blocked = blocker
    for module in ("myst_nb", "sphinx", "sphinx_exercise", "jupyter_book", "pytest"):
        assert module in blocked, f"{module} would be importable in the Colab environment the test builds"
    for module in ("torch", "numpy", "transformers", "matplotlib", "ipywidgets", "IPython"):
        assert module not in blocked, f"{module} is a dependency of the install cell's requirement yet blocked"


def test_every_chapter_installs_the_same_requirement() -> None:
    reqs = {}
    for path in chapter_notebooks():
        nb = nbformat.read(path, as_version=4)
        if any(c.cell_type == "code" for c in nb.cells):
            reqs[path.name] = str(install_requirement(nb))
    assert len(set(reqs.values())) == 1, reqs


def _run(cells: list, blocker_source: str, where: Path, timeout: int = 300) -> float:
    """Execute ``cells`` after the blocker in one fresh kernel started in ``where``; seconds taken."""
    from nbclient import NotebookClient

    copies = [nbformat.v4.new_code_cell(c.source) if c.cell_type == "code" else nbformat.v4.new_markdown_cell(c.source)
              for c in cells]  # fresh cell ids: the chapters' own repeat across notebooks
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(blocker_source)] + copies)
    lib = str(ROOT / "lib")
    if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != lib:  # the kernel inherits it: this checkout's library
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [lib, os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(where)}}).execute()
    return time.perf_counter() - start


def _notebooks_with_code() -> list[Path]:
    return [p for p in chapter_notebooks() if any(c.cell_type == "code" for c in nbformat.read(p, 4).cells)]


def test_every_chapter_starts_with_only_what_its_install_cell_installs(blocker, record_property) -> None:
    """Each chapter's first cells, in its own folder and a clean namespace, one kernel for all of
    them (a kernel start and torch's import are most of a chapter's first seconds)."""
    cells, ran = [], []
    for path in _notebooks_with_code():
        if path.stem == "10_ledger":
            continue  # in full, from the wheel: tests/test_run_alone.py
        own = first_cells(nbformat.read(path, 4), FIRST_CODE_CELLS)
        cells.append(nbformat.v4.new_code_cell(
            f"%reset -f\nimport os\nos.chdir({str(path.parent)!r})  # {path.name}"))
        cells += own
        ran.append(f"{path.stem}: {sum(c.cell_type == 'code' for c in own)}")
    seconds = _run(cells, blocker[0], ROOT)
    record_property("summary", f"first code cells run without the book-only packages ({seconds:.0f} s): "
                    + ", ".join(ran))


def test_the_blocker_blocks(blocker, tmp_path) -> None:
    """The same run fails on a cell that imports a book-only package (the test can fail), and
    ``find_spec`` (how transformers asks whether a package is there) answers None."""
    from nbclient.exceptions import CellExecutionError

    check = "import importlib.util\nassert importlib.util.find_spec('myst_nb') is None\nfrom myst_nb import glue"
    with pytest.raises(CellExecutionError, match="No module named 'myst_nb'"):
        _run([nbformat.v4.new_code_cell(check)], blocker[0], tmp_path, timeout=60)


def test_glue_degrades_to_printing_outside_the_book(monkeypatch, capsys) -> None:
    from deviating import glue as glue_module

    monkeypatch.setattr(glue_module, "_myst_glue", lambda: None)
    glue_module.glue("c1_lead", 0.25, display=False)
    glue_module.glue("shown", "a value")
    out = capsys.readouterr().out
    assert "c1_lead = 0.25" in out and "a value" in out
    with pytest.raises(TypeError, match="non-empty string"):
        glue_module.glue("", 1)
    with pytest.raises(TypeError, match="display must be True or False"):
        glue_module.glue("x", 1, display="no")


def test_glue_is_myst_nb_s_in_the_book(monkeypatch) -> None:
    from deviating import glue as glue_module

    calls = []
    monkeypatch.setattr(glue_module, "_myst_glue", lambda: lambda *a, **k: calls.append((a, k)))
    glue_module.glue("k", 3, display=False)
    assert calls == [(("k", 3), {"display": False})]
