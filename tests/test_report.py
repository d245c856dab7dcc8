"""The checklist report: the planted circuit is found and kept, the JSON has its documented keys,
the Markdown embeds figures that exist, attn-only-2l's induction circuit is found with the same
numbers as the book's one definition of each role, clear errors."""

from __future__ import annotations

import json
import re

import pytest
import torch

import deviating.__main__ as entry
import headlab.__main__ as library_entry
import headlab.report as report_module
from deviating.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_model
from deviating.report import book_data
from headlab.analysis.importance import Importance
from headlab.report import JSON_KEYS, THRESHOLDS, ReportData, checklist, render_markdown, write_report
from headlab.report import ablation_section, keep_section
from headlab.report.thresholds import ROLES, TAIL_MEAN_BELOW, TAIL_WORST_ABOVE

from tiny_models import make_model


@pytest.fixture(scope="module")
def planted_report() -> dict:
    torch.manual_seed(0)
    return checklist(planted_model(), n_texts=12)


@pytest.fixture
def cli():
    """``python -m deviating`` in-process (``report`` with the book's data)."""
    return entry.main


def test_planted_circuit_is_verified_and_kept(planted_report):
    circuits = planted_report["circuits"]
    # the roles of the book: 0.0 is the one previous-token head, 1.0 the one induction head
    assert [c["head"] for c in circuits["previous_token_heads"]] == [list(PREVIOUS_TOKEN_HEAD)]
    assert circuits["previous_token_candidates"][0]["head"] == list(PREVIOUS_TOKEN_HEAD)
    assert [c["head"] for c in circuits["induction_candidates"]] == [list(INDUCTION_HEAD)]
    assert circuits["copying_tested"]
    assert circuits["induction_heads"] == {"random tokens": [list(INDUCTION_HEAD)], "own text": [list(INDUCTION_HEAD)]}
    (pair,) = circuits["verified"]
    assert (pair["previous_token"], pair["induction"]) == (list(PREVIOUS_TOKEN_HEAD), list(INDUCTION_HEAD))
    # by construction the induction head finds its key only through the previous-token head
    # its own text is random tokens with repeats inside each copy (a vocabulary of 20), doubled, and
    # only the second copy's queries count: both kinds find the head, the distinct random span more sharply
    for kind, clean in (("random", 0.9), ("own", 0.5)):
        r = pair[kind]
        assert r["clean"] > clean and r["ablated"] < 0.1 and r["passes"]
        assert r["drop"]["value"] == pytest.approx(r["clean"] - r["ablated"], abs=1e-3)
        assert r["relative_drop"]["low"] >= THRESHOLDS["CIRCUIT_MIN_RELATIVE_DROP"]
        assert r["relative_drop"]["value"] == pytest.approx(1 - r["ablated"] / r["clean"], abs=1e-3)
    assert pair["found_on"] == ["random tokens", "own text"]
    kept = {tuple(k["head"]): k["reasons"] for k in planted_report["keep"]["heads"]}
    assert PREVIOUS_TOKEN_HEAD in kept and INDUCTION_HEAD in kept
    assert any(r.startswith("circuit") for r in kept[PREVIOUS_TOKEN_HEAD])
    assert any(r.startswith("circuit") for r in kept[INDUCTION_HEAD])
    # the first-token head 0.1 writes nothing: a sharp pattern, no effect, not kept
    assert (0, 1) not in kept
    assert [0, 1] in [row["head"] for row in planted_report["patterns_vs_writes"]["sharp_but_idle"]]
    assert planted_report["roles"] == ROLES


def test_json_has_every_documented_key_and_no_nan(planted_report):
    assert set(planted_report) == set(JSON_KEYS[""])
    for section, keys in JSON_KEYS.items():
        if section:
            assert set(planted_report[section]) == set(keys), section
    doc = report_module.__doc__
    for key in {k for keys in JSON_KEYS.values() for k in keys}:
        assert f"``{key}``" in doc, f"report.json key {key!r} is not documented in headlab.report's docstring"
    for name in THRESHOLDS:
        assert f"``{name}``" in doc, f"threshold {name} is not documented in headlab.report's docstring"
    assert planted_report["thresholds"] == THRESHOLDS
    json.dumps(planted_report, allow_nan=False)  # a NaN would raise: nothing is silently NaN
    per_text = planted_report["ablation"]["per_text"]
    assert len(per_text) == 2 and len(per_text[0]) == 2 and len(per_text[0][0]) == planted_report["inputs"]["n_texts"]


