"""The test run's schedule: ``SLOW_FIRST`` (tests/conftest.py) names files that exist, and the
option that makes pytest-xdist follow it is set.

A renamed test file or chapter would drop out of the list silently and run last, where one long
file alone at the end stretches the whole run; without ``--no-loadscope-reorder`` pytest-xdist
orders the files by their number of tests and the list does nothing.
"""

from __future__ import annotations

import tomllib

from conftest import ROOT, SLOW_FIRST, slow_rank


def _files() -> list[str]:
    tests = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py")]
    chapters = [p.relative_to(ROOT).as_posix() for p in (ROOT / "chapters").rglob("*.ipynb")
                if ".ipynb_checkpoints" not in p.parts]
    return tests + chapters


def test_every_slow_first_entry_names_exactly_the_files_it_means() -> None:
    files = _files()
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST), "an entry is listed twice"
    for prefix in SLOW_FIRST:
        hits = [f for f in files if f.startswith(prefix)]
        assert len(hits) == 1, f"SLOW_FIRST entry {prefix!r} matches {hits}: name one existing file"


def test_the_listed_files_come_first_in_the_listed_order() -> None:
    ranks = [slow_rank(f"{prefix}::x") for prefix in SLOW_FIRST]
    assert ranks == list(range(len(SLOW_FIRST)))
    assert slow_rank("tests/test_model.py::test_x") == len(SLOW_FIRST)  # an unlisted file comes after


def test_pytest_xdist_is_told_to_keep_the_order() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    addopts = project["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert "--dist" in addopts and addopts[addopts.index("--dist") + 1] == "loadfile"
    assert "--no-loadscope-reorder" in addopts
