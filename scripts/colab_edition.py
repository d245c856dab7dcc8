#!/usr/bin/env python3
"""Write the notebooks people open outside the website: ``python scripts/colab_edition.py [--out DIR] [--commit SHA]``.

The website renders the chapters' MyST markup; Colab, JupyterLab and Notebook 7 do not. This
writes, for every chapter in ``_toc.yml``, the notebook that the site's Colab (rocket) button
opens, at the same path under ``--out`` (default ``_build/colab``):

- markdown in plain Markdown (``scripts/plain_markdown.py``), in the cells and in the cells'
  markdown outputs: no directive, role or target syntax;
- every solution cell folded: ``cellView: "form"`` and a first line ``# @title ...`` for Colab,
  ``{"jupyter": {"source_hidden": true}}`` for JupyterLab and Notebook 7;
- the Colab install cell pinned to the commit the book was built from
  (``headlab[minilm] @ git+https://github.com/...@<commit>``), so Colab runs the library of the
  book it was opened from, not the tip of main;
- the stored outputs kept (what a reader sees before running anything).

The Pages workflow (``.github/workflows/pages.yml``) publishes this folder on the branch
``colab``, and ``scripts/build_book.py`` points each page's Colab button there. The student
edition (``scripts/make_student.py``) goes through the same Markdown and install-cell rewriting.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "lib"))  # the library of this checkout, installed or not

from book_toc import toc_files  # noqa: E402
from plain_markdown import Links, glued_values, plain_markdown  # noqa: E402

__all__ = ["BRANCH", "book_links", "build_commit", "pin_install", "fold", "outside_notebook", "colab_notebook",
           "write_edition", "main"]

BRANCH = "colab"  # where the Pages workflow publishes the edition; the Colab buttons open it
SOLUTION_TAG, INSTALL_TAG = "solution", "skip-execution"
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def _config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def _toc_pages() -> list[str]:
    """The docnames of _toc.yml, in order (root, then every ``file:`` entry)."""
    return toc_files()


def build_commit(root: Path = ROOT) -> str:
    """The commit the book is built from: ``git rev-parse HEAD`` (with a warning when the working
    tree has changes that commit does not hold)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise SystemExit(f"colab_edition: cannot tell the commit to pin ({err}); pass --commit SHA") from None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print(f"colab_edition: warning: the working tree has uncommitted changes; the install cells pin {commit[:12]}, "
              "which does not hold them", file=sys.stderr)
    return commit


def book_links(notebook: Path, commit: str, root: Path = ROOT) -> Links:
    """Where the links of ``notebook`` point (the website, the repository at ``commit``), with the
    book's labels and page titles read from every page of ``_toc.yml``."""
    import nbformat

    config = _config()
    site = config.get("html", {}).get("baseurl", "").rstrip("/") + "/"
    repo = config.get("repository", {}).get("url", "")
    labels, titles = {}, {}
    for docname in _toc_pages():
        for suffix in (".ipynb", ".md"):
            page = root / (docname + suffix)
            if page.is_file():
                break
        else:
            continue
        if suffix == ".ipynb":
            texts = [c.source for c in nbformat.read(page, as_version=4).cells if c.cell_type == "markdown"]
        else:
            texts = [page.read_text(encoding="utf-8")]
        for text in texts:
            titles.setdefault(docname, next(iter(re.findall(r"^# (.+)$", text, re.M)), docname))
            for label in re.findall(r"^\(([^()\s]+)\)=\s*$", text, re.M) + re.findall(r"^:label:\s*(\S+)", text, re.M):
                labels[label] = (docname, label)
    glossary = next((d for d in titles if d.endswith("glossary")), None)
    try:
        rel = PurePosixPath(notebook.resolve().relative_to(root.resolve()).as_posix())
    except ValueError:  # a notebook outside the book (a teacher's own): its folder stands for the root
        rel, root = PurePosixPath(notebook.name), notebook.resolve().parent
    glue = glued_values(nbformat.read(notebook, as_version=4)) if notebook.suffix == ".ipynb" else {}
    return Links(notebook=rel, root=root, site_url=site, repo_url=repo, commit=commit, labels=labels, titles=titles,
                 glossary=glossary, glue=glue)


def pin_install(source: str, repo_url: str, commit: str, where: str) -> str:
    """The Colab install cell's source with its ``git+`` URL pinned to ``commit``."""
    if not COMMIT_RE.match(commit):
        raise ValueError(f"the commit to pin must be 40 hexadecimal digits, got {commit!r}")
    url = re.escape("git+" + repo_url.rstrip("/"))
    pinned, n = re.subn(rf"({url})(?:@[\w./-]+)?(?=[\"'])", rf"\g<1>@{commit}", source)
    if n != 1:
        raise ValueError(f"{where}: the Colab install cell must name git+{repo_url} exactly once "
                         f"(found {n}); see CONTRIBUTING.md, 'The Colab install cell'")
    return pinned


