"""The claims ledger: every recorded verdict is valid and agrees with the table its chapter shows,
and the ledger page lists every claim and every recorded row (with any subset of chapters)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTERS, chapter_notebooks

from deviating.ledger_page import chapter_link, counts_markdown
from deviating.ledger import (CLAIMS, SCHEMA, Verdict, badge, claims_dir, disagreements,
                            load_all, markdown_table, model_key, summary)

CLAIMS_DIR = claims_dir()
LEDGER = CHAPTERS / "10_ledger" / "10_ledger.ipynb"
TABLE_HEADER = "| claim | verdict | measured | models |"
REPORT_CALL = re.compile(r"""report\(\s*["'](ch\d\d)["']""")
SKIP_TAG = "skip-execution"


def _claim_files() -> list[Path]:
    return sorted(CLAIMS_DIR.glob("*.json"))


def _markdown_outputs(cell) -> list[str]:
    return [out["data"]["text/markdown"] for out in cell.get("outputs", [])
            if "data" in out and "text/markdown" in out["data"]]


def _shown_tables(nb) -> dict[str, list[str]]:
    """chapter id -> the claims tables shown by the cells that call ``report("chNN", ...)``."""
    tables: dict[str, list[str]] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for chapter in REPORT_CALL.findall(cell.source):
            tables.setdefault(chapter, []).extend(
                text for text in _markdown_outputs(cell) if text.startswith(TABLE_HEADER))
    return tables


def _notebook_of(chapter: str) -> Path | None:
    number = chapter.removeprefix("ch")
    # a chapter may have sections (chapter 7 has two pages): the notebook that reports is the one
    found = [p for p in chapter_notebooks() if p.parent.name.startswith(f"{number}_")
             and chapter in _shown_tables(nbformat.read(p, as_version=4))]
    return found[0] if len(found) == 1 else None


@pytest.mark.parametrize("path", _claim_files(), ids=lambda p: p.name)
def test_every_row_is_valid(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data.get("schema") == SCHEMA, f"{path.name} has schema {data.get('schema')!r}, not {SCHEMA!r}"
    assert data["chapter"] == path.stem, f"{path.name} says it is chapter {data['chapter']!r}"
    assert data["rows"], f"{path.name} records no verdict"
    for row in data["rows"]:
        s = summary(row)  # raises on an unknown claim id, a typed verdict that is not one of VERDICTS, or a
        # measured row whose stored verdict is not the rule's
        if row["kind"] == "typed":
            assert set(row) == {"kind", "claim", "models", "measured", "verdict", "note"}, row
        assert s["models"].strip() and s["measured"].strip(), f"{path.name}: empty models or measured in {row}"
        for key in ("models", "measured", "note"):
            assert "|" not in s[key], f"{path.name}: a '|' in {key} breaks the Markdown tables: {s[key]!r}"


@pytest.mark.parametrize("path", _claim_files(), ids=lambda p: p.name)
def test_each_file_agrees_with_the_table_its_chapter_shows(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    chapter = data["chapter"]
    notebook = _notebook_of(chapter)
    assert notebook is not None, f"{path.name}: no single chapter notebook chapters/{chapter[2:]}_*/ shows it"
    tables = _shown_tables(nbformat.read(notebook, as_version=4)).get(chapter, [])
    assert len(tables) == 1, (f"{notebook.name} should show its claims table exactly once (a cell calling "
                              f"deviating.ledger.report({chapter!r}, ...) with its output stored); found {len(tables)}")
    expected = markdown_table(data["rows"])
    assert tables[0] == expected, (f"{path.name} and the table stored in {notebook.name} differ: re-execute the "
                                   "chapter with scripts/execute_notebooks.py and commit both")


def test_every_chapter_that_reports_has_recorded_its_rows() -> None:
    for notebook in chapter_notebooks():
        for chapter, tables in _shown_tables(nbformat.read(notebook, as_version=4)).items():
            if tables:
                assert (CLAIMS_DIR / f"{chapter}.json").is_file(), (
                    f"{notebook.name} shows a claims table for {chapter} but {CLAIMS_DIR}/{chapter}.json is missing")


def _ledger_text() -> str:
    nb = nbformat.read(LEDGER, as_version=4)
    return "\n".join(text for cell in nb.cells if cell.cell_type == "code" for text in _markdown_outputs(cell))


def test_the_ledger_lists_every_claim_and_every_recorded_row() -> None:
    text = _ledger_text()
    for claim, statement in CLAIMS.items():
        assert f"**[{claim}](claim-{claim.lower()})** {statement}" in text, f"the ledger's stored table does not list {claim}"
    stale = "re-execute chapters/10_ledger/10_ledger.ipynb with scripts/execute_notebooks.py"
    for path in _claim_files():
        for row in json.loads(path.read_text(encoding="utf-8"))["rows"]:
            s = summary(row)
            assert badge(s["verdict"], s["typed"]) in text and f"| {s['measured']} |" in text, (
                f"{path.name} row {s['claim']} is missing: {stale}")
    measured = {row["claim"] for path in _claim_files() for row in json.loads(path.read_text(encoding="utf-8"))["rows"]}
    for claim in sorted(set(CLAIMS) - measured):
        assert f"{CLAIMS[claim]} | not measured yet | — |" in text, f"{claim}: {stale}"
    assert counts_markdown(load_all()) in text, f"the verdict counts at the top are stale: {stale}"


def test_the_same_claim_on_the_same_model_has_one_verdict_or_a_stated_condition() -> None:
    """Issue 20: two chapters may judge one claim on one model differently only when their rows say
    what differs (the data, the constructions); identical descriptions with two verdicts contradict."""
    contradictions = [d for d in disagreements(load_all()) if not d["stated"]]
    assert not contradictions, "the same claim on the same model, described the same way, carries two verdicts:\n" + \
        "\n".join(f"  {d['claim']} on {d['model']}: {d['rows']}" for d in contradictions)


def test_model_key_and_disagreements_on_known_cases() -> None:
    assert model_key("MiniLM, English set, held out") == "minilm"
    assert model_key("organism-small-s0..2 (three seeds)") == "organism-small"
    assert model_key("the organism, 3 seeds; attn-only-2l") == "organism"  # the first model named
    assert model_key("2-layer GPTs on the synthetic language") == "other"
    assert model_key("brown-attn-2l, 5 training seeds") == "brown-attn-2l"  # not attn-only-2l
    assert model_key("brown-gpt, 3 training seeds") == "brown-gpt"  # not GPT-2
    ledger = {c: [] for c in CLAIMS}
    ledger["C3"] = [{"chapter": "ch03", **vars(Verdict("C3", "minilm", "prev 0.9", "holds"))},
                    {"chapter": "ch09", **vars(Verdict("C3", "MiniLM", "prev 0.3", "inconclusive"))},
                    {"chapter": "ch09", **vars(Verdict("C3", "organism", "prev 0.3", "inconclusive"))}]
    ledger["C7"] = [{"chapter": "ch03", **vars(Verdict("C7", "minilm", "x", "holds"))},
                    {"chapter": "ch09", **vars(Verdict("C7", "minilm", "y", "inconclusive"))}]
    found = {d["claim"]: d for d in disagreements(ledger)}
    assert set(found) == {"C3", "C7"} and found["C3"]["stated"] and not found["C7"]["stated"]
    # two quantities of one claim on one model (C15: polysemantic heads; features found again) may differ
    from deviating.verdicts import ClaimRow, Measurement, to_json

    def measured(quantity, effect):
        row = ClaimRow("C15", "organism, layer 2", quantity, null=0.5, null_label="half", direction="greater",
                       measurements=(Measurement("all", effect, effect - 0.01, effect + 0.01, 80),), unit="share")
        return {"chapter": "ch08", "kind": "measured", **to_json(row)}

    ledger["C15"] = [measured("share of polysemantic heads", 0.5), measured("features found again", 3.0)]
    assert {d["claim"]: d["stated"] for d in disagreements(ledger)}["C15"] is True
    ledger["C15"][1] = measured("share of polysemantic heads", 0.9)
    assert {d["claim"]: d["stated"] for d in disagreements(ledger)}["C15"] is False


def test_badges_spell_out_the_verdict() -> None:
    for kind in ("holds", "holds with conditions", "inconclusive", "does not hold here",
                 "significant but inside the band"):
        assert f">{kind}</span>" in badge(kind)
    assert "typed by hand" in badge("holds", typed=True)
    with pytest.raises(ValueError, match="'maybe'"):
        badge("maybe")
    assert chapter_link("ch04", "  - file: chapters/04_x/x\n") == "{doc}`/chapters/04_x/x`"
    assert chapter_link("ch11", "") == "chapter 11"
    with pytest.raises(ValueError, match="'four'"):
        chapter_link("four")


def _run_ledger(repo: Path, monkeypatch, capsys) -> tuple[str, str]:
    """Execute the ledger's code cells inside ``repo``; return (stdout, the generated Markdown)."""
    shown: list[str] = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, **_: shown.append(getattr(obj, "data", str(obj))))
    monkeypatch.chdir(repo / "chapters")
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(repo / "chapters" / "claims"))
    namespace: dict = {"__name__": "__ledger__"}
    nb = nbformat.read(LEDGER, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and SKIP_TAG not in cell.metadata.get("tags", []):
            exec(compile(cell.source, str(LEDGER), "exec"), namespace)  # noqa: S102 (the book's own notebook)
    return capsys.readouterr().out, "\n".join(shown)


def _repo(tmp_path: Path, toc: str, files: dict[str, list[Verdict]]) -> Path:
    (tmp_path / "_toc.yml").write_text(toc, encoding="utf-8")
    (tmp_path / "chapters" / "claims").mkdir(parents=True)
    for chapter, rows in files.items():
        payload = {"chapter": chapter, "rows": [vars(r) for r in rows]}
        (tmp_path / "chapters" / "claims" / f"{chapter}.json").write_text(json.dumps(payload), encoding="utf-8")
    return tmp_path


def test_the_ledger_works_with_no_chapter(tmp_path, monkeypatch, capsys) -> None:
    out, table = _run_ledger(_repo(tmp_path, "root: intro\n", {}), monkeypatch, capsys)
    assert "0 chapters have recorded verdicts: none yet" in out
    assert "0 verdicts on 0 of 20 claims" in table
    assert table.count("not measured yet") == len(CLAIMS)


def test_the_ledger_links_only_pages_in_the_toc(tmp_path, monkeypatch, capsys) -> None:
    toc = "root: intro\nchapters:\n  - file: chapters/03_heads/heads\n"
    rows = {"ch03": [Verdict("C3", "organism", "prev 0.9", "holds")],
            "ch11": [Verdict("C3", "minilm", "prev 0.3", "does not hold here", "only one head"),
                     Verdict("C8", "minilm", "Gini 0.6", "holds with conditions")]}
    out, table = _run_ledger(_repo(tmp_path, toc, rows), monkeypatch, capsys)
    assert "<small>organism · {doc}`/chapters/03_heads/heads`</small> | " + badge("holds", typed=True) + " | prev 0.9 |" in table
    assert "<small>minilm · chapter 11</small> | " + badge("does not hold here", typed=True) + "<br>only one head" in table
    assert "3 verdicts on 2 of 20 claims" in table
    assert "no claim is judged differently on the same model" in out
    assert table.count("not measured yet") == len(CLAIMS) - 2


def test_the_reasoning_of_each_row_shows_effect_unit_band_holm_and_verdict() -> None:
    from deviating.ledger_page import reasoning_markdown

    ledger = load_all()
    text = reasoning_markdown(ledger)
    n_measured = sum(1 for rows in ledger.values() for r in rows if r.get("kind") == "measured")
    assert text.count("<details>") == n_measured
    assert ("| condition | role | effect [95% interval] | unit, n | band | test | p (Holm) | p (BH, ledger) | "
            "counts as |") in text
    assert "3 seeds" in text and "sentences" in text and "±0.01" in text and "| primary |" in text
    assert "beside: a saturated metric" in text and "beside the row" in text
    for kind in ("holds in", "does not hold here", "held in each network trained"):
        assert kind in text


def test_a_removed_row_is_gone_from_the_stored_claims_and_cannot_come_back(tmp_path, monkeypatch) -> None:
    from deviating.ledger import report
    from deviating.removed import REMOVED, removed_markdown
    from deviating.verdicts import ClaimRow, Measurement

    stored = {(row["claim"], row["chapter"], row["quantity"]) for rows in load_all().values() for row in rows}
    for r in REMOVED:
        assert r["claim"] in CLAIMS and len(r["why"]) > 40
        assert (r["claim"], r["chapter"], r["quantity"]) not in stored, f"{r} is still in the ledger"
    table = removed_markdown()
    assert table.count("\n") == len(REMOVED) + 1 and all(r["quantity"] in table for r in REMOVED)
    # the same numbers under the removed quantity are refused; under another quantity they are reported
    gone = REMOVED[0]
    m = Measurement("all heads", 32.0, 31.0, 33.0, 72)
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="was removed from the ledger"):
        report(gone["chapter"], [ClaimRow(gone["claim"], "a model", gone["quantity"], 0.0, "none", "greater",
                                          (m,), unit="count")], write=True)
    assert not list(tmp_path.glob("*.json"))
    report(gone["chapter"], [ClaimRow(gone["claim"], "a model", "another quantity", 0.0, "none", "greater",
                                      (m,), unit="count")], write=True)
    assert (tmp_path / f"{gone['chapter']}.json").is_file()


def test_the_ledger_page_lists_the_removed_rows() -> None:
    from deviating.removed import REMOVED

    nb = nbformat.read(CHAPTERS / "10_ledger" / "10_ledger.ipynb", as_version=4)
    shown = "".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    assert all(r["why"] in shown for r in REMOVED)


def test_a_verdict_decided_by_a_named_condition_says_which():
    from deviating.claims_here import one_line_reason
    from deviating.ledger import reasoning_text
    from deviating.verdicts import ClaimRow, Measurement, named_condition_failing, verdict

    ms = (Measurement("subject head", -0.25, -0.3, -0.2, 69, 1), Measurement("subject head", -0.19, -0.22, -0.15, 69, 2),
          Measurement("copy head", 0.65, 0.55, 0.72, 50, 1), Measurement("copy head", 0.58, 0.48, 0.64, 50, 2))
    ms = ms + tuple(Measurement(m.condition, m.effect, m.low, m.high, m.n, 3) for m in ms[::2])  # 3 seeds
    named = ClaimRow("C14", "organism", "a role's margin over its baseline", 0.0, "baseline", "greater", ms,
                     required=("subject head", "copy head"), primary="copy head", unit="accuracy")
    j = verdict(named)
    assert j.kind == "does not hold here"
    assert named_condition_failing(j).startswith("subject head (contradicted")
    assert reasoning_text(j).startswith("the condition the claim names does not hold: subject head")
    assert one_line_reason(named, j).startswith("decided by the condition the claim names, subject head;")
    free = ClaimRow("C14", "organism", "a role's margin over its baseline", 0.0, "baseline", "greater", ms,
                    primary="copy head", unit="accuracy")  # nothing required: no such clause
    assert named_condition_failing(verdict(free)) == "" and "names" not in reasoning_text(verdict(free))
    assert "across seeds" in one_line_reason(free, verdict(free))
    # the primary endpoint decides, and says so
    first = ClaimRow("C14", "organism", "a role's margin over its baseline", 0.0, "baseline", "greater", ms,
                     unit="accuracy")
    assert reasoning_text(verdict(first)).startswith("the primary endpoint does not hold: subject head")
    assert one_line_reason(first, verdict(first)).startswith("decided by the primary endpoint, subject head;")
    minilm = ClaimRow("C10", "MiniLM, 87 held-out sentences", "heads removed", 0.0, "together", "greater",
                      (Measurement("mean order", 0.0, -2.0, 4.0, 87),), unit="count")
    assert "0 of 1 conditions hold on 87 sentences" in one_line_reason(minilm, verdict(minilm))  # no seeds here