def test_markdown_embeds_the_figures_it_writes(planted_report, tmp_path):
    report = json.loads(json.dumps(planted_report))
    md_path = write_report(report, tmp_path / "out")
    text = md_path.read_text(encoding="utf-8")
    embedded = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(embedded) == sorted(report["figures"].values())
    assert set(report["figures"]) == {"effects", "circuits", "redundancy", "patterns", "labels", "keep"}
    for name in embedded:
        data = (tmp_path / "out" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    assert json.loads((tmp_path / "out" / "report.json").read_text())["figures"] == report["figures"]
    for section in ("## The checklist", "## 1.", "## 2.", "## 3.", "## 4.", "## 5.", "## 6.", "## 7.",
                    "## Distillation", "## Thresholds"):
        assert section in text
    assert "| 0.0 | 1.0 |" in text  # the verified pair's row in the circuits table


def test_attn_only_2l_circuit_is_the_roles_own_numbers():
    """The report's circuit check on attn-only-2l is the induction role run on chapter 5's inputs:
    the same heads and the same relative drops as calling the role's functions directly, and the
    report's orphans are what orphan_heads finds on the same texts, metric and split."""
    import headlab
    from headlab.roles.induction import induction_dependence, induction_heads
    from headlab.roles.orphan import orphan_heads
    from headlab.report.inputs import report_inputs
    from headlab.stats import split_items
    from deviating.training.recipes import RECIPES

    hm = headlab.load("attn-only-2l")
    report = checklist(hm, n_texts=12, scope="top", top_k=4, data=book_data(hm))
    circuits = report["circuits"]
    verified = circuits["verified"]
    assert verified, circuits["pairs"]
    assert {tuple(p["previous_token"]) for p in verified} == {(0, 0)}
    assert all(p["induction"][0] == 1 for p in verified)
    kept = [tuple(k["head"]) for k in report["keep"]["heads"]]
    assert all(tuple(p["previous_token"]) in kept and tuple(p["induction"]) in kept for p in verified)
    assert report["redundancy"]["scope"] == "top" and report["redundancy"]["n_pairs"] == 6

    tokens = RECIPES["attn-only-2l"].task.eval_data(256).tokens  # chapter 5's sequences of the task
    own = induction_heads(hm, tokens)
    assert circuits["induction_heads"]["own text"] == [list(h) for h in own.heads]
    direct = induction_dependence(hm, tokens, [(0, 0)], own.heads, items=own.split.measure)
    by_pair = {(tuple(p["previous_token"]), tuple(p["induction"])): p for p in circuits["pairs"]}
    for head, dep in direct.items():
        got = by_pair[(0, 0), tuple(head)]["own"]["relative_drop"]
        assert (got["value"], got["low"], got["high"]) == tuple(round(x, 4) for x in
                                                                (dep.relative.value, dep.relative.low, dep.relative.high))

    inputs, _, _ = report_inputs(hm, None, 12, 0, book_data(hm))
    found = orphan_heads(hm, inputs, split=split_items(12, seed=0))
    assert [o["head"] for o in report["patterns_vs_writes"]["orphan_candidates"]] == [list(o.head) for o in
                                                                                       found.candidates]
    assert [o["head"] for o in report["patterns_vs_writes"]["orphans_that_matter"]] == [list(o.head) for o in
                                                                                         found.heads]


def test_an_encoder_without_tokenizer_runs_on_random_tokens():
    hm = make_model("bert")
    report = checklist(hm, n_texts=6, scope="layer")
    assert report["kind"] == "encoder" and report["metric"]["kind"] == "cosine"
    assert report["redundancy"]["n_pairs"] == 2 * 6  # C(4, 2) pairs in each of 2 layers
    json.dumps(report, allow_nan=False)
    assert "# Checklist report: bert" in render_markdown(report)


def _importance(effects) -> Importance:
    return Importance(torch.tensor(effects, dtype=torch.float32), "zero", "loss")


def test_hidden_in_the_tail_names_the_text_that_makes_a_head_critical():
    # 1 layer x 3 heads x 5 texts: 0.0 matters everywhere, 0.1 only on text 2, 0.2 barely
    imp = _importance([[[1.0] * 5, [0.0, 0.0, 1.2, 0.0, 0.0], [0.01, 0.0, 0.0, 0.02, 0.0]]])
    section = ablation_section(imp, ["a", "b", "c", "d", "e"])
    assert TAIL_MEAN_BELOW * 1.0 > 0.24 and TAIL_WORST_ABOVE * 1.0 < 1.2  # the constants this case relies on
    (row,) = section["hidden_in_the_tail"]
    assert row["head"] == [0, 1] and row["text"] == "c" and row["worst"] == pytest.approx(1.2)
    assert [r["head"] for r in section["top_by_worst"]][:2] == [[0, 1], [0, 0]]
    assert [r["head"] for r in section["top_by_mean"]][0] == [0, 0]


def test_keep_is_the_union_with_reasons():
    # 1 layer x 6 heads x 2 texts
    imp = _importance([[[1.0, 1.0], [0.1, 0.1], [0.0, 1.5], [0.0, 0.0], [0.5, 0.5], [0.3, 0.3]]])
    cut = {"value": 0.6, "low": 0.5, "high": 0.7, "n": 10}
    circuits = {"verified": [{"previous_token": [0, 3], "induction": [0, 1],
                              "random": {"relative_drop": cut, "passes": True}, "own": None}]}
    redundancy = {"backups": [{"removed": [0, 0], "backup": [0, 1], "alone": 0.1, "given_removed": 0.9}]}
    patterns = {"orphans_that_matter": [{"head": [0, 4], "lead": {"value": 0.2, "low": 0.1, "high": 0.3}}]}
    keep = keep_section(imp, circuits, redundancy, patterns)
    reasons = {tuple(k["head"]): k["reasons"] for k in keep["heads"]}
    assert set(reasons) == {(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)}
    assert reasons[(0, 4)] == ["orphan: no named pattern, yet its effect leads the mean head's by 0.2 [0.1, 0.3] on "
                               "the measurement texts"]  # 0.4: mean 0.5, never critical; kept as an orphan (0.5: not kept)
    assert reasons[(0, 3)][0].startswith("circuit: removing it cuts induction head 0.1's score by 60% [50%, 70%]")
    assert reasons[(0, 2)][0].startswith("worst case")  # mean 0.75 < 1.0, but 1.5 on one text
    assert [r.split(" ")[0] for r in reasons[(0, 0)]] == ["worst", "backed"]  # the largest mean is always kept
    assert [r.split(":")[0] for r in reasons[(0, 1)]] == ["circuit", "backup"]
    assert keep["mean_ranking_would_drop"] == [[0, 3]]


def test_cli_writes_the_report(cli, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("t1 t2 t3 t4 t1 t2 t3 t4\nt5 t6 t7 t5 t6 t7\nt9 t8 t7 t6 t5\n", encoding="utf-8")
    assert cli(["report", "--model", "attn-only-2l", "--texts", str(texts), "--out", str(tmp_path / "r"),
                "--quiet", "--pairs", "top", "--top-k", "3"]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["inputs"]["n_texts"] == 3 and report["inputs"]["texts"][0].startswith("t1 t2")
    # the orphan rule needs two texts a side: with three it says "not measured" rather than guess
    assert report["patterns_vs_writes"]["orphan_candidates"] is None
    assert "Not measured: the rule needs at least 4 texts" in (tmp_path / "r" / "report.md").read_text()
    assert (tmp_path / "r" / "report.md").is_file()
    assert "keep" in capsys.readouterr().out


def test_cli_errors_are_clear(cli, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="no such file"):
        cli(["report", "--model", "attn-only-2l", "--texts", str(tmp_path / "missing.txt"), "--out", str(tmp_path)])
    (tmp_path / "a_file").write_text("x")
    assert cli(["report", "--model", "attn-only-2l", "--out", str(tmp_path / "a_file")]) == 2
    assert "is a file" in capsys.readouterr().err
    assert cli(["report", "--model", "no-such-model", "--out", str(tmp_path / "r")]) == 2
    assert "error: cannot load 'no-such-model'" in capsys.readouterr().err
    assert cli(["report", "--model", "attn-only-2l", "--n-texts", "1", "--out", str(tmp_path / "r")]) == 2
    assert "n_texts must be at least 2" in capsys.readouterr().err
    english = tmp_path / "english.txt"
    english.write_text("The cat sat.\nThe dog ran.\n", encoding="utf-8")
    assert cli(["report", "--model", "attn-only-2l", "--texts", str(english), "--out", str(tmp_path / "r")]) == 2
    assert "attn-only-2l cannot read the given texts" in capsys.readouterr().err
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["t1"] * 80) + "\nt1 t2\n", encoding="utf-8")  # n_ctx is 64
    assert cli(["report", "--model", "attn-only-2l", "--texts", str(long), "--out", str(tmp_path / "r")]) == 2
    assert "more than attn-only-2l's maximum of 64" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown pair scope"):
        checklist(planted_model(), n_texts=4, scope="everything")


def _glued(notebook) -> dict:
    """The values a stored notebook glues (myst-nb), by name."""
    out = {}
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                out[name] = o["data"]["application/papermill.record/text/plain"]
    return out


def test_chapter_9_quotes_chapter_5s_induction_dependence():
    """Chapter 9 quotes "removing 0.0 cuts the scores by ..." from the same call on the same
    sequences as chapter 5 (induction_dependence on the held-out half of the model's own task):
    the stored numbers of the two chapters are equal (chapter 9 rounds to 4 places)."""
    from pathlib import Path

    chapters = Path(__file__).resolve().parents[1] / "chapters"
    ch5 = _glued(chapters / "05_induction" / "05_induction.ipynb")
    ch9 = _glued(chapters / "09_checklist" / "09_checklist.ipynb")
    for mine, theirs in (("cut0_lo", "cut_own_lo"), ("cut0_hi", "cut_own_hi")):
        assert float(ch9[mine]) == round(float(ch5[theirs]), 4), (mine, ch9[mine], ch5[theirs])


# ------------------------------------------------------------- the generic path and the data plug-in


def test_book_data_is_the_books_and_none_elsewhere():
    import headlab
    from deviating.report.book import LANGUAGE, SPAN_TASK

    assert book_data(headlab.load("attn-only-2l")) is SPAN_TASK
    assert book_data(headlab.load("organism-small-s0")) is LANGUAGE
    assert book_data(planted_model()) is None and book_data(make_model("gpt2")) is None


def test_report_data_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="ReportData.own_text must be a function or None, got int"):
        ReportData(own_text=3)
    with pytest.raises(TypeError, match="data must be a headlab.report.ReportData or None, got str"):
        checklist(planted_model(), n_texts=4, data="deviating.report:book_data")


