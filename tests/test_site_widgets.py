"""The live widgets on the built website, clicked in a real browser, against PyTorch.

On the pages of chapters 0, 2 and 6 (and on a page made here for the organism, which
no chapter's widget uses), headless chromium moves a fixed set of controls of each
widget. After every move the test waits until the widget has drawn its new state and
compares what the page shows with headlab's PyTorch values for the same settings:
the temperature row and its entropy with numpy; every head's pattern with
HeadCountPatterns; the loss per text (to 1e-4) and the top-5 next tokens before and
after with LiveAblation. On chapter 6's second widget (``ioi-gpt``) the reader's typed lines
``text | IO | S`` show logit(IO) - logit(S), compared to 1e-4 with LiveAblation and, under zero
ablation, with the indirect-object chapter's own metric (deviating.analysis.ioi.logit_diffs); a
bad line and a candidate that is not one token show Python's message. It asserts that every move changes what is shown, that no
console error, failed request or request to another host happened, and reports the
browser's latency per move (``performance.now()`` from the click to the drawn state;
p50/p95 per widget, never asserted). Screenshots of each widget at 1280 and 390 px go
to ``_build/screenshots-widgets/``.

Runs after the site build (shared with test_site.py); about a minute for the clicks.
"""

from __future__ import annotations

import functools
import html as html_lib
import http.server
import json
import re
import shutil
import statistics
import threading
from pathlib import Path

import numpy as np
import pytest

import headlab
from conftest import ROOT
from site_build import SITE, build_site_once
from test_site import CHROMIUM, CHROMIUM_ARGS, WIDGET_STATE, _need_browser  # noqa: PLC2701 (shared helper)

SHOTS = ROOT / "_build" / "screenshots-widgets"  # test_site.py empties _build/screenshots/
PAGES = {"temperature": "chapters/00_how_to_use/how_to_use.html",
         "heads": "chapters/02_multi_head/02_multi_head.html",
         "ablation": "chapters/06_importance/06_importance.html"}
LATENCIES: dict[str, list[float]] = {}
# 64 tokens for the Brown models' tokenizer, <|endoftext|> included (checked in the test)
ENGLISH_64 = ("The committee said on Friday that the new bridge across the river would be finished before "
              "the winter, and the mayor said that the city would pay for the rest of the road to the old "
              "school by the lake")
WEIGHT: dict[str, dict[str, int]] = {}  # page -> bytes loaded at first and after the moves

# click(root, selector) -> ms until the widget drew a new state; -1 if it never did
CLICK_JS = """async ([index, selector, value]) => {
  const root = document.querySelectorAll('.hl-widget')[index];
  const before = Number(root.dataset.renders || 0);
  const target = root.querySelector(selector);
  if (!target) return {error: 'no ' + selector};
  const t0 = performance.now();
  if (value === null) target.click();
  else { target.value = value; target.dispatchEvent(new Event(target.type === 'range' ? 'input' : 'change')); }
  while (Number(root.dataset.renders || 0) === before) {
    await new Promise((ok) => setTimeout(ok, 0));
    if (performance.now() - t0 > 60000) return {error: 'no new state within 60 s'};
  }
  return {ms: performance.now() - t0};
}"""
VIEW_JS = """(index) => {
  const root = document.querySelectorAll('.hl-widget')[index];
  const v = root.__headlabView;
  const cells = (sel) => Array.from(root.querySelectorAll(sel)).map((td) => Number(td.dataset.value));
  return {view: v, text: root.innerText,
    bars: cells('.hl-bar'), entropy: Number((root.querySelector('.hl-title') || {dataset: {}}).dataset.entropy),
    clean: cells('.hl-losses tr[data-text] td:nth-child(2)'), ablated: cells('.hl-losses tr[data-text] td:nth-child(3)'),
    contrast_clean: cells('.hl-contrast tr[data-text] td:nth-child(3)'),
    contrast: cells('.hl-contrast tr[data-text] td:nth-child(4)'),
    error: (root.querySelector('.hl-error') || {}).textContent || null,
    top: Array.from(root.querySelectorAll('table[data-top="clean"] tr[data-token]')).map((r) => r.dataset.token),
    top_ablated: Array.from(root.querySelectorAll('table[data-top="ablated"] tr[data-token]')).map((r) => r.dataset.token),
    canvases: root.querySelectorAll('canvas.hl-pattern').length};
}"""


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002, ANN001, ANN002
        pass


