#!/usr/bin/env python3
"""What the book's live widgets need on the website, installed into ``_static/headlab/``.

Called by ``scripts/build_book.py`` after Sphinx has written the pages
(:func:`install`). The live widgets of :mod:`headlab.viz.live` compute in the reader's
browser, with no kernel and no other server, so the site serves:

* ``anywidget/index.js``: the AMD bundle of the ``anywidget`` Python package installed
  here (its wheel carries it as ``nbextension/index.js``); ``_config.yml`` maps the
  require.js module ``anywidget`` to it, so the widget manager never asks a CDN;
* ``ort/``: onnxruntime-web's single-threaded wasm build (``ort.wasm.bundle.min.mjs``
  and ``ort-wasm-simd-threaded.wasm``), fetched with ``npm pack`` (cached in
  ``_build/.vendor-cache``);
* ``onnx/``: the ONNX export (:mod:`headlab.heads.onnx`) of every model a page's
  widgets name, and nothing else. Exports are cached in ``_build/.onnx-cache``.

``python scripts/site_widgets.py SITE`` installs them into an already built site.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
NPM_CACHE = BUILD / ".vendor-cache"
ONNX_CACHE = BUILD / ".onnx-cache"
ORT_SPEC = "onnxruntime-web@1.30.0"
# path inside the npm package -> name under _static/headlab/ort/
ORT_FILES = {
    "dist/ort.wasm.bundle.min.mjs": "ort.wasm.bundle.min.mjs",
    "dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    "package.json": "package.json",  # version and licence (MIT); the package ships no LICENSE file
}
WIDGET_STATE_RE = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S)
ONNX_NAME_RE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)-(?P<sha>[0-9a-f]{12})-v(?P<version>\d+)\.onnx$")


def _fail(message: str) -> None:
    sys.exit(f"site_widgets: {message}")


def ort_tarball() -> Path:
    """The npm tarball of onnxruntime-web (``npm pack`` once, then cached)."""
    name, _, version = ORT_SPEC.rpartition("@")
    tarball = NPM_CACHE / f"{name}-{version}.tgz"
    if not tarball.is_file():
        npm = shutil.which("npm")
        if npm is None:
            _fail("npm is needed to fetch onnxruntime-web from the npm registry (Debian: apt-get install npm)")
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        print(f"site_widgets: npm pack {ORT_SPEC}", flush=True)
        proc = subprocess.run([npm, "pack", "--silent", ORT_SPEC], cwd=NPM_CACHE, capture_output=True, text=True)
        if proc.returncode != 0 or not tarball.is_file():
            _fail(f"`npm pack {ORT_SPEC}` failed (exit {proc.returncode}):\n{proc.stderr}")
    return tarball


def anywidget_bundle() -> Path:
    """anywidget's AMD bundle from the installed Python package."""
    try:
        import anywidget
    except ImportError:
        _fail("the anywidget package is not installed (pip install -e .[book])")
    path = Path(anywidget.__file__).parent / "nbextension" / "index.js"
    if not path.is_file():
        _fail(f"{path} is missing: this anywidget ({anywidget.__version__}) has no AMD bundle")
    return path


def widget_models(site: Path) -> dict[str, list[str]]:
    """ONNX files named by the live widgets of each page: ``{file: [pages]}``."""
    used: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site).parts[0].startswith("_"):
            continue
        for match in WIDGET_STATE_RE.finditer(page.read_text(encoding="utf8", errors="replace")):
            state = json.loads(html_lib.unescape(match.group(1)) if "&quot;" in match.group(1) else match.group(1))
            for model in state.get("state", {}).values():
                s = model.get("state", {})
                if not str(s.get("_anywidget_id", "")).startswith(("headlab.", "deviating.")):
                    continue
                files = s.get("onnx")
                files = list(files.values()) if isinstance(files, dict) else [files] if files else []
                for file in files:
                    used.setdefault(file, []).append(page.relative_to(site).as_posix())
    return used


def export(file: str) -> Path:
    """The export named ``file`` (``<checkpoint>-<sha12>-v<version>.onnx``), from the cache or made now."""
    from headlab.heads.onnx import export_organism, onnx_file_name

    match = ONNX_NAME_RE.match(file)
    if not match:
        _fail(f"a widget names the ONNX file {file!r}, which is not a headlab export name")
    current = onnx_file_name(match["name"])
    if current != file:
        _fail(f"a page names {file}, but the checkpoint and exporter here make {current}: "
              "re-execute the notebook (the checkpoint or the export version changed)")
    return export_organism(match["name"], ONNX_CACHE)


def install(site: Path) -> dict[str, int]:
    """Put anywidget, onnxruntime-web and the pages' ONNX models into ``site/_static/headlab``.
    Returns the bytes of each part."""
    dest = site / "_static" / "headlab"
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "anywidget").mkdir(parents=True)
    shutil.copyfile(anywidget_bundle(), dest / "anywidget" / "index.js")
    (dest / "ort").mkdir()
    with tarfile.open(ort_tarball()) as tar:
        for src, name in ORT_FILES.items():
            member = tar.extractfile("package/" + src)
            if member is None:
                _fail(f"{ORT_SPEC} has no {src}; did the package layout change?")
            (dest / "ort" / name).write_bytes(member.read())
    (dest / "onnx").mkdir()
    for file, pages in widget_models(site).items():
        shutil.copyfile(export(file), dest / "onnx" / file)
        print(f"site_widgets: {file} (used by {', '.join(sorted(set(pages)))})", flush=True)
    return {part: sum(f.stat().st_size for f in (dest / part).rglob("*") if f.is_file())
            for part in ("anywidget", "ort", "onnx")}


def write_page(path: Path, widgets, title: str = "headlab live widgets") -> Path:
    """A page like the book's (the site's require.js, widget manager and configuration)
    showing ``widgets`` from their embedded state, at ``path`` in a folder that holds the
    site's ``_static/`` (for benchmarks and tests of widgets that no chapter shows)."""
    import yaml
    from ipywidgets.embed import dependency_state

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    scripts = config["sphinx"]["config"]["nb_ipywidgets_js"]
    static = "_static/"  # the page sits at the root of a site
    tags = []
    for src, attrs in scripts.items():
        attrs = dict(attrs or {})
        body = attrs.pop("body", "")
        extra = "".join(f' {k}="{html_lib.escape(str(v))}"' for k, v in attrs.items())
        tags.append(f'<script src="{static}{src}"{extra}></script>' if src else f"<script>{body}</script>")
    state = json.dumps({"version_major": 2, "version_minor": 0,
                        "state": dependency_state(widgets, drop_defaults=False)})
    views = "\n".join(
        '<div class="cell_output"><script type="application/vnd.jupyter.widget-view+json">'
        + json.dumps({"version_major": 2, "version_minor": 0, "model_id": w.model_id}) + "</script></div>"
        for w in widgets)
    path.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html_lib.escape(title)}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><script type="application/vnd.jupyter.widget-state+json">{state}</script>'
        + "".join(tags) + f'</head><body style="max-width:800px;margin:auto;font-family:sans-serif">'
        f"<h1>{html_lib.escape(title)}</h1>{views}</body></html>", encoding="utf8")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        _fail("usage: python scripts/site_widgets.py SITE_FOLDER")
    sizes = install(Path(sys.argv[1]))
    print("site_widgets: installed " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items()))
