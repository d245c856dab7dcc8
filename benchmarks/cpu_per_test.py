"""CPU time per test and per file: what the test suite costs, readable on a busy machine.

Wall times mean little on a shared 2-core machine; CPU times do. Loaded as a pytest plug-in, this
module writes, for every test's setup, call and teardown, the CPU seconds (user + system) of the
worker itself and of the subprocesses it waited for (``getrusage``: a notebook's kernel, a command
line run, the browser), one JSON line each, into one file per process::

    CPU_PER_TEST=/tmp/cpu nice -n 10 python -m pytest -p benchmarks.cpu_per_test tests/test_foo.py

Then ``python benchmarks/cpu_per_test.py /tmp/cpu`` prints the files by CPU time, and
``python benchmarks/cpu_per_test.py /tmp/cpu 30`` also the 30 costliest setups, calls and teardowns,
and ``python benchmarks/cpu_per_test.py /tmp/cpu --timeline`` each worker's files in the order it ran them.
Collecting the tests is one line per process (``<collection>``): each xdist worker collects them all.
A subprocess's time counts only once it has been waited for (a kernel's, at its shutdown).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import resource
import sys
import time

import pytest

_out = None


def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its children waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def _write(nodeid: str, phase: str, before: tuple[float, float], start: float) -> None:
    global _out
    after = _cpu()
    if _out is None:
        folder = os.environ.get("CPU_PER_TEST", "cpu_per_test")
        os.makedirs(folder, exist_ok=True)
        _out = open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a")  # noqa: SIM115 - open for the session
    _out.write(json.dumps({"id": nodeid, "phase": phase, "own": after[0] - before[0],
                           "children": after[1] - before[1], "wall": time.time() - start,
                           "start": start, "pid": os.getpid()}) + "\n")
    _out.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):  # noqa: ANN001, ARG001
    before, start = _cpu(), time.time()
    yield
    _write("<collection>", "collect", before, start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):  # noqa: ANN001
    before, start = _cpu(), time.time()
    yield
    _write(item.nodeid, "setup", before, start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):  # noqa: ANN001
    before, start = _cpu(), time.time()
    yield
    _write(item.nodeid, "call", before, start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):  # noqa: ANN001
    before, start = _cpu(), time.time()
    yield
    _write(item.nodeid, "teardown", before, start)


def timeline(folder: str) -> str:
    """Each worker's files in the order it ran them, with when each started and ended (seconds
    after the first test began) and its wall seconds: where the run's last minutes went."""
    records = [json.loads(line) for path in glob.glob(os.path.join(folder, "*.jsonl")) for line in open(path)]
    records = [r for r in records if "start" in r and r["phase"] != "collect"]
    if not records:
        raise SystemExit(f"error: {folder} holds no timed records (written by this version of the plug-in)")
    t0 = min(r["start"] for r in records)
    spans: dict[tuple[int, str], list[float]] = {}
    for r in records:
        key = (r["pid"], r["id"].split("::")[0])
        a, b = r["start"] - t0, r["start"] - t0 + r["wall"]
        old = spans.get(key)
        spans[key] = [min(old[0], a), max(old[1], b)] if old else [a, b]
    lines = []
    for pid in sorted({k[0] for k in spans}):
        lines.append(f"worker {pid}:")
        for (_, name), (a, b) in sorted(((k, v) for k, v in spans.items() if k[0] == pid), key=lambda kv: kv[1][0]):
            lines.append(f"  {a:6.0f} {b:6.0f} {b - a:6.0f}  {name}")
    return "\n".join(lines)


def summary(folder: str, top: int = 0) -> str:
    """The files of a run written into ``folder``, costliest first, and its ``top`` costliest phases."""
    records = [json.loads(line) for path in glob.glob(os.path.join(folder, "*.jsonl")) for line in open(path)]
    if not records:
        raise SystemExit(f"error: {folder} holds no *.jsonl records: run pytest with -p benchmarks.cpu_per_test "
                         f"and CPU_PER_TEST={folder} first")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for r in records:
        totals = files[r["id"].split("::")[0]]
        totals[0] += r["own"]
        totals[1] += r["children"]
    total = sum(own + children for own, children in files.values())
    lines = [f"{total:.0f} CPU s in all ({total / 60:.1f} min), {len(files)} files"]
    for name, (own, children) in sorted(files.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"{own + children:8.1f}  (own {own:6.1f}, subprocesses {children:6.1f})  {name}")
    for r in sorted(records, key=lambda r: -(r["own"] + r["children"]))[:top]:
        lines.append(f"{r['own'] + r['children']:8.1f}  {r['phase']:8s} {r['id']}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[2] == "--timeline":
        print(timeline(sys.argv[1]))
    elif len(sys.argv) in (2, 3):
        print(summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 0))
    else:
        raise SystemExit("usage: python benchmarks/cpu_per_test.py FOLDER [TOP | --timeline]")