@pytest.fixture(scope="module")
def browser_page():
    """``open(site, path) -> (page, problems)``: pages of a served folder in chromium;
    ``problems`` collects console errors, failed requests and requests to other hosts."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    servers = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)

        def open_page(site: Path, path: str, width: int = 1280):
            if site not in servers:
                server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                         functools.partial(_Handler, directory=str(site)))
                threading.Thread(target=server.serve_forever, daemon=True).start()
                servers[site] = server
            base = f"http://127.0.0.1:{servers[site].server_address[1]}/"
            problems: list[str] = []
            context = browser.new_context(viewport={"width": width, "height": 900})

            def route(route_, request):  # noqa: ANN001
                if request.url.startswith(base) or request.url.startswith("data:"):
                    route_.continue_()
                else:
                    problems.append(f"request to another host: {request.url}")
                    route_.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: problems.append(f"console error: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda err: problems.append(f"uncaught: {err}"))
            page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} ({r.failure})"))
            page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
            received = [0]  # bytes the page loaded (the server sends Content-Length)
            page.on("response", lambda r: received.__setitem__(0, received[0] + int(r.headers.get("content-length", 0))))
            page.goto(base + path, wait_until="load", timeout=60_000)
            page.wait_for_selector(".hl-widget[data-renders]", timeout=60_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            if width == 1280:
                WEIGHT[path] = {"load": received[0]}
                page.on("close", lambda _: WEIGHT[path].setdefault("after moves", received[0]))
            return page, problems

        yield open_page
        browser.close()
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site() -> Path:
    build_site_once()
    return SITE


def widget_states(html: str) -> list[dict]:
    """The embedded state of every live widget of a page (headlab's and the book's), in page order."""
    match = re.search(r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', html, re.S)
    assert match, f"no {WIDGET_STATE} on the page"
    state = json.loads(match.group(1))["state"]
    views = re.findall(r'<script type="application/vnd\.jupyter\.widget-view\+json">(.*?)</script>', html, re.S)
    ids = [json.loads(html_lib.unescape(v))["model_id"] for v in views]
    return [state[i]["state"] for i in ids
            if str(state[i]["state"].get("_anywidget_id", "")).startswith(("headlab.", "deviating."))]


def click(page, name: str, selector: str, value=None, index: int = 0) -> None:
    result = page.evaluate(CLICK_JS, [index, selector, value])
    assert "error" not in result, f"{name}: {selector}: {result.get('error')}"
    LATENCIES.setdefault(name, []).append(result["ms"])


def shoot(page, name: str, index: int = 0) -> None:
    """The widget as the page lays it out (a clip of the full page: the theme's sticky
    header would cover an element screenshot of a widget taller than the window)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    box = page.evaluate("""(i) => { const r = document.querySelectorAll('.hl-widget')[i].getBoundingClientRect();
        return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; }""", index)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, clip=box)


def check_narrow(browser_page, site_dir: Path, path: str, name: str) -> None:
    """At 390 px the widget fits the page: nothing wider than the viewport, its tables included."""
    page, problems = browser_page(site_dir, path, width=390)
    widest = page.evaluate("""() => Math.max(...Array.from(document.querySelectorAll('.hl-widget, .hl-widget table'))
        .map((el) => el.getBoundingClientRect().right))""")
    shoot(page, f"{name}-390px")
    page.context.close()
    assert not problems, "\n".join(problems)
    assert widest <= 390, f"{name}: the widget reaches {widest:.0f} px on a 390 px screen"


