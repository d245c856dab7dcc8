"""The built website, opened page by page in a real headless browser.

One session fixture builds the book with scripts/build_book.py into _build/html
(a failed build fails every test here). The site is served over HTTP from a
local thread and every page is opened in Debian's chromium, driven by
playwright (``executable_path``; playwright never downloads a browser here).
Checked on every page: HTTP 200, every <img> decodes, no console error, no
failed request, no request to another host (those are blocked and counted as
failed), and widgets render where the page embeds widget state. A screenshot of
each page (its top; the whole page with SITE_SCREENSHOTS=full) is saved under _build/screenshots/.

Without chromium (or the playwright package) the tests skip, unless the
environment variable CI is set: then they fail, because a green CI must not
hide a missing install step.
"""

from __future__ import annotations

import functools
import html as html_lib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import ROOT, chapter_notebooks, in_ci
from site_build import build_site_once

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
# The top of each page by default; SITE_SCREENSHOTS=full shoots whole pages (for reading them;
# rendering a long chapter whole took about a third of this test's time on the shared machine).
FULL_SHOTS = os.environ.get("SITE_SCREENSHOTS", "") == "full"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_SELECTOR = '.jupyter-widgets, [class^="widget-"], [class*=" widget-"]'
NARROW = 390  # a phone's width: the page may scroll inside a code box, never as a whole
# px by which the page is wider than the viewport, read after two frames (the resize's layout done)
NARROW_SCRIPT = f"""() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() =>
    done(Math.max(0, document.documentElement.scrollWidth - {NARROW})))))"""
CODE_SCROLL_SHARE = 0.05  # at most this share of the site's code blocks may scroll sideways at 1280 px
# Words of the book's making that a reader must never meet: the harness's markers, and "seed(s)"
# used for the book's sources (in the book a seed is only ever a random seed).
JARGON = re.compile(r"NBVAL_|nbval-check|\bseed (?:text|document)s?\b|\bthe seeds['’] |\bthe seeds (?:claim|say|warn|state)"
                    r"|\bsays? the seeds?\b|\bthe seed text\b|\bthe memo\b", re.I)

# Read in the page after it has rendered: which boxes scroll sideways, the article's figures
# (alt text and caption), and the article's visible text.
LAYOUT_SCRIPT = """() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const scrolls = el => el.scrollWidth > el.clientWidth + 1;
  const first = el => (el.innerText || '').split('\\n').find(l => l.length > 76) || (el.innerText || '').slice(0, 80);
  const outputs = Array.from(article.querySelectorAll('div.cell_output pre, div.output pre'))
    .filter(el => !el.closest('.widget-output'));
  const code = Array.from(article.querySelectorAll('div.highlight pre'))
    .filter(el => !el.closest('div.cell_output'));
  const figures = Array.from(article.querySelectorAll('img'))
    .filter(img => (img.getAttribute('src') || '').includes('_images/')).map(img => {
    const fig = img.closest('figure');
    const cap = fig ? fig.querySelector('figcaption') : null;
    return {src: (img.getAttribute('src') || '').slice(-60), alt: img.getAttribute('alt') || '',
            caption: cap ? cap.innerText.trim().slice(0, 80) : ''};
  });
  return {outputs: outputs.length, outputs_scrolling: outputs.filter(scrolls).map(first),
          code: code.length, code_scrolling: code.filter(scrolls).map(first),
          figures: figures, text: article.innerText};
}"""


def _need_browser() -> None:
    """Skip (or, under CI, fail) when the browser or its driver is missing."""
    problems = []
    if not CHROMIUM.exists():
        problems.append(f"{CHROMIUM} not found (Debian: apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright Python package is not installed (pip install -e .[test])")
    if problems:
        reason = "site test needs a browser: " + "; ".join(problems)
        if in_ci():
            pytest.fail(reason + " [CI is set, so this is a failure, not a skip]")
        pytest.skip(reason)


def _build(args: list[str]) -> tuple[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_book.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/build_book.py {' '.join(args)} failed (exit {proc.returncode}); "
            f"last lines:\n{output[-6000:]}",
            pytrace=False,
        )
    return output, elapsed


@pytest.fixture(scope="session")
def built_site() -> Path:
    """Build the book once into _build/html; fail every site test if it fails."""
    build_site_once()  # shared with test_site_widgets.py (tests/site_build.py)
    return SITE


