"""The claims page names the sections where each claim is measured: every section it quotes exists."""

from __future__ import annotations

import json
import re

from conftest import ROOT

CLAIMS_PAGE = ROOT / "chapters" / "claims_and_sources.md"
# {doc}`chapter 5 </chapters/05_x/05_x>` ("One section", "Another section")
POINTER = re.compile(r"\{doc\}`[^`<]*</(?P<doc>chapters/[^>]+)>`\s*\((?P<titles>\"[^)]*\")\)", re.S)


def headings(docname: str) -> set[str]:
    cells = json.loads((ROOT / f"{docname}.ipynb").read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return {re.sub(r"\s+", " ", h.strip()) for h in re.findall(r"^#{2,4}\s+(.+)$", text, re.M)}


def missing_sections(page: str) -> list[str]:
    out = []
    for m in POINTER.finditer(page):
        titles = [re.sub(r"\s+", " ", t) for t in re.findall(r"\"([^\"]+)\"", m["titles"])]
        have = headings(m["doc"])
        # a heading may carry the claims it measures after its title: "Averaging the heads (claim C12)"
        out += [f"{m['doc']}: \"{t}\"" for t in titles
                if not any(h == t or h.startswith((t + " (", t + ":")) for h in have)]
    return out


def test_every_quoted_section_exists():
    missing = missing_sections(CLAIMS_PAGE.read_text(encoding="utf-8"))
    assert not missing, "the claims page quotes sections that its chapters do not have:\n" + "\n".join(missing)


def test_the_pointer_scan_finds_a_missing_section():
    page = ('{doc}`chapter 5 </chapters/05_induction/05_induction>` ("Summary", "No such section")')
    assert missing_sections(page) == ['chapters/05_induction/05_induction: "No such section"']