def pytorch_ablation(hm, texts, ablated, mode, selected, candidates=None):
    from headlab.viz.live import candidate_token
    from headlab.viz.widgets import LiveAblation

    pairs = [tuple(candidate_token(w, hm.tokenizer) for w in c) if c else None for c in candidates or [[]] * len(texts)]
    return LiveAblation(hm, texts, contrast=pairs).view([tuple(h) for h in ablated], mode, tuple(selected))


def compare_ablation(name, shown, hm, texts, ablated, mode, selected, candidates=None) -> None:
    """The page shows PyTorch's view of ``texts`` (lines ``text | A | B`` when ``candidates``)."""
    want = pytorch_ablation(hm, texts, ablated, mode, selected, candidates)
    what = f"{name}: ablated {ablated} ({mode})"
    assert shown["view"]["ablated"] == ablated and shown["view"]["mode"] == mode, what
    assert shown["view"]["texts"] == texts and shown["view"].get("candidates", [[]] * len(texts)) == (
        candidates or [[]] * len(texts)), what
    named = [i for i, c in enumerate(candidates or []) if c]
    assert len(shown["contrast"]) == len(shown["contrast_clean"]) == len(named), what
    if named:
        np.testing.assert_allclose(shown["contrast_clean"], [want.contrast_clean[i] for i in named], atol=1e-4, rtol=0,
                                   err_msg=what)
        np.testing.assert_allclose(shown["contrast"], [want.contrast[i] for i in named], atol=1e-4, rtol=0, err_msg=what)
    np.testing.assert_allclose(shown["clean"], want.clean.numpy(), atol=1e-4, rtol=0, err_msg=what)
    np.testing.assert_allclose(shown["ablated"], want.metric.numpy(), atol=1e-4, rtol=0, err_msg=what)
    assert shown["top"] == [t for t, *_ in want.top], what
    assert shown["top_ablated"] == [t for t, *_ in want.top_ablated], what
    np.testing.assert_allclose(np.array(shown["view"]["pattern"]), want.pattern.numpy(), atol=1e-4, err_msg=what)


# --------------------------------------------------------------------------- the three chapters


def test_temperature_widget(site, browser_page):
    (state,) = widget_states((site / PAGES["temperature"]).read_text(encoding="utf8"))
    page, problems = browser_page(site, PAGES["temperature"])
    shown_before = page.evaluate(VIEW_JS, 0)
    scores = np.array(state["scores"])
    for t in ["0.3", "2.5", "5", "0.1", "1"]:
        click(page, "temperature", "input[type=range]", t)
        shown = page.evaluate(VIEW_JS, 0)
        w = np.exp(scores / float(t) - (scores / float(t)).max())
        w /= w.sum()
        np.testing.assert_allclose(shown["bars"], w, atol=1e-6, err_msg=f"T = {t}")
        assert shown["entropy"] == pytest.approx(float(-(w[w > 0] * np.log(w[w > 0])).sum()), abs=1e-6)
        assert f"T = {float(t):.2f}" in shown["text"]
        if t == "0.3":
            assert shown["bars"] != shown_before["bars"], "the slider moved but the bars did not"
    shoot(page, "temperature-1280px")
    page.context.close()
    assert not problems, "\n".join(problems)
    check_narrow(browser_page, site, PAGES["temperature"], "temperature")


