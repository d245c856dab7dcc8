"""What a chapter may import in Colab: its install cell's requirement and that requirement's
dependency closure, and a first cell that makes every other installed package unimportable.

Shared by ``tests/test_install_cell_env.py`` (every chapter's first cells, run from this checkout)
and ``tests/test_run_alone.py`` (the ledger in full, run from the wheel: both conditions at once).
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata

import nbformat
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

FIRST_CODE_CELLS = 2          # a chapter's setup and the code cells right after it
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




def install_cell_blocker() -> tuple[str, set[str]]:
    """The blocker's source for the install cell of chapter 1 (every chapter's is the same, a test
    checks), and the modules it blocks."""
    requirement = install_requirement(nbformat.read(ROOT / "chapters/01_one_operation/01_one_operation.ipynb", 4))
    allowed = closure([requirement] + [Requirement(d) for d in KERNEL_DISTS])
    blocked = blocked_modules(allowed)
    return BLOCKER.format(blocked=sorted(blocked)), blocked
