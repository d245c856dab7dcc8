#!/usr/bin/env python3
"""Build the book's website: ``python scripts/build_book.py [--no-solutions] [--out DIR]``.

1. Fetch the JavaScript the site serves itself (never from a CDN): the ipywidgets
   HTML manager, require.js and MathJax, with ``npm pack`` from the npm registry,
   into ``_build/.vendor-cache`` (git-ignored, reused while it exists). What the
   pages load is extracted into ``_build/.vendor-site/_static/vendored``, which
   ``html_extra_path`` copies into the site. It is deliberately *not* a Sphinx
   static path: Jupyter Book adds every ``*.js`` of the static paths to every page.
2. Run ``jupyter-book build . -W -n --keep-going``: any warning, broken reference
   or failed notebook makes the build, and this script, exit non-zero.
3. Check the result: no page may load a script or stylesheet from another host.
4. Write the Colab edition (``scripts/colab_edition.py``) into ``_build/colab``: the notebooks
   the Colab buttons open, in plain Markdown, solutions folded, the install cell pinned to the
   commit being built (``$HEADLAB_COMMIT``, else ``$GITHUB_SHA``, else ``git rev-parse HEAD``).
   The Pages workflow publishes that folder on the ``colab`` branch.

This file is also the book's local Sphinx extension (``sphinx.local_extensions``
in ``_config.yml``), see :func:`setup`. It fixes things at their source:

- the root ``index.html`` is a copy of the root page, not a meta-refresh redirect;
- with thebe off, sphinx-thebe adds no scripts (it declared ``const THEBE_JS_URL``
  twice per page, a console error);
- every page has an (inline) icon, so browsers do not request a missing favicon.ico;
- with ``hide_solutions``, the solution *cells* go too: sphinx-exercise 1.2 drops only
  the ``solution-start`` directive of a gated solution, keeping the cells after it (the
  solution code, on the page) and the ``solution-end`` node (which the HTML writer
  cannot render: the build fails);
- each page's Colab (rocket) button opens the Colab edition of its notebook: the branch
  ``colab_branch`` (default ``colab``) instead of ``repository.branch``. sphinx-book-theme
  1.3 builds the link as ``{colab_url}/github/{org}/{repo}/blob/{repository_branch}/{path}``
  and has no separate setting for the launch buttons' branch, so this rewrites that one link
  and leaves the repository's branch to everything else.

``--no-solutions`` builds the same site without solutions (into
``_build/html-no-solutions`` unless ``--out`` says otherwise); ``--pages DOC ...`` builds only
those pages (a quick check of a variant: the site test builds two pages without solutions);
every variant
shares one notebook execution cache, so a second variant re-executes nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
VENDOR_CACHE = BUILD / ".vendor-cache"  # npm tarballs
VENDOR_SITE = BUILD / ".vendor-site"  # html_extra_path: its content lands at the site root
DEFAULT_OUT = BUILD / "html"
COLAB_OUT = BUILD / "colab"  # the Colab edition (scripts/colab_edition.py), published on the colab branch
EXEC_CACHE = BUILD / ".jupyter_cache"

# npm package -> [(path inside the package, destination under _static/vendored/)].
# A path ending in "/" copies a folder; "*.ext" copies matching files of a folder.
VENDOR_FILES: dict[str, list[tuple[str, str]]] = {
    # ipywidgets' embedder (ipywidgets 8 models); the hashed font files (woff2, with
    # woff/ttf fallbacks; no legacy eot/svg) sit next to it: its CSS asks for them there.
    "@jupyter-widgets/html-manager@1.0.6": [
        ("dist/embed-amd.js", "html-manager/embed-amd.js"),
        ("dist/*.woff2", "html-manager/"),
        ("dist/*.woff", "html-manager/"),
        ("dist/*.ttf", "html-manager/"),
        ("LICENSE", "html-manager/LICENSE"),
    ],
    "requirejs@2.3.4": [("require.js", "requirejs/require.js"), ("README.md", "requirejs/README.md")],
    # MathJax 3 (Sphinx's default is mathjax@3 on a CDN): the component, the TeX
    # extensions it autoloads, its fonts and its menu/accessibility modules.
    "mathjax@3.2.2": [
        ("es5/tex-mml-chtml.js", "mathjax/tex-mml-chtml.js"),
        ("es5/input/", "mathjax/input/"),
        ("es5/output/chtml/", "mathjax/output/chtml/"),
        ("es5/ui/", "mathjax/ui/"),
        ("es5/a11y/", "mathjax/a11y/"),
        ("es5/adaptors/", "mathjax/adaptors/"),
        ("LICENSE", "mathjax/LICENSE"),
    ],
}
# Files the configuration points at (checked after extraction).
VENDOR_REQUIRED = [
    "html-manager/embed-amd.js",
    "requirejs/require.js",
    "mathjax/tex-mml-chtml.js",
    "mathjax/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff",
]
_CDN_RE = re.compile(
    r"<(?:script|link|img|iframe)\b[^>]*?\b(?:src|href)=\"(https?:)?//[^\"]+\.(?:js|css|mjs)(?:\?[^\"]*)?\"",
    re.I,
)


# --------------------------------------------------------------------------- vendoring


def _tarball_name(spec: str) -> str:
    """npm pack's file name for ``@scope/name@1.2.3`` is ``scope-name-1.2.3.tgz``."""
    name, _, version = spec.rpartition("@")
    return f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def _npm_pack(specs: list[str]) -> None:
    npm = shutil.which("npm")
    if npm is None:
        sys.exit(
            "build_book: npm is needed to fetch the site's JavaScript (ipywidgets, require.js, "
            "MathJax) from the npm registry. Install Node.js/npm (Debian: apt-get install npm)."
        )
    VENDOR_CACHE.mkdir(parents=True, exist_ok=True)
    print(f"build_book: npm pack {' '.join(specs)}", flush=True)
    proc = subprocess.run(
        [npm, "pack", "--silent", *specs], cwd=VENDOR_CACHE, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"build_book: `npm pack` failed (exit {proc.returncode}):\n{proc.stderr}")


