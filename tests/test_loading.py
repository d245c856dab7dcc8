"""headlab.load: the offline default, hub names offline, unsupported models, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import headlab
from headlab.heads.loading import ModelUnavailable, minilm_path


@pytest.fixture(scope="module")
def minilm():
    return headlab.load("minilm")


def test_minilm_loads_offline_with_its_geometry(minilm):
    assert (minilm.n_layers, minilm.n_heads, minilm.d_head, minilm.d_model) == (6, 12, 32, 384)
    assert not minilm.causal
    assert (minilm_path() / "model.safetensors").is_file()


def test_minilm_embedding_matches_sentence_transformers_pooling(minilm):
    """Two paraphrases are closer than an unrelated sentence: the model is really loaded."""
    texts = ["A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today."]
    batch = minilm.tokenize(texts)
    with torch.no_grad():
        emb = minilm.metric(minilm(batch), batch)
    emb = torch.nn.functional.normalize(emb, dim=-1)
    sims = emb @ emb.T
    assert sims[0, 1] > 0.6 > sims[0, 2]


def test_hub_name_offline_names_the_offline_models(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="Offline models: minilm"):
        headlab.load("gpt2")


def test_bad_names():
    with pytest.raises(ValueError, match="got ''"):
        headlab.load("")
    with pytest.raises(TypeError, match="got None"):
        headlab.load(None)
    with pytest.raises(ValueError, match="not a folder"):
        headlab.load("./no/such/folder")


def test_cli_heads_and_sweep(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("The dog barks.\n\nBirds sing at dawn.\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "headlab", "heads", "--model", "minilm", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["n_heads_total"] == 72
    target = tmp_path / "sweep.json"
    subprocess.run([sys.executable, "-m", "headlab", "sweep", "--model", "minilm", "--texts", str(texts),
                    "--json", str(target), "--quiet"], capture_output=True, text=True, check=True)
    payload = json.loads(target.read_text())
    assert payload["n_texts"] == 2 and len(payload["groups"]) == 72
    assert all(len(g["effects"]) == 2 for g in payload["groups"])


def test_cli_errors_are_messages_not_tracebacks(tmp_path):
    env_offline = {"HF_HUB_OFFLINE": "1", "PATH": ""}
    res = subprocess.run([sys.executable, "-m", "headlab", "heads", "--model", "gpt2"],
                         capture_output=True, text=True, env=env_offline)
    assert res.returncode == 2 and res.stderr.startswith("error: cannot load 'gpt2'")
    assert "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "headlab", "sweep", "--texts", str(tmp_path / "none.txt"),
                          "--json", str(tmp_path / "x.json")], capture_output=True, text=True)
    assert res.returncode != 0 and "no such file" in res.stderr