def test_a_plug_in_of_ones_own_gives_texts_own_text_and_tasks():
    """A model the library knows nothing about, with a ReportData written for it: the report reads
    its texts, runs the induction role on its own text and finds the task specialist it was told of."""
    from headlab.report.detectors import TargetSet, previous_occurrence_targets

    hm = planted_model()
    g = torch.Generator().manual_seed(1)
    body = torch.randint(3, hm.vocab_size, (8, 10), generator=g)
    ids = torch.cat([body, body], 1)  # every sequence repeated once: induction targets in the second half
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    calls = []

    def texts(model, n, seed):
        calls.append(("texts", n, seed))
        return batch, "my sixteen-token repeats"

    def own_text(model, seed):
        calls.append(("own_text", seed))
        targets = previous_occurrence_targets(ids, torch.ones_like(ids, dtype=torch.bool), torch.zeros(8, dtype=torch.long))
        return TargetSet(batch, targets, "my repeats", "own text", every_repeat=True)

    def task_shares(model, n_windows, seed):
        calls.append(("task_shares", n_windows, seed))
        share = torch.zeros(model.n_layers, model.n_heads)
        share[0, 0] = 0.9  # the previous-token head carries the task
        return {"my task": share}

    report = checklist(hm, n_texts=6, seed=3, data=ReportData(texts, own_text, task_shares))
    assert ("texts", 6, 3) in calls and ("own_text", 3) in calls and ("task_shares", THRESHOLDS["TASK_WINDOWS"], 3) in calls
    assert report["inputs"]["source"] == "my sixteen-token repeats" and report["inputs"]["n_texts"] == 6
    assert report["circuits"]["inputs"]["own text"] == "my repeats"
    assert list(INDUCTION_HEAD) in report["circuits"]["induction_heads"]["own text"]
    tasks = report["tasks"]
    assert tasks["measured"] and tasks["best"] == {"my task": {"head": [0, 0], "share": 0.9}}
    below = float(torch.tensor(report["ablation"]["mean"])[0, 0]) < float(torch.tensor(report["ablation"]["mean"]).median())
    assert ([s["head"] for s in tasks["specialists"]] == [[0, 0]]) == below