def _extract(spec: str, dest_root: Path) -> None:
    tarball = VENDOR_CACHE / _tarball_name(spec)
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        for src, dest in VENDOR_FILES[spec]:
            src_path = "package/" + src
            if src.endswith("/"):
                chosen = [(m, dest + m.name[len(src_path):]) for m in members if m.name.startswith(src_path)]
            elif "*" in src:
                folder, _, pattern = src_path.rpartition("/")
                rx = re.compile(re.escape(pattern).replace(r"\*", "[^/]*") + "$")
                chosen = [
                    (m, dest + m.name.rpartition("/")[2])
                    for m in members
                    if m.name.rpartition("/")[0] == folder and rx.match(m.name.rpartition("/")[2])
                ]
            else:
                chosen = [(m, dest) for m in members if m.name == src_path]
            if not chosen:
                sys.exit(f"build_book: {spec} has no {src!r}; did the package layout change?")
            for member, rel in chosen:
                target = dest_root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as fh:  # type: ignore[union-attr]
                    target.write_bytes(fh.read())


def vendor_javascript() -> None:
    """Make ``_build/.vendor-site/_static/vendored`` hold every script the site loads."""
    missing = [s for s in VENDOR_FILES if not (VENDOR_CACHE / _tarball_name(s)).is_file()]
    if missing:
        _npm_pack(missing)
    dest_root = VENDOR_SITE / "_static" / "vendored"
    stamp = VENDOR_CACHE / "extracted.txt"  # not in VENDOR_SITE: that is copied into the site
    if not stamp.is_file() or any(not (dest_root / f).is_file() for f in VENDOR_REQUIRED):
        shutil.rmtree(VENDOR_SITE, ignore_errors=True)
        for spec in VENDOR_FILES:
            _extract(spec, dest_root)
        stamp.write_text("\n".join(VENDOR_FILES) + "\n")
    absent = [f for f in VENDOR_REQUIRED if not (dest_root / f).is_file()]
    if absent:
        sys.exit(f"build_book: vendored files missing after extraction: {absent}")


# --------------------------------------------------------------------------- build


