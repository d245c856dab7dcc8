"""A chapter runs with only what its Colab install cell installs (issue 39, "Colab can run a chapter").

Colab's install cell installs one requirement (``headlab[minilm] @ git+...``). A chapter whose
setup cell imports a package outside that requirement's dependencies (``myst_nb``, which only the
``book`` extra installs) fails in Colab at its setup cell, and every later cell with it.

This test needs no network. It reads the install cell's requirement from the notebook, takes its
dependency closure from ``pyproject.toml`` (the extras the cell names) and the installed
distributions' metadata (their own requirements, markers evaluated), adds the kernel's own
(``ipykernel``: Colab runs notebooks in one), and makes every other installed distribution's
top-level modules unimportable with a ``sys.meta_path`` blocker, the first cell the kernel runs.
It then executes, in a fresh kernel per notebook, each chapter's first cells (up to its first
exercise, at most ``FIRST_CODE_CELLS`` code cells, the install cell skipped) and the cheapest
chapter in full.

What it proves: no cell it runs imports, directly or through the library, a module of a
distribution outside the install cell's closure, and those cells run. What it does not prove:
that ``pip`` resolves the requirement at that commit (versions, wheels), that the package built
from the git URL ships the data files the source tree has (the test runs the worktree's ``lib/``),
that later cells of the other chapters run, nor anything about Colab's own preinstalled packages
(which could only add modules, never remove one).
"""

from __future__ import annotations

import os
import re
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT, chapter_notebooks

FIRST_CODE_CELLS = 2          # a chapter's setup and the code cells right after it
FULL = "10_ledger"            # the cheapest chapter, executed top to bottom
KERNEL_DISTS = ("ipykernel",)  # the notebook's kernel (Colab's own)


def install_requirement(nb) -> Requirement:
    """The requirement the notebook's Colab install cell pip-installs."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "google.colab" in cell.source and "pip" in cell.source:
            found = re.findall(r"[\"']([^\"']+ @ git\+[^\"']+)[\"']", cell.source)
            assert len(found) == 1, f"the install cell names {len(found)} git requirements: {found}"
            return Requirement(found[0])
    raise AssertionError("no Colab install cell (a code cell that pip-installs when google.colab is loaded)")


def _requires(dist: str, extras: set[str]) -> list[Requirement]:
    """``dist``'s requirements under ``extras``: headlab's from this commit's pyproject.toml, the
    others' from their installed metadata."""
    if canonicalize_name(dist) == "headlab":
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        texts = list(project["dependencies"])
        unknown = extras - set(project.get("optional-dependencies", {}))
        assert not unknown, f"the install cell names extras pyproject.toml lacks: {sorted(unknown)}"
        for extra in extras:
            texts += project["optional-dependencies"][extra]
        reqs = [Requirement(t) for t in texts]
    else:
        reqs = [Requirement(t) for t in (metadata.requires(dist) or [])]
    env = {"extra": ""}
    keep = []
    for req in reqs:
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            keep.append(req)
    return keep


def closure(roots: list[Requirement]) -> set[str]:
    """The canonical names of the distributions ``roots`` install, transitively (installed ones only:
    a requirement not installed here cannot have been imported by a test run here)."""
    seen: set[str] = set()
    todo = [(r.name, set(r.extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if key in seen and not extras:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if key != "headlab":
                continue
        seen.add(key)
        todo += [(r.name, set(r.extras)) for r in _requires(name, extras)]
    return seen


def blocked_modules(allowed: set[str]) -> set[str]:
    """Top-level modules installed here that only distributions outside ``allowed`` provide."""
    out = set()
    for module, dists in metadata.packages_distributions().items():
        if module in sys.stdlib_module_names or module.startswith("_") and module[1:] in sys.stdlib_module_names:
            continue
        if not any(canonicalize_name(d) in allowed for d in dists):
            out.add(module)
    return out


BLOCKER = '''\
import sys
from importlib.machinery import PathFinder

class _InstallCellOnly(PathFinder):
    """sys.path's finder, blind to the modules the Colab install cell does not install."""
    blocked = frozenset({blocked!r})

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in cls.blocked:
            return None  # as if not installed: import raises ModuleNotFoundError, find_spec says None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [_InstallCellOnly if f is PathFinder else f for f in sys.meta_path]
_cached = sorted(m for m in sys.modules if m.partition(".")[0] in _InstallCellOnly.blocked)
assert not _cached, f"the kernel imported these before the blocker, so it cannot hide them: {{_cached}}"
'''


def first_cells(nb, limit: int | None) -> list:
    """The cells to run: every one for ``limit=None``, else the cells before the first exercise with
    at most ``limit`` code cells. The install cell is dropped (it only runs in Colab)."""
    out, code = [], 0
    for cell in nb.cells:
        if limit is not None and cell.cell_type == "markdown" and "{exercise-start}" in cell.source:
            break
        if cell.cell_type == "code" and "google.colab" in cell.source and "pip" in cell.source:
            continue
        if cell.cell_type == "code":
            if limit is not None and code == limit:
                break
            code += 1
        out.append(cell)
    return out


@pytest.fixture(scope="module")
def blocker() -> tuple[str, set[str]]:
    requirement = install_requirement(nbformat.read(ROOT / "chapters/01_one_operation/01_one_operation.ipynb", 4))
    allowed = closure([requirement] + [Requirement(d) for d in KERNEL_DISTS])
    blocked = blocked_modules(allowed)
    return BLOCKER.format(blocked=sorted(blocked)), blocked


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
        if path.stem == FULL:
            continue
        own = first_cells(nbformat.read(path, 4), FIRST_CODE_CELLS)
        cells.append(nbformat.v4.new_code_cell(
            f"%reset -f\nimport os\nos.chdir({str(path.parent)!r})  # {path.name}"))
        cells += own
        ran.append(f"{path.stem}: {sum(c.cell_type == 'code' for c in own)}")
    seconds = _run(cells, blocker[0], ROOT)
    record_property("summary", f"first code cells run without the book-only packages ({seconds:.0f} s): "
                    + ", ".join(ran))


def test_the_cheapest_chapter_runs_in_full_with_only_its_install_cell(blocker, record_property) -> None:
    path = next(p for p in chapter_notebooks() if p.stem == FULL)
    cells = first_cells(nbformat.read(path, 4), None)
    seconds = _run(cells, blocker[0], path.parent)
    record_property("summary", f"{path.stem} in full ({sum(c.cell_type == 'code' for c in cells)} code cells) "
                    f"without the book-only packages: {seconds:.0f} s")


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
