"""Shared test helpers: repository paths, the chapter notebooks, summaries.

pyproject's addopts run ``pytest`` as ``-n 4 --dist loadfile``: four workers on the two-core
machine, so that the others fill a worker's waits (browser page loads, grading workers,
subprocesses). Each test file (and so each notebook under nbval) runs on one worker, so a
session fixture (like the site build in test_site.py) runs once. Torch gets one thread per process
(``OMP_NUM_THREADS=1``, inherited by the xdist workers and the notebook kernels):
on a small shared machine, threads oversubscribed across workers make torch many
times slower.
Summaries that tests attach with ``record_property("summary", text)`` are
printed at the end of the run, also from xdist workers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before anything imports torch
# Another reader's CPU: the chapters' stored outputs are made with this machine's widest
# kernels (AVX-512, scripts/execute_notebooks.py); the tests, and the notebook kernels they
# start (nbval), run torch's AVX2 kernels, so that one pass checks both that every chapter
# runs and that no checked output depends on how a CPU rounds. Set ATEN_CPU_CAPABILITY to
# override (it must be set before torch is imported).
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
# glibc's allocator returns every block above 128 kB to the system when it is freed, so each
# forward pass's tensors come back as fresh pages, faulted in and zeroed by the kernel again: about
# a million page faults for one chapter. Keeping blocks up to 32 MB in the heap, and the heap's
# free memory, cuts those faults six-fold (chapter 2 under nbval, measured beside another run:
# 1.08 M -> 0.18 M faults, 89 -> 81 CPU-s, of which system time 7.8 -> 2.7 s). The workers and
# the kernels they start inherit this;
# glibc reads it when a process starts, and other C libraries ignore it. Numbers are unchanged.
for _name, _value in (("MALLOC_MMAP_THRESHOLD_", str(32 << 20)), ("MALLOC_TRIM_THRESHOLD_", str(1 << 30)),
                      ("MALLOC_TOP_PAD_", str(64 << 20))):
    os.environ.setdefault(_name, _value)

# Bytecode caches: where PYTHONDONTWRITEBYTECODE is set (it is on the project's machine), every
# worker would compile and assertion-rewrite every test module again on every run (collection: 13
# CPU-s a worker, 7.5 with the caches). The test run keeps pytest's caches in tests/__pycache__
# (git-ignored); the library's bytecode is compiled once by `make setup`.
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"

# scripts/ holds tools that tests import (make_student, build_book).
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))


def chapter_notebooks() -> list[Path]:
    """Every chapter notebook, in chapter order (checkpoints excluded)."""
    return sorted(p for p in CHAPTERS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def in_ci() -> bool:
    """True when the environment variable CI is set (to anything but '', '0', 'false')."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def brown_or_skip():
    """The cached Brown Corpus tarball's path; the test skips without it, and fails under CI,
    where ``make setup`` fetches it (a skip there would hide a broken fetch)."""
    from deviating.data import brown

    try:
        return brown.find()
    except brown.CorpusMissing as err:
        if in_ci():
            pytest.fail(f"CI: {err}")
        pytest.skip("the Brown Corpus is not cached (python -m deviating fetch-brown)")


# The files that take longest, longest first (wall seconds of each file in a quiet 4-worker run,
# `python benchmarks/cpu_per_test.py FOLDER --timeline`, 2026-12-07). ``--dist loadfile`` hands
# whole files to the workers in the order of this list (``--no-loadscope-reorder`` in
# pyproject.toml: without it pytest-xdist sorts the files by their number of tests instead, as
# 3.5 already did, and this list did nothing), so the long files start first and short ones fill the
# end: the usual greedy schedule, which keeps one worker from running a long file alone at the end.
SLOW_FIRST = ("tests/test_grading.py", "chapters/04_syntactic_heads", "chapters/06_importance",
              "tests/test_experiments.py", "chapters/03_positional_heads", "tests/test_cheats.py",
              "tests/test_site.py", "chapters/09_checklist", "tests/test_train.py",
              "chapters/05_induction/05b", "tests/test_loading.py", "chapters/05_induction/05_",
              "chapters/08_beyond_heads", "chapters/02_multi_head/02_", "tests/test_run_alone.py",
              "tests/test_student.py", "tests/test_report.py", "chapters/07_what_breaks/07_",
              "chapters/07_what_breaks/07b", "tests/test_score_registry.py", "tests/test_atlas.py",
              "tests/test_site_widgets.py", "tests/test_install_cell_env.py", "tests/test_triton.py",
              "tests/test_ioi_data.py", "tests/test_ledger.py", "chapters/01_one_operation")


def slow_rank(nodeid: str) -> int:
    """Where a test's file stands in :data:`SLOW_FIRST` (files not listed come after, in their order)."""
    return next((i for i, prefix in enumerate(SLOW_FIRST) if nodeid.startswith(prefix)), len(SLOW_FIRST))


# Switches that make a notebook's kernel write into the checkout (deviating.ledger): a test may set
# them only through monkeypatch, which puts them back. One that leaked made every notebook its
# worker ran afterwards rewrite the book's claims files, under another test's feet.
GUARDED_ENV = ("HEADLAB_WRITE_CLAIMS",)
_ENV_BEFORE = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):  # noqa: ANN001
    item.stash[_ENV_BEFORE] = {k: os.environ.get(k) for k in GUARDED_ENV}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):  # noqa: ANN001, ARG001
    result = yield
    before = item.stash.get(_ENV_BEFORE, None)
    after = {k: os.environ.get(k) for k in GUARDED_ENV}
    if before is not None and after != before:
        for k, v in before.items():  # put it back, so that later tests are not affected
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        raise AssertionError(f"the test left {after} (was {before}) in os.environ: set it with monkeypatch")
    return result


def pytest_collection_modifyitems(session, config, items):  # noqa: ANN001, ARG001
    items.sort(key=lambda item: slow_rank(item.nodeid))  # a stable sort keeps each file's own order


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ANN001, ARG001
    lines = []
    for key in ("passed", "failed", "error"):
        for report in terminalreporter.stats.get(key, []):
            for name, value in getattr(report, "user_properties", []):
                if name == "summary" and report.when == "call":
                    lines.append(str(value))
    if lines:
        terminalreporter.section("summaries")
        for line in dict.fromkeys(lines):  # one copy of each
            terminalreporter.write_line(line)
