"""The claims ledger's rows are validated and round-trip through the chapters' files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deviating.ledger import CLAIMS, SCHEMA, Verdict, claims_dir, load_all, markdown_table, report, summary
from deviating.verdicts import to_json
from headlab.schema import SchemaError

ROOT = Path(__file__).resolve().parents[1]


def test_twenty_claims():
    assert list(CLAIMS) == [f"C{i}" for i in range(1, 21)]


def test_verdicts_are_validated():
    with pytest.raises(ValueError, match="unknown claim"):
        Verdict("C21", "m", "1", "holds")
    with pytest.raises(ValueError, match="verdict must be"):
        Verdict("C1", "m", "1", "probably")


def test_the_build_writes_rows_the_ledger_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path / "claims"))
    monkeypatch.setenv("HEADLAB_WRITE_CLAIMS", "1")  # what scripts/build_book.py sets
    rows = [Verdict("C8", "organism", "Gini 0.61", "holds"),
            Verdict("C9", "organism", "3 of 32 heads", "holds with conditions", "on agreement only")]
    with pytest.warns(DeprecationWarning, match="typed by hand"):
        assert report("ch99", rows) is None  # it displays; a notebook cell shows the table once
    text = markdown_table(rows)
    assert "| **C8**" in text and "*holds with conditions* (typed) — on agreement only" in text
    assert claims_dir() == tmp_path / "claims"
    data = json.loads((tmp_path / "claims" / "ch99.json").read_text())
    assert data["schema"] == SCHEMA == "headlab.claims/2"
    assert data["chapter"] == "ch99" and len(data["rows"]) == 2
    ledger = load_all()
    assert ledger["C8"][0]["measured"] == "Gini 0.61" and ledger["C8"][0]["chapter"] == "ch99"
    assert ledger["C1"] == []


def test_a_readers_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path / "claims"))
    monkeypatch.delenv("HEADLAB_WRITE_CLAIMS", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(DeprecationWarning):
        report("ch99", [Verdict("C3", "m", "x", "holds")])
    assert not any(tmp_path.iterdir())


def test_the_ledger_reads_0_1_files_and_refuses_newer_ones(tmp_path):
    row = {"claim": "C8", "models": "m", "measured": "x", "verdict": "holds", "note": ""}
    (tmp_path / "ch01.json").write_text(json.dumps({"chapter": "ch01", "rows": [row]}))  # 0.1: no schema
    assert load_all(tmp_path)["C8"] == [{"chapter": "ch01", "kind": "typed", **row}]
    (tmp_path / "ch02.json").write_text(json.dumps({"schema": "headlab.claims/3", "chapter": "ch02", "rows": [row]}))
    with pytest.raises(SchemaError, match=r"ch02.json has schema 'headlab.claims/3', newer than this headlab reads"):
        load_all(tmp_path)


def test_the_claims_ship_with_the_package():
    import deviating

    assert claims_dir() == Path(deviating.__file__).parent / "results" / "claims"
    assert sorted(p.stem for p in claims_dir().glob("*.json"))[:2] == ["ch01", "ch02"]


def _lead_row(low, high, seeds=(None,)):
    from deviating.verdicts import ClaimRow, Measurement

    ms = tuple(Measurement("held-out items", 0.12, low, high, 185, s) for s in seeds)
    return ClaimRow("C4", "MiniLM, English set", "accuracy lead over the nearest mention", 0.0,
                    "nearest-mention baseline", "greater", ms, unit="accuracy")


def test_a_measured_row_gets_its_verdict_from_the_rule_and_shows_its_numbers(tmp_path, monkeypatch):
    from deviating.ledger import summary

    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path))
    monkeypatch.setenv("HEADLAB_WRITE_CLAIMS", "1")
    report("ch99", [_lead_row(0.03, 0.21), _lead_row(-0.01, 0.24)])
    rows = load_all()["C4"]
    assert [summary(r)["verdict"] for r in rows] == ["holds", "inconclusive"]
    text = markdown_table([_lead_row(0.03, 0.21)])
    assert "*holds*" in text and "[0.03, 0.21], 185 items" in text and "null 0 (nearest-mention baseline)" in text


def test_a_verdict_edited_by_hand_in_a_claims_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path))
    monkeypatch.setenv("HEADLAB_WRITE_CLAIMS", "1")
    report("ch99", [_lead_row(-0.01, 0.24)])
    path = tmp_path / "ch99.json"
    data = json.loads(path.read_text())
    data["rows"][0]["verdict"]["kind"] = "holds"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="never edited by hand"):
        load_all()


def test_rejudging_old_rows_changes_verdicts_and_refuses_zero_width_without_crashing(tmp_path):
    import importlib.util

    from deviating.verdicts import SCHEMA_VERSION, ClaimRow, Measurement

    spec = importlib.util.spec_from_file_location("rejudge_claims", ROOT / "scripts" / "rejudge_claims.py")
    rejudge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rejudge)
    seeds = tuple(Measurement("all", e, e - 0.02, e + 0.02, 128, s) for s, e in enumerate((0.51, 0.21, 0.23)))
    spread = ClaimRow("C5", "attn-only-2l, 3 seeds", "share of the score lost", 0.0, "no harm", "greater", seeds,
                      headline=Measurement("over seeds", 0.32, -0.1, 0.73, 3), unit="share")
    flat = ClaimRow("C19", "MiniLM, 64 sentences", "share of heads below 1%", 0.5, "half", "greater",
                    (Measurement("zero", 0.85, 0.85, 0.85, 64),), unit="share")
    old = []
    for row, stored in ((spread, "holds"), (flat, "holds")):  # what the old rule said, schema version 1
        entry = {"kind": "measured", **to_json(row)}
        entry["schema_version"], entry["verdict"] = 1, {"kind": stored}
        old.append(entry)
    (tmp_path / "ch09.json").write_text(json.dumps({"schema": SCHEMA, "chapter": "ch09", "rows": old}))
    payloads, changes, refused = rejudge.rejudge(tmp_path)
    assert [(c["claim"], c["before"], c["after"]) for c in changes] == [
        ("C5", "holds", "held in each network trained"), ("C19", "holds", "cannot be judged")]
    assert [r["claim"] for r in refused] == ["C19"] and "zero-width" in refused[0]["reason"]
    assert all(r["schema_version"] == SCHEMA_VERSION for r in payloads["ch09"]["rows"])
    assert "| ch09 | C5 |" in rejudge.changes_markdown(changes)
    (tmp_path / "ch09.json").write_text(json.dumps(payloads["ch09"]))
    assert [summary(r)["verdict"] for r in load_all(tmp_path)["C19"]] == ["cannot be judged"]