# --------------------------------------------------------------------------- browsing


class _RecordingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site quietly and records every response >= 400 (favicon.ico included,
    which the browser fetches without telling playwright)."""

    errors: list[str] = []

    def log_message(self, format, *args):  # noqa: A002, ANN001, ANN002
        pass

    def log_request(self, code="-", size="-"):  # noqa: ANN001
        if isinstance(code, int) and code >= 400:  # HTTPStatus is an int
            self.errors.append(f"HTTP {int(code)} from the server: {self.path}")


@dataclass
class PageResult:
    path: str
    status: int | None = None
    images: list[dict] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    console_warnings: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    has_widget_state: bool = False
    widget_nodes: int = 0
    output_models_with_outputs: int = 0
    rendered_output_widgets: int = 0
    screenshot: str = ""
    layout: dict = field(default_factory=dict)
    narrow_overflow: int = 0  # px the page is wider than a 390-px screen


def _pages(site: Path) -> list[Path]:
    """Every HTML page of the site (not the files of _static/ or _sources/)."""
    return sorted(p for p in site.rglob("*.html") if not p.relative_to(site).parts[0].startswith("_"))


def _count_output_models(html: str) -> int:
    """Output widgets whose embedded state holds outputs (they must render them)."""
    match = re.search(
        r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', html, re.S
    )
    if not match:
        return 0
    state = json.loads(match.group(1))["state"]
    return sum(
        1
        for model in state.values()
        if model.get("model_name") == "OutputModel" and model.get("state", {}).get("outputs")
    )


def _visit_all(site: Path) -> list[PageResult]:
    from playwright.sync_api import sync_playwright

    _RecordingHandler.errors.clear()
    handler = functools.partial(_RecordingHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    SCREENSHOTS.mkdir(parents=True)
    results = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            context = browser.new_context(viewport={"width": 1280, "height": 900})

            def route(route_, request):  # noqa: ANN001
                if request.url.startswith(base) or request.url.startswith("data:"):
                    route_.continue_()
                else:  # never let a page talk to another host: block and record it
                    results[-1].failed_requests.append(f"blocked request to another host: {request.url}")
                    route_.abort()

            context.route("**/*", route)
            for page_path in _pages(site):
                rel = page_path.relative_to(site).as_posix()
                result = PageResult(path=rel)
                results.append(result)
                html = page_path.read_text(encoding="utf8")
                result.has_widget_state = WIDGET_STATE in html
                result.output_models_with_outputs = _count_output_models(html)

                page = context.new_page()
                page.on(
                    "console",
                    lambda msg, r=result: (
                        r.console_errors.append(f"{msg.text} ({msg.location.get('url', '')})")
                        if msg.type == "error"
                        else r.console_warnings.append(msg.text)
                        if msg.type == "warning"
                        else None
                    ),
                )
                page.on("pageerror", lambda err, r=result: r.console_errors.append(f"uncaught: {err}"))
                page.on(
                    "requestfailed",
                    lambda req, r=result: r.failed_requests.append(f"{req.url} ({req.failure})")
                    if req.url.startswith(base)
                    else None,
                )
                page.on(
                    "response",
                    lambda resp, r=result: r.failed_requests.append(f"HTTP {resp.status}: {resp.url}")
                    if resp.status >= 400
                    else None,
                )
                response = page.goto(base + rel, wait_until="load", timeout=60_000)
                result.status = response.status if response else None
                try:
                    page.wait_for_load_state("networkidle", timeout=15_000)
                except Exception:  # noqa: BLE001 (a page that keeps polling is still checked)
                    pass
                if result.has_widget_state:
                    try:
                        # attached, not visible: a widget may sit in a folded box (waiting for
                        # it to be visible timed out on every page, 20 s each)
                        page.wait_for_selector(WIDGET_SELECTOR, state="attached", timeout=20_000)
                        page.wait_for_load_state("networkidle", timeout=10_000)
                    except Exception:  # noqa: BLE001 (reported below as 0 widget nodes)
                        pass
                # let every image finish loading (or fail), then read its decoded size
                result.images = page.evaluate(
                    """async () => {
                        await Promise.all(Array.from(document.images).map(img => img.complete ? null
                            : new Promise(done => { img.onload = img.onerror = done; })));
                        return Array.from(document.images).map(img => ({
                            src: (img.currentSrc || img.src).slice(0, 120),
                            width: img.naturalWidth,
                        }));
                    }"""
                )
                result.widget_nodes = page.locator(WIDGET_SELECTOR).count()
                result.rendered_output_widgets = page.evaluate(
                    """() => Array.from(document.querySelectorAll('.widget-output'))
                        .filter(el => el.querySelector('img, pre, .jp-OutputArea-child')).length"""
                )
                result.layout = page.evaluate(LAYOUT_SCRIPT)
                shot = SCREENSHOTS / (rel.replace("/", "__").removesuffix(".html") + ".png")
                page.screenshot(path=str(shot), full_page=FULL_SHOTS, timeout=120_000)
                result.screenshot = str(shot.relative_to(ROOT))
                # the same page on a phone's width: the layout follows the viewport (CSS media
                # queries, the theme's resize handlers), so a resize reads what a fresh load at
                # that width would, without loading every page twice
                page.set_viewport_size({"width": NARROW, "height": 800})
                result.narrow_overflow = page.evaluate(NARROW_SCRIPT)
                page.close()
                result.failed_requests.extend(
                    e for e in _RecordingHandler.errors if e.split(": ", 1)[1] not in "".join(result.failed_requests)
                )
                _RecordingHandler.errors.clear()
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    return results


@pytest.fixture(scope="session")
def site_visit(built_site: Path) -> list[PageResult]:
    _need_browser()
    results = _visit_all(built_site)
    summary = (
        f"site test: {len(results)} pages visited, "
        f"{sum(len(r.images) for r in results)} images "
        f"({sum(1 for r in results for i in r.images if i['width'] == 0)} broken), "
        f"{sum(len(r.console_errors) for r in results)} console errors, "
        f"{sum(len(r.console_warnings) for r in results)} console warnings, "
        f"{sum(len(r.failed_requests) for r in results)} failed requests, "
        f"{sum(r.widget_nodes for r in results)} widget nodes rendered on "
        f"{sum(1 for r in results if r.has_widget_state)} pages with widget state; "
        f"screenshots in {SCREENSHOTS.relative_to(ROOT)}/"
    )
    print(summary)
    (SCREENSHOTS / "summary.txt").write_text(
        summary + "\n\n" + "\n".join(json.dumps(r.__dict__) for r in results) + "\n"
    )
    return results


def _report(results: list[PageResult], attr: str) -> str:
    return "\n".join(
        f"  {r.path}: {item}" for r in results for item in getattr(r, attr)
    )


# --------------------------------------------------------------------------- tests


def test_every_chapter_is_a_page(built_site: Path) -> None:
    missing = [
        nb.relative_to(ROOT).with_suffix(".html").as_posix()
        for nb in chapter_notebooks()
        if not (built_site / nb.relative_to(ROOT).with_suffix(".html")).is_file()
    ]
    assert not missing, (
        f"chapter notebooks without a page (add them to _toc.yml): {missing}"
    )


API_PAGE = ROOT / "chapters" / "reference" / "api.md"
_AUTODOC = re.compile(r"^\s*\.\. auto(?:function|class|exception|data|module|method|attribute)::\s*(\S+)", re.M)


def _api_page_names() -> list[str]:
    """The objects chapters/reference/api.md documents, and those its autosummary tables list."""
    text = API_PAGE.read_text(encoding="utf-8")
    names = _AUTODOC.findall(text)
    for table in re.findall(r"\.\. autosummary::\n(?:\s+:\w+:.*\n)*\n((?:\s+\S+\n)+)", text):
        names += table.split()
    return names


def test_api_page_names_exist_and_have_docstrings() -> None:
    """Fast, without a build: a renamed or moved function fails here, by name, not in Sphinx."""
    import importlib
    import inspect

    names = _api_page_names()
    assert {"headlab.load", "headlab.heads.HeadModel", "headlab.analysis.sweep.sweep",
            "deviating.kernels.attention"} <= set(names), names
    problems = []
    for name in dict.fromkeys(names):
        parts, obj = name.split("."), None
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, None)
            break
        if obj is None:
            problems.append(f"{name}: not importable (renamed or moved? update chapters/reference/api.md)")
        elif (inspect.isroutine(obj) or inspect.isclass(obj) or inspect.ismodule(obj)) and not inspect.getdoc(obj):
            problems.append(f"{name}: no docstring (the API page would show nothing)")
    assert not problems, "chapters/reference/api.md:\n  " + "\n  ".join(problems)
    text = API_PAGE.read_text(encoding="utf-8")
    assert ":module: headlab.__main__" in text and ":func: build_parser" in text
    from headlab.__main__ import build_parser

    assert build_parser().prog == "python -m headlab"


def test_api_reference_page(built_site: Path) -> None:
    """The API page is in the book, generated from the docstrings, with the command line."""
    page = built_site / "chapters" / "reference" / "api.html"
    assert page.is_file(), "chapters/reference/api.md is not a page: is it in _toc.yml?"
    html = page.read_text(encoding="utf8")
    for anchor in ("headlab.load", "headlab.heads.HeadModel.ablate", "headlab.heads.HeadModel.run_with_cache",
                   "headlab.heads.ActivationCache", "headlab.analysis.sweep.sweep",
                   "headlab.analysis.detect.induction_score", "deviating.kernels.attention"):
        assert f'id="{anchor}"' in html, f"the API page documents no {anchor}"
    text = _page_text(page)
    assert "Inside the block, the given heads are ablated" in text  # HeadModel.ablate's docstring
    for program, command in (("headlab", "heads"), ("headlab", "sweep"), ("headlab", "atlas"),
                             ("deviating", "report"), ("deviating", "train"), ("deviating", "grade")):
        assert f"python -m {program} {command}" in text, f"the API page does not show the {command} command"
    index = (built_site / "intro.html").read_text(encoding="utf8")
    assert "chapters/reference/api.html" in index, "the API page is not in the site's navigation"


def test_every_page_loads(site_visit: list[PageResult], record_property) -> None:  # noqa: ANN001
    summary = next(iter((SCREENSHOTS / "summary.txt").read_text().splitlines()), "")
    record_property("summary", summary)
    assert site_visit, "the site has no pages"
    bad = [f"{r.path}: HTTP {r.status}" for r in site_visit if r.status != 200]
    assert not bad, "pages that did not load:\n" + "\n".join(bad)


def test_every_image_decodes(site_visit: list[PageResult]) -> None:
    broken = [f"{r.path}: {i['src']}" for r in site_visit for i in r.images if i["width"] == 0]
    assert not broken, "images that do not decode (naturalWidth == 0):\n" + "\n".join(broken)


def test_no_console_errors(site_visit: list[PageResult]) -> None:
    report = _report(site_visit, "console_errors")
    assert not report, "console errors:\n" + report


def test_no_failed_requests(site_visit: list[PageResult]) -> None:
    report = _report(site_visit, "failed_requests")
    assert not report, "failed or blocked requests:\n" + report


def test_widgets_render(site_visit: list[PageResult]) -> None:
    with_state = [r for r in site_visit if r.has_widget_state]
    blank = [r.path for r in with_state if r.widget_nodes == 0]
    assert not blank, f"pages whose embedded widgets did not render: {blank}"
    empty_outputs = [
        f"{r.path}: {r.rendered_output_widgets} of {r.output_models_with_outputs} Output widgets show content"
        for r in with_state
        if r.rendered_output_widgets < r.output_models_with_outputs
    ]
    assert not empty_outputs, "Output widgets render empty:\n" + "\n".join(empty_outputs)


def _fig_problems(fig: dict) -> list[str]:
    alt, problems = fig["alt"].strip(), []
    if len(alt) < 12 or re.search(r"(^|/)[\w.-]+\.(png|svg|jpe?g)$|_images/|^image$|^png$", alt, re.I):
        problems.append(f"alt text {alt!r} says nothing about the figure")
    if not fig["caption"]:
        problems.append("no caption")
    return problems


def test_no_output_is_cut_off(site_visit: list[PageResult], record_property) -> None:  # noqa: ANN001
    """At 1280 px no cell output scrolls sideways: a number past the edge is a number unread."""
    total = sum(r.layout.get("outputs", 0) for r in site_visit)
    cut = [f"{r.path}: {line!r}" for r in site_visit for line in r.layout.get("outputs_scrolling", [])]
    record_property("summary", f"site layout: {len(cut)} of {total} cell outputs scroll sideways at 1280 px")
    assert not cut, f"{len(cut)} of {total} cell outputs scroll sideways at 1280 px (print to the " \
                    "column, 76 characters):\n" + "\n".join(cut)


def test_code_fits_the_column(site_visit: list[PageResult], record_property) -> None:  # noqa: ANN001
    total = sum(r.layout.get("code", 0) for r in site_visit)
    wide = [f"{r.path}: {line!r}" for r in site_visit for line in r.layout.get("code_scrolling", [])]
    record_property("summary", f"site layout: {len(wide)} of {total} code blocks scroll sideways at 1280 px "
                               f"(at most {CODE_SCROLL_SHARE:.0%} may)")
    assert total and len(wide) <= CODE_SCROLL_SHARE * total, (
        f"{len(wide)} of {total} code blocks scroll sideways at 1280 px (at most {CODE_SCROLL_SHARE:.0%}); "
        "format them to 76 characters:\n" + "\n".join(wide))


def test_narrow_screens_keep_the_layout(site_visit: list[PageResult]) -> None:
    wide = [f"{r.path}: {r.narrow_overflow} px wider than the screen" for r in site_visit if r.narrow_overflow > 1]
    assert not wide, f"pages wider than a {NARROW}-px screen (something breaks the layout):\n" + "\n".join(wide)


def test_no_plumbing_or_private_jargon(site_visit: list[PageResult]) -> None:
    found = []
    for r in site_visit:
        for m in JARGON.finditer(r.layout.get("text", "")):
            text = r.layout["text"]
            found.append(f"{r.path}: …{text[max(0, m.start() - 40):m.end() + 40]!r}…")
    assert not found, "test plumbing or the book's private words in the rendered text:\n" + "\n".join(found)


def test_every_figure_has_alt_text_and_a_caption(site_visit: list[PageResult], record_property) -> None:  # noqa: ANN001
    figures = [(r.path, f) for r in site_visit for f in r.layout.get("figures", [])]
    bad = [f"{path}: {fig['src']}: {'; '.join(_fig_problems(fig))}" for path, fig in figures if _fig_problems(fig)]
    record_property("summary", f"site figures: {len(figures) - len(bad)} of {len(figures)} have alt text and a caption")
    assert not bad, f"{len(bad)} of {len(figures)} figures lack a caption or meaningful alt text:\n" + "\n".join(bad)


def test_layout_checks_see_what_they_check() -> None:
    """The jargon pattern and the figure rule flag what they must (and pass what they must)."""
    assert JARGON.search("as the seed text says") and JARGON.search("# NBVAL_CHECK_OUTPUT")
    assert not JARGON.search("three training seeds of the organism") and not JARGON.search("seed 0 and seed 1")
    assert _fig_problems({"alt": "_images/ab12.png", "caption": ""}) == [
        "alt text '_images/ab12.png' says nothing about the figure", "no caption"]
    assert not _fig_problems({"alt": "Loss curves of four models", "caption": "Figure 1. Loss"})


def test_the_narrow_check_sees_a_page_wider_than_a_phone(tmp_path: Path) -> None:
    """A page loaded wide and resized to a phone's width: the check reads the overflow of a fixed-width
    box, and none for a box that follows the viewport."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    pages = {"fixed": '<div style="width: 900px">wide</div>', "fluid": '<div style="max-width: 900px">wide</div>'}
    seen = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, body in pages.items():
            page.set_viewport_size({"width": 1280, "height": 900})
            page.set_content(f"<!doctype html><html><body style='margin: 0'>{body}</body></html>")
            page.set_viewport_size({"width": NARROW, "height": 800})
            seen[name] = page.evaluate(NARROW_SCRIPT)
        browser.close()
    assert seen == {"fixed": 900 - NARROW, "fluid": 0}


