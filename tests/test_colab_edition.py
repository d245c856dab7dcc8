"""The notebooks people open outside the website (scripts/colab_edition.py, plain_markdown.py).

Every chapter's Colab/JupyterLab edition is scanned: no MyST syntax left in its markdown (cells
and markdown outputs), every solution folded for both front-ends, the install cell pinned to the
commit, every other code cell the chapter's own. The MyST-to-Markdown rewriting is tested on
small inputs, and the site's Colab button is checked to open the edition's branch.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from types import SimpleNamespace

import nbformat
import pytest

from conftest import ROOT, chapter_notebooks
from build_book import colab_button_to_edition
from colab_edition import BRANCH, book_links, colab_notebook, pin_install, write_edition
from make_student import find_exercises
from plain_markdown import EXTERNAL, MD_LINK, Links, _prose as _prose_lines, glued_values, plain_markdown, raw_syntax

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
INSTALL = f'"headlab[minilm] @ git+https://github.com/deviating-attention/deviating-attention@{COMMIT}"'


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("colab")
    written = write_edition(out, COMMIT)
    return out, written


def test_every_chapter_in_the_toc_has_an_edition(edition) -> None:
    out, written = edition
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    expected = [p for p in chapter_notebooks() if str(p.relative_to(ROOT).with_suffix("").as_posix()) in toc]
    assert expected and sorted(p.relative_to(out) for p in written) == sorted(p.relative_to(ROOT) for p in expected)


@pytest.mark.parametrize("nb_path", chapter_notebooks(), ids=lambda p: p.stem)
def test_the_edition_reads_right_outside_the_site(nb_path, edition) -> None:
    out, _ = edition
    target = out / nb_path.relative_to(ROOT)
    if not target.is_file():
        pytest.skip(f"{nb_path.name} is not in _toc.yml")
    original = nbformat.read(nb_path, as_version=4)
    nb = nbformat.read(target, as_version=4)

    # no raw directive, role, option or target, in the markdown cells nor in markdown outputs
    texts = [c.source for c in nb.cells if c.cell_type == "markdown"]
    texts += ["".join(o.get("data", {}).get("text/markdown", "")) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs]
    raw = [r for t in texts for r in raw_syntax(t)]
    assert not raw, f"MyST syntax visible outside the site: {raw[:5]}"

    # every link leads somewhere outside the site too: the website, the repository, the web
    internal = [m[0] for t in texts for line in _prose_lines(t) for m in MD_LINK.finditer(line)
                if not EXTERNAL.match(m["target"])]
    assert not internal, f"{len(internal)} links to site-internal targets, e.g. {internal[:3]}"
    # every glued value shows its value, as on the site, never the variable's name
    from myst_nb.core.variables import format_plain_text

    glue, shown = glued_values(original), "\n".join(texts)
    for c in original.cells:
        for key, _, fmt in re.findall(r"\{glue:text\}`([^`:]+)(:([^`]*))?`", c.source if c.cell_type == "markdown" else ""):
            assert key in glue, f"{nb_path.name}: {{glue:text}}`{key}` has no stored value"
            assert format_plain_text(glue[key], fmt) in shown

    # every solution folded (Colab: a form with a title; JupyterLab / Notebook 7: source hidden)
    exercises = find_exercises(original, nb_path)
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    assert len(solutions) == sum(len(ex.solution_cells) for ex in exercises)
    for cell in solutions:
        assert cell.source.startswith("# @title Solution: "), cell.source[:80]
        assert cell.metadata["cellView"] == "form" and cell.metadata["jupyter"]["source_hidden"] is True
    for ex in exercises:
        assert any(t.startswith(f"### Exercise: {ex.title} (`{ex.label}`)") for t in texts), ex.label

    # the install cell pinned; every other code cell exactly the chapter's (solutions under their title)
    before = [c for c in original.cells if c.cell_type == "code"]
    after = [c for c in nb.cells if c.cell_type == "code"]
    assert len(before) == len(after)
    installs = [c for c in after if "google.colab" in c.source]
    assert len(installs) == 1 and INSTALL in installs[0].source, installs[0].source if installs else "no install cell"
    for b, a in zip(before, after):
        source = a.source.split("\n", 1)[1] if a.source.startswith("# @title") else a.source
        if "google.colab" not in b.source:
            assert source == b.source and _without_markdown(a.outputs) == _without_markdown(b.outputs)
    assert nb.metadata["headlab"]["commit"] == COMMIT


def _without_markdown(outputs: list) -> list:
    """The outputs with their text/markdown left out (the edition rewrites that: it is MyST)."""
    return [{**o, "data": {k: v for k, v in o.get("data", {}).items() if k != "text/markdown"}} if "data" in o else o
            for o in outputs]


# --------------------------------------------------------------------------- the rewriting


def _links(**kw) -> Links:
    return Links(notebook=PurePosixPath("chapters/09_checklist/09_checklist.ipynb"), root=ROOT,
                 site_url="https://example.org/book/", repo_url="https://github.com/o/r", commit=COMMIT, **kw)


def test_admonitions_become_quotes_or_details() -> None:
    text = "```{admonition} You will learn\n:class: tip\n\n- one\n- two\n```\nAfter."
    assert plain_markdown(text, _links()) == "> **You will learn**\n>\n> - one\n> - two\nAfter."
    text = ":::{note}\nA *note*.\n:::"
    assert plain_markdown(text, _links()) == "> **Note**\n>\n> A *note*."
    text = "```{admonition} Why?\n:class: dropdown\nBecause.\n```"
    assert plain_markdown(text, _links()) == "<details>\n<summary><b>Why?</b></summary>\n\nBecause.\n\n</details>"


def test_a_captioned_table_keeps_its_caption_and_rows() -> None:
    text = "```{table} Loss per seed\n:name: tbl-loss\n\n| seed | loss |\n|---|---|\n| 0 | 3.1 |\n```"
    assert plain_markdown(text, _links()) == "**Loss per seed**\n\n| seed | loss |\n|---|---|\n| 0 | 3.1 |"


def test_literalinclude_inlines_the_code_it_names() -> None:
    text = "Read it:\n\n```{literalinclude} ../../lib/headlab/report/checks.py\n:pyobject: keep_section\n```"
    got = plain_markdown(text, _links())
    source = (ROOT / "lib/headlab/report/checks.py").read_text(encoding="utf-8")
    first = next(line for line in source.splitlines() if line.startswith("def keep_section("))
    assert f"blob/{COMMIT}/lib/headlab/report/checks.py" in got and "```python\n" + first in got
    assert got.rstrip().endswith("```") and not raw_syntax(got)
    with pytest.raises(ValueError, match="no file"):
        plain_markdown("```{literalinclude} ../nowhere.py\n```", _links())


def test_roles_and_targets_become_text_and_links() -> None:
    links = _links(labels={"sec-keep": ("chapters/09_checklist/09_checklist", "sec-keep")},
                   titles={"chapters/05_induction/05_induction": "Induction heads"}, glossary="chapters/glossary")
    text = ("(sec-keep)=\n## Keep\n\nSee {doc}`../05_induction/05_induction`, {ref}`this section <sec-keep>`, "
            "an {term}`induction head`, {func}`~headlab.report.checks.keep_section`, {math}`\\sqrt{d}` and "
            "{ref}`unknown-label`.\n% a comment\n```python\n{note}`kept` in code\n```")
    got = plain_markdown(text, links)
    assert got == ("## Keep\n\nSee [Induction heads](https://example.org/book/chapters/05_induction/05_induction.html), "
                   "[this section](https://example.org/book/chapters/09_checklist/09_checklist.html#sec-keep), an "
                   "[induction head](https://example.org/book/chapters/glossary.html#term-induction-head), "
                   "`keep_section`, $\\sqrt{d}$ and unknown-label.\n```python\n{note}`kept` in code\n```")


def test_glue_shows_the_stored_value_as_the_site_does() -> None:
    links = _links(glue={"loss": "4.23456", "share": "0.375", "name": "'layer 0'", "n": "12"})
    got = plain_markdown("Loss {glue:text}`loss:.2f`, {glue:text}`share:.0%` of heads in {glue:text}`name`, "
                         "{glue:text}`n` of them.", links)
    assert got == "Loss 4.23, 38% of heads in layer 0, 12 of them."
    with pytest.raises(ValueError, match="no value stored"):
        plain_markdown("{glue:text}`missing:.2f`", links)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("glue('x', 3)", outputs=[nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": "3"},
        metadata={"scrapbook": {"name": "x", "mime_prefix": "application/papermill.record/"}})])])
    assert glued_values(nb) == {"x": "3"}


def test_links_to_the_book_point_to_the_website() -> None:
    links = _links(labels={"gl-induction-head": ("chapters/glossary", "gl-induction-head")})
    text = ("An [induction head](gl-induction-head), [below](#sec-x), [chapter 5](../05_induction/05_induction.ipynb#top), "
            "[the claims](../claims_and_sources.md), [the code](../../lib/deviating/ledger.py), "
            "[a paper](https://arxiv.org/abs/1) and ![a figure](fig.png).")
    got = plain_markdown(text, links)
    site, blob = "https://example.org/book/", f"https://github.com/o/r/blob/{COMMIT}/"
    assert got == (f"An [induction head]({site}chapters/glossary.html#gl-induction-head), "
                   f"[below]({site}chapters/09_checklist/09_checklist.html#sec-x), "
                   f"[chapter 5]({site}chapters/05_induction/05_induction.html#top), "
                   f"[the claims]({site}chapters/claims_and_sources.html), [the code]({blob}lib/deviating/ledger.py), "
                   f"[a paper](https://arxiv.org/abs/1) and "
                   f"![a figure](https://raw.githubusercontent.com/o/r/{COMMIT}/chapters/09_checklist/fig.png).")


def test_exercise_markers_and_unknown_directives() -> None:
    start = "```{exercise-start} Double it ★☆☆\n:label: ex-09-double\n```\n\nReturn twice x."
    assert plain_markdown(start, _links()) == "### Exercise: Double it ★☆☆ (`ex-09-double`)\n\n\nReturn twice x."
    assert plain_markdown("```{exercise-end}\n```", _links()) == ""
    assert plain_markdown("```{solution-start} ex-09-double\n:class: dropdown\n```", _links(), solution_note="S") == "S"
    got = plain_markdown("````{card} A title\n:link: x\n```{math}\n:label: eq-1\na = b\n```\n````", _links())
    assert got == "> **card: A title**\n>\n> $$\n> a = b\n> $$" and not raw_syntax(got)


def test_the_scan_finds_what_it_must() -> None:
    assert raw_syntax("```{note}\nx\n```") and raw_syntax("(lbl)=\n# T") and raw_syntax("see {doc}`x`")
    assert raw_syntax(":label: ex-00-x")
    assert not raw_syntax("```python\n```{note}\n```") and not raw_syntax("a set `{a}` and `b`")


def test_pin_install_refuses_what_it_cannot_pin() -> None:
    source = '"headlab[minilm] @ git+https://github.com/o/r"'
    assert pin_install(source, "https://github.com/o/r", COMMIT, "x") == f'"headlab[minilm] @ git+https://github.com/o/r@{COMMIT}"'
    assert pin_install(source.replace('r"', 'r@main"'), "https://github.com/o/r", COMMIT, "x").endswith(f'@{COMMIT}"')
    with pytest.raises(ValueError, match="40 hexadecimal"):
        pin_install(source, "https://github.com/o/r", "main", "x")
    with pytest.raises(ValueError, match="exactly once"):
        pin_install('"headlab"', "https://github.com/o/r", COMMIT, "chapters/x.ipynb")


def test_a_chapter_without_its_install_cell_is_refused() -> None:
    path = ROOT / "chapters" / "00_how_to_use" / "how_to_use.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if "google.colab" not in c.source]
    with pytest.raises(ValueError, match="expected one Colab install cell"):
        colab_notebook(nb, book_links(path, COMMIT))


def test_the_colab_button_opens_the_edition_branch() -> None:
    url = "https://colab.research.google.com/github/o/r/blob/main/chapters/05_x/05_x.ipynb"
    context = {"header_buttons": [{"type": "group", "buttons": [
        {"text": "Colab", "url": url}, {"text": "Binder", "url": url}]}]}
    colab_button_to_edition(SimpleNamespace(config=SimpleNamespace(colab_branch=BRANCH)), "p", "t", context, None)
    colab, binder = context["header_buttons"][0]["buttons"]
    assert colab["url"] == f"https://colab.research.google.com/github/o/r/blob/{BRANCH}/chapters/05_x/05_x.ipynb"
    assert binder["url"] == url
    assert re.search(r"^\s*git push .* colab$", (ROOT / ".github/workflows/pages.yml").read_text(), re.M)