def fold(cell: dict, title: str) -> None:
    """Fold a code cell in Colab (a form with ``# @title``) and in JupyterLab (``source_hidden``)."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    if not source.startswith("# @title"):
        cell["source"] = f"# @title {title}\n" + source
    cell["metadata"]["cellView"] = "form"
    cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True


def _is_install_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and INSTALL_TAG in cell["metadata"].get("tags", []) \
        and "google.colab" in cell["source"]


def outside_notebook(nb: dict, links: Links, *, solution_note: str = "", require_install: bool = True) -> dict:
    """A copy of ``nb`` for reading outside the site: plain Markdown (empty cells dropped) and the
    install cell pinned to ``links.commit``. Raises ValueError when a notebook with code has no
    install cell (unless ``require_install`` is false) or more than one."""
    out = copy.deepcopy(nb)
    cells, installs = [], 0
    for cell in out["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = plain_markdown(cell["source"], links, solution_note=solution_note)
            if not cell["source"].strip():
                continue  # a marker cell ({exercise-end}, {solution-end}) leaves nothing
        elif _is_install_cell(cell):
            cell["source"] = pin_install(cell["source"], links.repo_url, links.commit, str(links.notebook))
            installs += 1
        else:  # markdown outputs are MyST on the site too (e.g. the ledger's links to chapters)
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "text/markdown" in data:
                    text = data["text/markdown"]
                    data["text/markdown"] = plain_markdown("".join(text) if isinstance(text, list) else text, links)
        cells.append(cell)
    if installs > 1 or (require_install and installs == 0 and any(c["cell_type"] == "code" for c in cells)):
        raise ValueError(f"{links.notebook}: expected one Colab install cell (tagged {INSTALL_TAG!r}, "
                         f"testing 'google.colab'), found {installs}")
    out["cells"] = cells
    meta = out.setdefault("metadata", {})
    meta.setdefault("headlab", {})["commit"] = links.commit
    return out


def colab_notebook(nb: dict, links: Links) -> dict:
    """The Colab/JupyterLab edition of a chapter: :func:`outside_notebook` with every solution folded."""
    from deviating.exercises.notebook import find_exercises

    titles = {}
    for ex in find_exercises(nb, links.notebook):
        for i in ex.solution_cells:
            titles[id(nb["cells"][i])] = f"Solution: {ex.title} (double-click to show the code)"
    marked = copy.deepcopy(nb)
    for original, cell in zip(nb["cells"], marked["cells"]):
        if id(original) in titles:
            cell["metadata"]["headlab_fold"] = titles[id(original)]
    out = outside_notebook(marked, links, solution_note="**Solution** (folded below: unfold it once you have tried)")
    for cell in out["cells"]:
        if title := cell["metadata"].pop("headlab_fold", None):
            fold(cell, title)
    meta = out["metadata"]
    meta["headlab"]["edition"] = "colab"
    meta["headlab"]["generated_by"] = "scripts/colab_edition.py (do not edit: regenerate)"
    meta.setdefault("colab", {"provenance": [], "toc_visible": True})
    return out


def write_edition(out: Path, commit: str, root: Path = ROOT) -> list[Path]:
    """Write the edition of every notebook in _toc.yml under ``out`` (same relative paths)."""
    import nbformat

    written = []
    for docname in _toc_pages():
        source = root / (docname + ".ipynb")
        if not source.is_file():
            continue
        nb = nbformat.read(source, as_version=4)
        edition = colab_notebook(nb, book_links(source, commit, root))
        target = out / (docname + ".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.from_dict(edition), target)
        written.append(target)
    (out / "README.md").write_text(
        "# Deviating Attention: the notebooks for Colab and JupyterLab\n\n"
        f"Generated by `scripts/colab_edition.py` from commit {commit} of "
        f"{_config().get('repository', {}).get('url', 'the book repository')}; do not edit: every "
        "publication of the website replaces this branch.\n", encoding="utf-8")
    (out / "edition.json").write_text(json.dumps({"commit": commit, "notebooks": [
        str(p.relative_to(out)) for p in written]}, indent=1) + "\n", encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "colab", help="default: _build/colab")
    parser.add_argument("--commit", help="the commit to pin (default: git rev-parse HEAD)")
    args = parser.parse_args(argv)
    commit = args.commit or build_commit()
    written = write_edition(args.out, commit)
    print(f"colab_edition: {len(written)} notebooks in {args.out}, install cells pinned to {commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
