"""What the website is built from, as one hash: ``python scripts/site_fingerprint.py``.

``scripts/build_book.py`` writes it into the site it builds (``.source-fingerprint``). A test run
that finds ``_build/html`` carrying the fingerprint of the sources as they are now uses that site
instead of building it again, as ``make`` reuses a target newer than its inputs: ``make book``
followed by the test command builds the site once. Anything that could change a page changes the
hash: every file the build reads (the chapters with their stored outputs, both packages, the
scripts, the static files, the book's configuration), the commit the Colab buttons pin, and the
versions of Python and of the build's packages.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = ".source-fingerprint"
#: Folders and files the build reads (tests/, benchmarks/ and CI files do not shape the site).
INPUTS = ("chapters", "lib", "scripts", "_static", "_config.yml", "_toc.yml", "intro.md", "pyproject.toml",
          "requirements.txt", "README.md", "CHANGELOG.md")
PACKAGES = ("jupyter-book", "sphinx", "myst-nb", "sphinx-exercise", "sphinx-togglebutton", "headlab")
_SKIP = ("__pycache__", ".egg-info", ".ipynb_checkpoints")


def _files(root: Path) -> list[Path]:
    found = []
    for name in INPUTS:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and not any(s in part for part in p.parts
                                                                             for s in _SKIP)]
    return sorted(found)


def _commit(root: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "no-git"


def fingerprint(root: Path = ROOT) -> str:
    """The sha256 of everything the default site build depends on (see the module docstring)."""
    h = hashlib.sha256()
    for path in _files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(_commit(root).encode() + sys.version.encode())
    for package in PACKAGES:
        try:
            h.update(f"{package}=={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{package} absent".encode())
    return h.hexdigest()


def write(site: Path, root: Path = ROOT) -> None:
    (site / NAME).write_text(fingerprint(root) + "\n", encoding="utf-8")


def is_current(site: Path, root: Path = ROOT) -> bool:
    """Whether ``site`` was built, completely, from the sources as they are now."""
    stamp = site / NAME
    return stamp.is_file() and (site / "index.html").is_file() and stamp.read_text().strip() == fingerprint(root)


if __name__ == "__main__":
    print(fingerprint())