def test_heads_widget(site, browser_page):
    from deviating.figures.widgets import HeadCountPatterns

    (state,) = widget_states((site / PAGES["heads"]).read_text(encoding="utf8"))
    core = HeadCountPatterns({h: headlab.load(f"heads-{h}") for h in state["head_counts"]})
    page, problems = browser_page(site, PAGES["heads"])
    text, n_heads, layer = state["text"], state["n_heads"], state["layer"]
    typed = "the wise coin that blamed some wives is loud ."
    moves = [('button[data-value="2"]', None, "n_heads", 2), ('.hl-row[aria-label=layer] button[data-value="0"]', None, "layer", 0),
             ('button[data-value="1"]', None, "n_heads", 1), ("input[type=text]", typed, "text", typed),
             ('button[data-value="4"]', None, "n_heads", 4), ('.hl-row[aria-label=layer] button[data-value="1"]', None, "layer", 1),
             ('button[data-value="8"]', None, "n_heads", 8)]
    for selector, value, key, new in moves:
        click(page, "heads", selector, value)
        n_heads, layer, text = (new if key == "n_heads" else n_heads, new if key == "layer" else layer,
                                new if key == "text" else text)
        shown = page.evaluate(VIEW_JS, 0)
        want = core.view(n_heads, text, layer)
        what = f"{n_heads} heads, layer {layer}, {text!r}"
        assert shown["view"]["error"] is None, what
        assert shown["view"]["tokens"] == want.tokens and shown["canvases"] == n_heads, what
        np.testing.assert_allclose(np.array(shown["view"]["pattern"]), want.pattern.numpy(), atol=1e-4, err_msg=what)
        assert f"{n_heads} head{'s' if n_heads > 1 else ''} of d_head = {want.d_head}" in shown["text"], what
    shoot(page, "heads-1280px")
    click(page, "heads", "input[type=text]", "the xylophones sleep .")
    message = page.evaluate(VIEW_JS, 0)["text"]
    assert "not in the vocabulary: 'xylophones'" in message, message[:300]
    page.context.close()
    assert not problems, "\n".join(problems)
    check_narrow(browser_page, site, PAGES["heads"], "heads")


def test_ablation_widget(site, browser_page):
    """Chapter 6's two live-ablation widgets, brown-gpt's and then ioi-gpt's (:func:`check_ioi_widget`)."""
    state, ioi_state = widget_states((site / PAGES["ablation"]).read_text(encoding="utf8"))
    assert state["onnx"].startswith("brown-gpt-"), "chapter 6's first live widget runs brown-gpt"
    name = re.match(r"(.+)-[0-9a-f]{12}-v\d+\.onnx$", state["onnx"]).group(1)
    hm = headlab.load(name)
    page, problems = browser_page(site, PAGES["ablation"])
    texts, ablated, mode, selected = state["texts"], state["ablated"], state["mode"], state["selected"]
    compare_ablation("ablation (saved state)", page.evaluate(VIEW_JS, 0), hm, texts, ablated, mode, selected)
    last = hm.n_layers - 1
    other = [last, 0] if selected != [last, 0] else [last, 1]
    moves = [("toggle", [last, 1]), ("mode", "mean"), ("toggle", [0, hm.n_heads - 1]), ("select", other),
             ("toggle", [last, 1]), ("mode", "zero"), ("toggle", [0, 0]), ("toggle", [0, 0])]
    changed = False
    for kind, arg in moves:
        before = page.evaluate(VIEW_JS, 0)
        if kind == "toggle":
            click(page, "ablation", f'button[data-head="{arg[0]}.{arg[1]}"]')
            ablated = sorted([h for h in ablated if h != arg] + ([] if arg in ablated else [arg]))
        elif kind == "mode":
            click(page, "ablation", f'button[data-mode="{arg}"]')
            mode = arg
        else:
            click(page, "ablation", "select", f"{arg[0]}.{arg[1]}")
            selected = arg
        shown = page.evaluate(VIEW_JS, 0)
        compare_ablation("ablation", shown, hm, texts, ablated, mode, selected)
        changed |= shown["ablated"] != before["ablated"]
    assert changed, "no click changed the losses shown"
    shoot(page, "ablation-1280px")
    if state["tokenizer"].get("kind") == "bpe":  # a model of English: the reader types sentences
        typed = [ENGLISH_64, "Where did the old man go after the"]
        click(page, "ablation", "textarea", "\n".join(typed))
        texts = typed
        assert len(hm.tokenize(typed[:1])["input_ids"][0]) == 64
        shown = page.evaluate(VIEW_JS, 0)
        compare_ablation("ablation, typed English", shown, hm, texts, ablated, mode, selected)
        assert "Ġ" not in shown["text"], "a BPE token is shown as its bytes, not as text"
        for arg in ([0, 0], [last, 1], [0, 0], [last, 1]) * 3:  # the latency of a click on 64 tokens
            click(page, "ablation, 64 tokens", f'button[data-head="{arg[0]}.{arg[1]}"]')
            ablated = sorted([h for h in ablated if h != arg] + ([] if arg in ablated else [arg]))
        compare_ablation("ablation, typed English", page.evaluate(VIEW_JS, 0), hm, texts, ablated, mode, selected)
        shoot(page, "ablation-english-1280px")
    check_ioi_widget(page, ioi_state)
    page.context.close()
    assert not problems, "\n".join(problems)
    check_narrow(browser_page, site, PAGES["ablation"], "ablation")


