#!/usr/bin/env python3
"""Re-execute chapter notebooks in place: ``python scripts/execute_notebooks.py [notebooks...]``.

For maintainers, after changing a chapter or the library. The stored outputs are
what GitHub and Colab show before anything runs, and what nbval compares the
cells tagged ``nbval-check-output`` against; the stored widget state is what
the website's widgets show. So this runs each notebook top to bottom on a fresh
kernel (cwd = the notebook's folder, like the book build) and saves outputs and
widget state into the notebook.

Each notebook it writes carries, in ``metadata.deviating.code_sha256``, the hash of the
code that made its outputs (:func:`code_hash`); the site shows those outputs without running
anything, and a test fails when a chapter's code has changed since.

Cells tagged ``skip-execution`` (the Colab install cell) are not run and keep no
outputs, as in the book build. A cell that takes longer than ``--timeout``
seconds fails the notebook; the notebook is then retried once (``--retries``),
because a known intermittent client-side stall on widget cells can cost a whole
timeout. Notebooks that fail are left unchanged; the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_TAG = "skip-execution"
#: What the kernels inherit: one thread for torch, like the test suite.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
STAMP = "deviating"  # notebook metadata key of the stamp


def code_hash(nb) -> str:
    """sha256 of a notebook's code cells (their sources, in order, tags and outputs aside)."""
    import hashlib

    digest = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode("utf-8") + b"\0")
    return digest.hexdigest()


def pin_threads(environ=os.environ) -> None:
    """Give the kernels started from here one torch thread (they inherit ``environ``)."""
    environ.update(THREAD_ENV)


def execute(path: Path, timeout: int, kernel: str | None) -> None:
    """Execute one notebook and write it back (only if every cell ran)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    # nbclient only writes widget state when a run creates widgets: drop the last run's,
    # so that no page embeds the state of widgets (e.g. old progress bars) it no longer shows
    nb.metadata.pop("widgets", None)
    skipped = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and SKIP_TAG in cell.metadata.get("tags", []):
            skipped[i] = cell.source
            cell.source = ""  # nbclient does not run empty cells
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel or nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        record_timing=False,
        allow_errors=False,
    )
    client.execute()
    for i, source in skipped.items():
        nb.cells[i].source = source
        nb.cells[i].outputs = []
        nb.cells[i].execution_count = None
    nb.metadata[STAMP] = {"code_sha256": code_hash(nb)}
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebook under chapters/")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per cell (default 120)")
    parser.add_argument("--retries", type=int, default=1, help="extra attempts per notebook (default 1)")
    parser.add_argument("--kernel", default=None, help="kernel name (default: the notebook's kernelspec)")
    args = parser.parse_args(argv)
    # progress as lines of text in the stored outputs, as on the website (headlab.progress)
    os.environ["HEADLAB_PROGRESS"] = "text"
    os.environ["HEADLAB_WRITE_CLAIMS"] = "1"  # the kernels record the chapters' verdicts (deviating.ledger)
    pin_threads()  # before any kernel starts

    notebooks = args.notebooks or sorted(
        p for p in (ROOT / "chapters").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
    )
    failed = []
    for path in notebooks:
        for attempt in range(1 + args.retries):
            start = time.perf_counter()
            try:
                execute(path, args.timeout, args.kernel)
            except Exception as err:  # noqa: BLE001 (report every failure, go on with the next)
                print(f"execute_notebooks: {path}: attempt {attempt + 1} failed: {type(err).__name__}: {err}",
                      file=sys.stderr)
                continue
            print(f"execute_notebooks: {path}: executed in {time.perf_counter() - start:.1f} s")
            break
        else:
            failed.append(path)
    if failed:
        print(f"execute_notebooks: FAILED: {[str(p) for p in failed]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