def _page_text(page: Path) -> str:
    """The visible text of a page (tags stripped, entities decoded)."""
    return html_lib.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf8")))


# Built without solutions by the site test: two pages, not the whole site (a full build costs about
# 45 CPU-seconds; these two, about 5). Every chapter marks its solutions the same way, which
# make_student.find_exercises checks for each chapter (tests/test_student.py), so two pages test the
# mechanism; `python scripts/build_book.py --no-solutions` builds the whole site without solutions.
NO_SOLUTION_PAGES = ("chapters/00_how_to_use/how_to_use", "chapters/09_checklist/09_checklist")


def test_site_without_solutions(built_site: Path, tmp_path: Path) -> None:
    """--no-solutions is one flag away: the same exercises, no solution code, no solution boxes."""
    import nbformat
    from make_student import find_exercises

    out = tmp_path / "site"
    output, _ = _build(["--no-solutions", "--out", str(out), "--pages", *NO_SOLUTION_PAGES])
    # the only warnings allowed: links into pages left out, to labels the full site defines there
    elsewhere = "".join(p.read_text(encoding="utf-8") for p in _pages(built_site)
                        if p.relative_to(built_site).with_suffix("").as_posix() not in NO_SOLUTION_PAGES)
    bad = []
    for line in (ln for ln in output.splitlines() if "WARNING" in ln):
        doc = re.search(r"unknown document: '/?([^']+)'", line)
        label = re.search(r"cross-reference target not found: '([^']+)'", line)
        if doc and doc.group(1) not in NO_SOLUTION_PAGES and (built_site / f"{doc.group(1)}.html").is_file():
            continue
        if label and f'id="{label.group(1)}"' in elsewhere:
            continue
        bad.append(line)
    assert not bad, "the build without solutions warns of more than links into the pages left out:\n" + "\n".join(bad)
    for nb_path in (ROOT / f"{page}.ipynb" for page in NO_SOLUTION_PAGES):
        nb = nbformat.read(nb_path, as_version=4)
        rel = nb_path.relative_to(ROOT).with_suffix(".html")
        with_solutions, without = _page_text(built_site / rel), _page_text(out / rel)
        html = (out / rel).read_text(encoding="utf8")
        for ex in find_exercises(nb, nb_path):
            assert f'id="{ex.label}"' in html, f"{rel}: exercise {ex.label} is missing without solutions"
            stub = {ln.strip() for ln in nb.cells[ex.stub].source.splitlines()}
            for index in ex.solution_cells:
                for line in nb.cells[index].source.splitlines():
                    line = line.strip()
                    if len(line) >= 16 and line not in stub:  # a line only the solution has
                        assert line in with_solutions, f"{rel}: {line!r} should be on the full site"
                        assert line not in without, f"{rel}: solution line {line!r} is on the site without solutions"
        assert 'class="solution' not in html, f"{rel}: a solution box is on the site without solutions"