def check_ioi_widget(page, state: dict) -> None:
    """Chapter 6's second widget (on the page test_ablation_widget opened): ioi-gpt on indirect-object
    sentences, each line ``text | IO | S``. The reader toggles heads, switches the mode, types new
    sentences and two bad lines."""
    from deviating.analysis.ioi import evaluation_prompts, logit_diffs
    from deviating.experiments.ioi_circuit import load_results

    from headlab.viz.live import parse_line

    hm = headlab.load(re.match(r"(.+)-[0-9a-f]{12}-v\d+\.onnx$", state["onnx"]).group(1))
    assert hm.name == "ioi-gpt" and hm.provenance["seed"] == 0
    movers = load_results()["models"]["ioi-gpt"]["roles"]["name mover"]
    assert [f"{l}.{h}" for l, h in state["ablated"]] == sorted(movers) and movers, "preset: seed 0's name movers"

    def lines_of(typed):
        parsed = [parse_line(x) for x in typed]
        return [t for t, _ in parsed], [c for _, c in parsed]

    texts, candidates = lines_of(state["texts"])
    assert len(texts) == 2 and all(len(c) == 2 for c in candidates)
    ablated, mode, selected = state["ablated"], state["mode"], state["selected"]
    shown = page.evaluate(VIEW_JS, 1)
    compare_ablation("ioi (saved state)", shown, hm, texts, ablated, mode, selected, candidates)
    # the saved first view is the chapter's metric on the generator's prompts (zero ablation)
    held, _ = evaluation_prompts(hm, 2)
    assert [x.text for x in held.sentences] == texts and [[x.io, x.s] for x in held.sentences] == candidates
    np.testing.assert_allclose(shown["contrast"], logit_diffs(hm, held, [tuple(h) for h in ablated]).numpy(), atol=1e-4)
    np.testing.assert_allclose(shown["contrast_clean"], logit_diffs(hm, held).numpy(), atol=1e-4)
    last = hm.n_layers - 1
    moves = [("toggle", ablated[0]), ("toggle", [last - 1, 2]), ("mode", "mean"), ("select", [last - 1, 2]),
             ("type", None), ("toggle", [0, 1]), ("mode", "zero"), ("toggle", [last, 1])]
    typed_prompts, _ = evaluation_prompts(hm, 2, seed=7)
    typed = [f"{x.text} | {x.io} | {x.s}" for x in typed_prompts.sentences] + [
        "When Mary and John went to the store, John gave a drink to | Mary | John", "The jury said that the"]
    for kind, arg in moves:
        before = page.evaluate(VIEW_JS, 1)
        if kind == "toggle":
            click(page, "ioi", f'button[data-head="{arg[0]}.{arg[1]}"]', index=1)
            ablated = sorted([h for h in ablated if h != arg] + ([] if arg in ablated else [arg]))
        elif kind == "mode":
            click(page, "ioi", f'button[data-mode="{arg}"]', index=1)
            mode = arg
        elif kind == "select":
            click(page, "ioi", "select", f"{arg[0]}.{arg[1]}", index=1)
            selected = arg
        else:
            click(page, "ioi", "textarea", "\n".join(typed), index=1)
            texts, candidates = lines_of(typed)
        shown = page.evaluate(VIEW_JS, 1)
        assert shown["error"] is None, shown["error"]
        compare_ablation(f"ioi, {kind} {arg}", shown, hm, texts, ablated, mode, selected, candidates)
        if kind == "toggle":
            assert shown["contrast"] != before["contrast"], f"toggling {arg} did not move the logit difference"
    # zero ablation: the chapter's metric on the typed prompts, computed by deviating.analysis.ioi
    np.testing.assert_allclose(page.evaluate(VIEW_JS, 1)["contrast"][:2],
                               logit_diffs(hm, typed_prompts, [tuple(h) for h in ablated]).numpy(), atol=1e-4)
    shoot(page, "ioi-1280px", index=1)
    for bad in ("The jury gave a drink to | Mary", "Then Mary gave a drink to | Zorblax | Mary"):
        click(page, "ioi", "textarea", bad, index=1)
        with pytest.raises(ValueError) as err:  # what the widget says with a kernel
            bad_texts, bad_candidates = lines_of([bad])
            pytorch_ablation(hm, bad_texts, ablated, mode, selected, bad_candidates)
        assert page.evaluate(VIEW_JS, 1)["error"] == str(err.value), bad