def _variant_config(hide_solutions: bool) -> Path:
    """A copy of _config.yml for a build variant, with paths made absolute."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf8"))
    sphinx = config.setdefault("sphinx", {})
    sphinx["local_extensions"] = {
        name: str((ROOT / path).resolve()) for name, path in (sphinx.get("local_extensions") or {}).items()
    }
    sph_conf = sphinx.setdefault("config", {})
    sph_conf["html_extra_path"] = [str((ROOT / p).resolve()) for p in sph_conf.get("html_extra_path", [])]
    sph_conf["hide_solutions"] = hide_solutions
    # one execution cache for every variant: the notebooks are the same
    config.setdefault("execute", {})["cache"] = str(EXEC_CACHE)
    path = BUILD / "variants" / ("config-no-solutions.yml" if hide_solutions else "config.yml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf8")
    return path


def _pages_toc(pages: list[str]) -> Path:
    """A table of contents with the root and ``pages`` only (documents of ``_toc.yml``)."""
    import yaml

    known = toc_documents()
    unknown = [p for p in pages if p not in known]
    if unknown:
        sys.exit(f"build_book: --pages {' '.join(unknown)}: not documents of _toc.yml (give paths such as "
                 "chapters/09_checklist/09_checklist, without an extension)")
    root = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))["root"]
    path = BUILD / "variants" / "toc-pages.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"format": "jb-book", "root": root, "chapters": [{"file": p} for p in pages]}),
                    encoding="utf-8")
    return path


def run_jupyter_book(out: Path, hide_solutions: bool, pages: list[str] | None = None) -> None:
    exe = Path(sys.executable).parent / "jupyter-book"  # the one installed next to this Python
    jb = str(exe) if exe.is_file() else shutil.which("jupyter-book")
    if jb is None:
        sys.exit("build_book: jupyter-book is not installed; run `make book` (it installs .[book]).")
    # with --pages, links into the pages left out cannot resolve: they are printed, not fatal
    cmd = [jb, "build", str(ROOT), *([] if pages else ["-W"]), "-n", "--keep-going"]
    default = out.resolve() == DEFAULT_OUT.resolve() and not hide_solutions and not pages
    if default:
        produced = DEFAULT_OUT
    else:
        # A variant gets its own Sphinx environment (its doctrees depend on the
        # settings) under _build/variants/<name>/_build, then is copied to `out`.
        name = ("no-solutions" if hide_solutions else "solutions") + ("-pages" if pages else "")
        stage = BUILD / "variants" / name
        cmd += ["--config", str(_variant_config(hide_solutions)), "--path-output", str(stage)]
        if pages:
            cmd += ["--toc", str(_pages_toc(pages))]
        produced = stage / "_build" / "html"
    print("build_book: jupyter-book " + " ".join(cmd[1:]), flush=True)
    # long-running cells print their progress as lines of text (headlab.progress), not as
    # a notebook widget that the static page would show as a squashed, frozen bar; the chapters
    # record their verdicts for the ledger only when the book is built (deviating.ledger)
    env = {**os.environ, "HEADLAB_PROGRESS": "text", "HEADLAB_WRITE_CLAIMS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    if proc.returncode != 0:
        sys.exit(
            f"build_book: FAILED: jupyter-book exited with {proc.returncode}. The build treats "
            "every warning (broken reference, failed notebook, bad directive) as an error; "
            "the cause is printed above."
        )
    # Sphinx neither deletes stale output files nor copies html_extra_path when no page
    # changed: drop the pages of documents no longer in the book, and make the vendored
    # folder exactly this build's.
    _remove_stale_pages(produced)
    vendored = produced / "_static" / "vendored"
    shutil.rmtree(vendored, ignore_errors=True)
    shutil.copytree(VENDOR_SITE / "_static" / "vendored", vendored)
    if not default:
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(produced, out)


SPHINX_PAGES = {"index", "genindex", "search", "py-modindex"}


def toc_documents(toc: Path = ROOT / "_toc.yml") -> set[str]:
    """The documents of the table of contents (paths without extension), the root included."""
    import yaml

    def walk(node) -> set[str]:  # noqa: ANN001
        found = set()
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    found.add(node[key])
            for value in node.values():
                found |= walk(value)
        elif isinstance(node, list):
            for item in node:
                found |= walk(item)
        return found

    return walk(yaml.safe_load(toc.read_text(encoding="utf-8")))


def _remove_stale_pages(site: Path) -> None:
    """Delete the HTML pages of documents that left the table of contents (renamed chapters)."""
    keep = toc_documents() | SPHINX_PAGES
    for page in site.rglob("*.html"):
        rel = page.relative_to(site)
        if rel.parts[0].startswith("_") or rel.with_suffix("").as_posix() in keep:
            continue
        print(f"build_book: removing stale page {rel} (its document is not in _toc.yml)")
        page.unlink()


def check_site(out: Path) -> None:
    """Fail if a page loads a script or stylesheet from another host, or index.html redirects."""
    offenders = []
    for page in sorted(out.rglob("*.html")):
        for match in _CDN_RE.finditer(page.read_text(encoding="utf8", errors="replace")):
            offenders.append(f"{page.relative_to(out)}: {match.group(0)[:160]}")
    if offenders:
        sys.exit("build_book: pages load assets from other hosts:\n  " + "\n  ".join(offenders))
    index = out / "index.html"
    if not index.is_file() or 'http-equiv="Refresh"' in index.read_text(encoding="utf8"):
        sys.exit(f"build_book: {index} is missing or still a redirect")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--no-solutions", action="store_true", help="build the site without the exercise solutions"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the HTML goes (default: _build/html, or _build/html-no-solutions)",
    )
    parser.add_argument(
        "--pages", nargs="+", default=None, metavar="DOC",
        help="build only these documents of _toc.yml (and the root), e.g. chapters/09_checklist/09_checklist: "
             "a quick check of a variant; links to the pages left out are printed, not errors, and no "
             "Colab edition is written",
    )
    args = parser.parse_args(argv)
    if args.pages and args.out is None:
        parser.error("--pages builds part of the site: give --out DIR for it")
    out = args.out or (BUILD / "html-no-solutions" if args.no_solutions else DEFAULT_OUT)
    out = out if out.is_absolute() else Path.cwd() / out

    start = time.perf_counter()
    vendor_javascript()
    run_jupyter_book(out, hide_solutions=args.no_solutions, pages=args.pages)
    import site_widgets  # the live widgets' assets (scripts/site_widgets.py)

    site_widgets.install(out)
    check_site(out)
    (out / ".nojekyll").touch()  # GitHub Pages: serve _static/ as is, no Jekyll
    if args.pages:
        print(f"build_book: OK, {len(args.pages)} of the book's pages in {out} ({time.perf_counter() - start:.1f} s)")
        return 0
    import colab_edition  # the notebooks the Colab buttons open (scripts/colab_edition.py)

    commit = os.environ.get("HEADLAB_COMMIT") or os.environ.get("GITHUB_SHA") or colab_edition.build_commit()
    written = colab_edition.write_edition(COLAB_OUT, commit)
    print(f"build_book: Colab edition: {len(written)} notebooks in {COLAB_OUT}, pinned to {commit[:12]}")
    if not args.no_solutions and out == DEFAULT_OUT:
        import site_fingerprint  # a later test run reuses this site while the sources stay as they are

        (out / site_fingerprint.NAME).unlink(missing_ok=True)
        site_fingerprint.write(out)
    elapsed = time.perf_counter() - start
    pages = sum(1 for p in out.rglob("*.html") if not p.relative_to(out).parts[0].startswith("_"))
    kind = "without solutions" if args.no_solutions else "with solutions"
    print(f"build_book: OK, {pages} HTML pages {kind} in {out} ({elapsed:.1f} s)")
    return 0


# --------------------------------------------------------------------------- Sphinx extension


def _drop_thebe_when_off(app) -> None:  # noqa: ANN001 (Sphinx types stay optional here)
    """sphinx-thebe adds its scripts on every build, even with thebe off; stop that."""
    launch = (app.config.html_theme_options or {}).get("launch_buttons", {}) or {}
    if launch.get("thebe"):
        return
    for event in ("env-before-read-docs", "doctree-resolved"):
        for listener in list(app.events.listeners.get(event, [])):
            if getattr(listener.handler, "__module__", "") == "sphinx_thebe":
                app.disconnect(listener.id)


def _write_index(app, exception) -> None:  # noqa: ANN001
    """The site root shows the root page itself (a redirect stalls crawlers and screenshots)."""
    if exception is not None or app.builder is None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    root_page = outdir / f"{app.config.root_doc}.html"
    index = outdir / "index.html"
    if root_page.is_file() and app.config.root_doc != "index":
        shutil.copyfile(root_page, index)


# A 4x4 causal attention pattern as the site icon, inline: no file, and no request
# for /favicon.ico (a 404 in every browser console).
_FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 4 4">'
    + "".join(
        f'<rect x="{k}" y="{q}" width="1" height="1" fill="#1f77b4" fill-opacity="{w}"/>'
        for q, row in enumerate([[1], [0.35, 0.65], [0.15, 0.6, 0.25], [0.1, 0.15, 0.55, 0.2]])
        for k, w in enumerate(row)
    )
    + "</svg>"
)


def _add_favicon(app, pagename, templatename, context, doctree) -> None:  # noqa: ANN001, ARG001
    if app.config.html_favicon:  # a configured favicon wins
        return
    from urllib.parse import quote

    link = f'<link rel="icon" type="image/svg+xml" href="data:image/svg+xml,{quote(_FAVICON_SVG)}" />'
    context["metatags"] = context.get("metatags", "") + "\n" + link


def _drop_unused_widget_state(app, doctree) -> None:  # noqa: ANN001
    """A page that shows no widget embeds no widget state (nor the widget manager).

    nbclient keeps a notebook's old widget state when a run creates no widget, e.g. the
    progress bars of a run before ``HEADLAB_PROGRESS=text``: the page would carry frozen
    bars that nothing displays. myst-nb has collected the page's scripts by now.
    """
    from docutils import nodes

    views = any("application/vnd.jupyter.widget-view+json" in node.astext() for node in doctree.findall(nodes.raw))
    metadata = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {})
    js_files = metadata.get("js_files", {})
    if not views and "ipywidgets_state" in js_files:
        for key in [k for k in js_files if k.startswith("ipywidgets")]:
            del js_files[key]


def colab_button_to_edition(app, pagename, templatename, context, doctree) -> None:  # noqa: ANN001, ARG001
    """Point the page's Colab launch button at the branch ``colab_branch`` (the Colab edition)."""
    branch = app.config.colab_branch
    if not branch:
        return
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            head, sep, rest = button.get("url", "").partition("/blob/")
            if button.get("text") == "Colab" and sep and "/" in rest:
                button["url"] = f"{head}/blob/{branch}/{rest.split('/', 1)[1]}"


