"""The claims ledger's rows are validated and round-trip through the chapters' files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headlab.ledger import CLAIMS, SCHEMA, Verdict, claims_dir, load_all, markdown_table, report
from headlab.schema import SchemaError


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
    assert report("ch99", rows) is None  # it displays; a notebook cell shows the table once
    text = markdown_table(rows)
    assert "| **C8**" in text and "*holds with conditions* — on agreement only" in text
    assert claims_dir() == tmp_path / "claims"
    data = json.loads((tmp_path / "claims" / "ch99.json").read_text())
    assert data["schema"] == SCHEMA == "headlab.claims/1"
    assert data["chapter"] == "ch99" and len(data["rows"]) == 2
    ledger = load_all()
    assert ledger["C8"][0]["measured"] == "Gini 0.61" and ledger["C8"][0]["chapter"] == "ch99"
    assert ledger["C1"] == []


def test_a_readers_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CLAIMS_DIR", str(tmp_path / "claims"))
    monkeypatch.delenv("HEADLAB_WRITE_CLAIMS", raising=False)
    monkeypatch.chdir(tmp_path)
    report("ch99", [Verdict("C3", "m", "x", "holds")])
    assert not any(tmp_path.iterdir())


def test_the_ledger_reads_0_1_files_and_refuses_newer_ones(tmp_path):
    row = {"claim": "C8", "models": "m", "measured": "x", "verdict": "holds", "note": ""}
    (tmp_path / "ch01.json").write_text(json.dumps({"chapter": "ch01", "rows": [row]}))  # 0.1: no schema
    assert load_all(tmp_path)["C8"] == [{"chapter": "ch01", **row}]
    (tmp_path / "ch02.json").write_text(json.dumps({"schema": "headlab.claims/2", "chapter": "ch02", "rows": [row]}))
    with pytest.raises(SchemaError, match=r"ch02.json has schema 'headlab.claims/2', newer than this headlab reads"):
        load_all(tmp_path)


def test_the_claims_ship_with_the_package():
    import headlab

    assert claims_dir() == Path(headlab.__file__).parent / "results" / "claims"
    assert sorted(p.stem for p in claims_dir().glob("*.json"))[:2] == ["ch01", "ch02"]