def test_tasks_section_lists_specialists_below_the_median():
    from headlab.report.data import tasks_section

    hm = planted_model()
    assert (hm.n_layers, hm.n_heads) == (2, 2)
    mean = torch.tensor([[0.01, 0.5], [0.3, 0.02]])  # median 0.02 (torch: the lower middle value)
    share = torch.zeros_like(mean)
    share[0, 0], share[0, 1] = 0.6, 0.8  # 0.0 is below the median effect, 0.1 is not
    got = tasks_section(hm, mean, {"t": share}, 16, 0.5)
    assert got["specialists"] == [{"head": [0, 0], "task": "t", "share": 0.6, "mean_effect": 0.01}]
    assert got["best"] == {"t": {"head": [0, 1], "share": 0.8}} and got["windows"] == 16
    assert tasks_section(hm, mean, None, 16, 0.5)["measured"] is False


def test_the_library_command_runs_without_the_books_data_and_with_it(tmp_path, capsys):
    """``python -m headlab report`` knows no book: on attn-only-2l without --data the own text is
    the given texts repeated and the tasks are not measured; --data deviating.report:book_data (the
    default of ``python -m deviating report``) brings the span task's evaluation sequences back."""
    texts = tmp_path / "texts.txt"
    texts.write_text("t1 t2 t3 t4 t5\nt5 t6 t7 t8\nt9 t8 t7 t6 t5\nt2 t4 t6 t8\n", encoding="utf-8")
    common = ["report", "--model", "attn-only-2l", "--texts", str(texts), "--quiet", "--pairs", "top", "--top-k", "2"]
    assert library_entry.main(common + ["--out", str(tmp_path / "plain")]) == 0
    plain = json.loads((tmp_path / "plain" / "report.json").read_text())
    assert plain["circuits"]["inputs"]["own text"].startswith("4 of the model's own texts, each followed by")
    assert not plain["tasks"]["measured"] and "ReportData(task_shares=...)" in plain["tasks"]["why"]
    assert library_entry.main(common + ["--out", str(tmp_path / "book"), "--data", "deviating.report:book_data"]) == 0
    book = json.loads((tmp_path / "book" / "report.json").read_text())
    assert book["circuits"]["inputs"]["own text"].startswith("the 256 evaluation sequences of the model's training")
    assert book["inputs"] == plain["inputs"] and book["ablation"] == plain["ablation"]  # the texts were given
    # `python -m deviating report` is the same command with that --data as its default (its full run is
    # test_cli_writes_the_report's): the parsed arguments name the same function and the book's data
    book_args = entry.parser().parse_args(common + ["--out", str(tmp_path / "deviating")])
    library_args = library_entry.build_parser("p", library_entry.COMMAND_MODULES, "").parse_args(
        common + ["--out", str(tmp_path / "deviating"), "--data", "deviating.report:book_data"])
    assert vars(book_args) == vars(library_args)
    capsys.readouterr()
    assert library_entry.main(common + ["--out", str(tmp_path / "x"), "--data", "deviating.report"]) == 2
    assert "--data 'deviating.report': give MODULE:FUNCTION, e.g. deviating.report:book_data" in capsys.readouterr().err