def setup(app):  # noqa: ANN001, ANN201
    """Sphinx entry point (this file is listed in ``sphinx.local_extensions``)."""
    from docutils import nodes
    from sphinx.transforms import SphinxTransform

    class RemoveSolutionCells(SphinxTransform):
        """With ``hide_solutions``, remove the cells of gated solutions as well.

        sphinx-exercise drops a hidden solution's ``solution-start`` directive but
        keeps the notebook cells that follow it up to ``solution-end``. By the
        book's convention (checked by scripts/make_student.py) those are exactly
        the code cells tagged ``solution``.
        """

        default_priority = 50  # after sphinx-exercise's gated-directive transforms (1, 10)

        def apply(self) -> None:
            if not self.config["hide_solutions"]:
                return
            from sphinx_exercise.nodes import solution_end_node

            for node in list(self.document.findall(nodes.container)):
                if node.get("nb_element") == "cell_code" and "tag_solution" in node["classes"]:
                    node.parent.remove(node)
            for node in list(self.document.findall(solution_end_node)):
                node.parent.remove(node)

    app.setup_extension("sphinx_exercise")
    app.add_transform(RemoveSolutionCells)
    app.connect("config-inited", lambda app, config: _drop_thebe_when_off(app), priority=900)
    app.connect("html-page-context", _add_favicon)
    app.add_config_value("colab_branch", "colab", "html")
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", colab_button_to_edition, priority=502)
    app.connect("doctree-read", _drop_unused_widget_state)
    app.connect("build-finished", _write_index, priority=400)  # before sphinx-external-toc's redirect
    # A new env_version makes Sphinx re-read every page: so an edit of this file takes effect
    # even where the pages themselves did not change (executed notebooks stay cached).
    import hashlib

    env_version = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": env_version}


if __name__ == "__main__":
    sys.exit(main())