def test_organism_ablation(site, browser_page, tmp_path):
    """The organism (4 layers x 8 heads, 813 words), on a page made here from the site's own
    assets: no chapter shows it in a widget, but the latency goal is stated for it."""
    import site_widgets

    from headlab.viz.live import ablation_widget

    texts = ["the loud hunter that the prince taught is small . he sleeps . the loud hunter smiles .",
             "some lions smile . behind the hunters , the lions thank the dolphin ."]
    hm = headlab.load("organism")
    widget = ablation_widget(hm, texts, preset=[(2, 3)], selected=(3, 4))
    # the site's require.js, widget manager, anywidget and onnxruntime-web; this page's model
    static = tmp_path / "_static"
    (static / "headlab" / "onnx").mkdir(parents=True)
    (static / "vendored").symlink_to(site / "_static" / "vendored")
    for part in ("anywidget", "ort"):
        (static / "headlab" / part).symlink_to(site / "_static" / "headlab" / part)
    shutil.copyfile(site_widgets.export(widget.onnx), static / "headlab" / "onnx" / widget.onnx)
    site_widgets.write_page(tmp_path / "organism.html", [widget], "organism")
    page, problems = browser_page(tmp_path, "organism.html")
    ablated, mode = [[2, 3]], "zero"
    for i, (l, h) in enumerate([(1, 0), (3, 4), (2, 3), (0, 5), (1, 0), (3, 1)] * 2):
        if i == 6:
            click(page, "organism", 'button[data-mode="mean"]')
            mode = "mean"
        click(page, "organism", f'button[data-head="{l}.{h}"]')
        ablated = sorted([x for x in ablated if x != [l, h]] + ([] if [l, h] in ablated else [[l, h]]))
        compare_ablation("organism", page.evaluate(VIEW_JS, 0), hm, texts, ablated, mode, [3, 4])
    page.context.close()
    assert not problems, "\n".join(problems)


def test_report_latency(record_property):
    """p50/p95 of the browser's latency per move, per widget (reported, not asserted; the
    first move of a page includes loading onnxruntime-web and the model)."""
    if not LATENCIES:
        pytest.skip("no widget was clicked")
    parts = []
    for name, ms in LATENCIES.items():
        warm = ms[1:] if len(ms) > 1 else ms
        q = statistics.quantiles(warm, n=20, method="inclusive") if len(warm) > 1 else [warm[0]] * 19
        parts.append(f"{name}: first {ms[0]:.0f} ms, then p50 {statistics.median(warm):.1f} ms, "
                     f"p95 {q[18]:.1f} ms over {len(warm)} moves")
    weights = "; ".join(f"{path}: {w['load'] / 1e6:.2f} MB loaded, {w.get('after moves', 0) / 1e6:.2f} MB after the moves"
                        for path, w in WEIGHT.items() if path.startswith("chapters"))
    summary = "live widgets in chromium (click to drawn state): " + "; ".join(parts) + ". Page weight: " + weights
    print(summary)
    record_property("summary", summary)
    SHOTS.mkdir(parents=True, exist_ok=True)
    (SHOTS / "latency.txt").write_text(summary + "\n" + json.dumps({"ms": LATENCIES, "bytes": WEIGHT}) + "\n")
