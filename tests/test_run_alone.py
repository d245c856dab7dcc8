"""Every chapter runs alone from the installed package, as in Colab: no checkout, an empty folder.

The test builds the wheel from a copy of the sources (so the build leaves nothing in the
checkout), installs it into a fresh virtual environment whose only other packages are those of
the environment running the tests (added as a plain path: its editable install of headlab,
which points at a checkout, is *not* processed), and executes the shortest chapters and the
ledger on a kernel of that environment, each in an empty folder. The first cell of each run
checks that ``headlab`` comes from the wheel and that no folder on ``sys.path`` holds another
``headlab``. Checkpoints, stored results and the claims the ledger reads must come from the
package (``headlab/checkpoints``, ``deviating/results``).

The chapters were picked by their time (``scripts/execute_notebooks.py`` on the project's 2-core
machine): how_to_use and the ledger take a few seconds each, chapter 1 the longest of the three.

The ledger also runs with only what the Colab install cell installs: its first cell is the blocker
of ``tests/install_cell.py`` (every module of a distribution outside the install cell's dependency
closure unimportable), so this one run checks both conditions of a Colab reader at once: the
package as built, and nothing the book's own tool chain brought.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS, ROOT
from install_cell import install_cell_blocker

pytestmark = pytest.mark.slow

CHAPTERS_ALONE = ["00_how_to_use/how_to_use.ipynb", "01_one_operation/01_one_operation.ipynb",
                  "10_ledger/10_ledger.ipynb"]
BEHIND_THE_BLOCKER = "10_ledger/10_ledger.ipynb"  # the cheapest chapter, in full


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("alone")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "lib", src / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = tmp / "dist"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    proc = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (wheel,) = dist.glob("headlab-*.whl")

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    # the test environment's packages (torch, ipykernel, ...) as a plain path: its .pth files stay unread
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"installing the wheel failed:\n{proc.stdout}\n{proc.stderr}"

    kernels = tmp / "kernels"
    (kernels / "alone").mkdir(parents=True)
    (kernels / "alone" / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "headlab from its wheel", "language": "python",
        "env": {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}}))
    return {"tmp": tmp, "site": site, "kernels": kernels, "wheel": wheel}


def _first_cell(site: Path) -> str:
    return textwrap.dedent(f"""
        import os, sys
        import headlab
        assert headlab.__file__.startswith({str(site)!r}), headlab.__file__
        others = [p for p in sys.path if p and os.path.isdir(os.path.join(p, "headlab"))
                  and not p.startswith({str(site)!r})]
        assert not others, others
        assert os.listdir(".") == [], os.listdir(".")
        print("headlab from", os.path.dirname(headlab.__file__))
    """)


@pytest.mark.parametrize("chapter", CHAPTERS_ALONE, ids=lambda c: c.split("/")[0])
def test_the_chapter_runs_alone_from_the_wheel(chapter: str, installed: dict) -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(CHAPTERS / chapter, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "skip-execution" in cell.metadata.get("tags", []):
            cell.source = ""  # the Colab install cell: what it installs is installed already
    nb.cells.insert(0, nbformat.v4.new_code_cell(_first_cell(installed["site"])))
    if chapter == BEHIND_THE_BLOCKER:
        nb.cells.insert(0, nbformat.v4.new_code_cell(install_cell_blocker()[0]))
    work = installed["tmp"] / ("work-" + chapter.split("/")[0])
    work.mkdir()
    km = AsyncKernelManager(kernel_name="alone",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(installed["kernels"])]))
    NotebookClient(nb, km=km, timeout=300, allow_errors=False, resources={"metadata": {"path": str(work)}}
                   ).execute(cleanup_kc=True)
    first = nb.cells[1 if chapter == BEHIND_THE_BLOCKER else 0]
    assert "headlab from " + str(installed["site"]) in first.outputs[0]["text"]
    left = sorted(p.name for p in work.iterdir())
    assert left == [], f"the chapter wrote into the reader's folder: {left}"
