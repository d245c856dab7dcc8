"""The two reference pages, chapters/claims_and_sources.md and chapters/glossary.md: every
claim of the ledger has its section and link target, every label is unique, every link
inside them resolves, and no jargon from the book's making remains.

(The book build resolves the ``{doc}`` links with ``-W -n``; this test needs no build.)
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import CHAPTERS, ROOT

from deviating.ledger import CLAIMS

PAGES = [CHAPTERS / "claims_and_sources.md", CHAPTERS / "glossary.md"]
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)
LINK = re.compile(r"\]\(([\w-]+)\)")  # [text](label): a link to a MyST target, not a URL or file
DOC = re.compile(r"\{doc\}`[^`<]*<?(/[^`>]+)>?`")


def _text(path):
    return path.read_text(encoding="utf-8")


def _labels() -> list[str]:
    return [label for page in PAGES for label in LABEL.findall(_text(page))]


def test_every_claim_has_a_section_and_a_link_target():
    text = _text(PAGES[0])
    for claim in CLAIMS:
        n = claim[1:]
        assert f"(claim-c{n})=" in text, f"no link target (claim-c{n})= for {claim}"
        assert re.search(rf"^### {claim}\. ", text, re.M), f"no section '### {claim}. ...' for {claim}"
    assert len(re.findall(r"^### C\d+\. ", text, re.M)) == len(CLAIMS)


def test_labels_are_unique_and_links_resolve():
    labels = _labels()
    dupes = {x for x in labels if labels.count(x) > 1}
    assert not dupes, f"labels defined twice: {sorted(dupes)}"
    known = set(labels)
    for page in PAGES:
        for target in LINK.findall(_text(page)):
            assert target in known, f"{page.name}: link to ({target}) which no page defines"


def test_every_bibliography_entry_is_cited_and_every_citation_listed():
    text = _text(PAGES[0])
    entries = {x for x in LABEL.findall(text) if x.startswith("bib-")}
    chapters = [json.dumps(json.loads(nb.read_text(encoding="utf-8"))["cells"]) for nb in CHAPTERS.rglob("*.ipynb")
                if ".ipynb_checkpoints" not in nb.parts]
    cited = {x for source in [_text(page) for page in PAGES] + chapters for x in LINK.findall(source)
             if x.startswith("bib-")}
    assert entries == cited, f"listed, never cited: {sorted(entries - cited)}; cited, not listed: {sorted(cited - entries)}"
    for entry in entries:  # every reference gives its year and an arXiv id or a URL
        para = text.split(f"({entry})=", 1)[1].split("\n\n", 1)[0]
        assert re.search(r"\(\d{4}\)", para) and ("arXiv:" in para or "https://" in para), para


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_doc_links_point_to_existing_chapters(page):
    for target in DOC.findall(_text(page)):
        matches = list(ROOT.glob(target.lstrip("/") + ".*"))
        assert matches, f"{page.name}: {{doc}} link to {target}, which is no file of the book"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_jargon_of_the_books_making(page):
    text = _text(page).lower()
    for phrase in ("the seeds", "seed text", "memo ", "memo.", "memo,"):
        assert phrase not in text, f"{page.name} says {phrase!r}: speak of common claims about heads and the papers"
