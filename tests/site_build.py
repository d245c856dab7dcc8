"""Build the website once per test run, whichever test file asks first.

``tests/test_site.py`` and ``tests/test_site_widgets.py`` both need the built site,
and ``--dist loadfile`` may run them in two workers at once. :func:`build_site_once`
takes a file lock, so two builds never write ``_build/html`` together, and a marker
names the run that built it, so the second file reuses the first one's build. A site that
``scripts/build_book.py`` built from the sources exactly as they are now (its
``.source-fingerprint``, ``scripts/site_fingerprint.py``) is reused too: ``make book`` and then the
test command build the site once.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT
import site_fingerprint  # noqa: E402  (scripts/, which conftest puts on the path)

BUILD = ROOT / "_build"
SITE = BUILD / "html"


def build_site(args: list[str]) -> tuple[str, float]:
    """Run ``scripts/build_book.py args``; fail the calling test with its last lines if it fails."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_book.py"), *args], cwd=ROOT,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"scripts/build_book.py {' '.join(args)} failed (exit {proc.returncode}); "
                    f"last lines:\n{output[-6000:]}", pytrace=False)
    return output, elapsed


def build_site_once() -> None:
    """Build the default site into _build/html unless this test run already did."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    BUILD.mkdir(exist_ok=True)
    marker = BUILD / ".site-built-by-test-run"
    with open(BUILD / ".site-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if marker.is_file() and marker.read_text() == run and (SITE / "index.html").is_file():
                return
            if site_fingerprint.is_current(SITE):  # `make book` built it from these very sources
                marker.write_text(run)
                return
            marker.unlink(missing_ok=True)
            build_site([])
            marker.write_text(run)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