# --------------------------------------------------------------------------- internal links


_HREF = re.compile(r'<a\b[^>]*\bhref="([^"]+)"', re.I)
_ID = re.compile(r'\bid="([^"]+)"')


def broken_internal_links(site: Path) -> list[str]:
    """Every ``<a href>`` of the built site that points into the site at a page or an anchor that
    does not exist, as ``"page -> href"``. Paths are joined as strings (no file-system call per link)."""
    import os
    from urllib.parse import unquote, urlsplit

    root = str(site.resolve())
    pages = {str(p.resolve()): p.read_text(encoding="utf-8", errors="replace") for p in site.rglob("*.html")
             if "_static" not in p.parts and "_sources" not in p.parts}
    files = {str(p.resolve()) for p in site.rglob("*") if p.is_file()}
    ids: dict[str, set[str]] = {}
    broken = []
    for page, html in pages.items():
        here = os.path.dirname(page)
        for href in set(_HREF.findall(html)):
            parts = urlsplit(html_lib.unescape(href))
            if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
                continue
            target = os.path.normpath(os.path.join(here, unquote(parts.path))) if parts.path else page
            if target not in files and os.path.join(target, "index.html") in files:
                target = os.path.join(target, "index.html")
            where = f"{os.path.relpath(page, root)} -> {href}"
            if target not in files or (target.endswith(".html") and target not in pages):
                broken.append(where)
            elif parts.fragment and target.endswith(".html"):
                known = ids.get(target)
                if known is None:
                    known = ids[target] = set(_ID.findall(pages[target]))
                if unquote(parts.fragment) not in known:
                    broken.append(where)
    return sorted(broken)


def test_every_internal_link_and_anchor_leads_somewhere(built_site: Path) -> None:
    broken = broken_internal_links(built_site)
    assert not broken, f"{len(broken)} links into the site lead nowhere, e.g.:\n" + "\n".join(broken[:15])


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<h1 id="top">A</h1><a href="b.html#there">x</a><a href="#top">y</a>'
                                     '<a href="gone.html">z</a><a href="b.html#nowhere">w</a><a href="https://x.org/#q">e</a>')
    (tmp_path / "b.html").write_text('<p id="there">B</p>')
    assert broken_internal_links(tmp_path) == ["a.html -> b.html#nowhere", "a.html -> gone.html"]
