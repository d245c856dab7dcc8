"""headlab.load: the offline default, hub names offline, unsupported models, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import headlab
from headlab.heads.loading import ModelUnavailable, minilm_path
from headlab.metrics import mean_pool


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
        emb = mean_pool(minilm(batch), batch["attention_mask"])
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


def test_cli_heads_and_sweep(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("The dog barks.\n\nBirds sing at dawn.\n", encoding="utf-8")
    from headlab.__main__ import main  # "heads" in-process; "sweep" below runs the real `python -m headlab`

    assert main(["heads", "--model", "minilm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_heads_total"] == 72
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
    from headlab.__main__ import main  # the same entry point in-process: the model is never loaded

    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--texts", str(tmp_path / "none.txt"), "--json", str(tmp_path / "x.json")])
    assert "no such file" in str(exit_info.value.code)


# ------------------------------------------------- offline, checkpoint folders, CLI errors


def test_offline_mode_is_respected_before_any_network_call(monkeypatch):
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError(f"the network was called: {args[:1]}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.setenv(variable, "1")
        with pytest.raises(ModelUnavailable, match="'gpt2'.*Offline models"):
            headlab.load("gpt2")


def test_a_hanging_name_lookup_does_not_hang_the_load(monkeypatch):
    """With no offline setting and a DNS that never answers, the hub probe gives up on its own
    (socket timeouts do not cover name resolution): load() fails while the lookup still hangs."""
    import socket
    import threading

    from headlab.heads import loading

    release, asked = threading.Event(), threading.Event()

    def hanging_lookup(*args, **kwargs):
        asked.set()
        release.wait(30)
        raise socket.gaierror("released by the test")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", hanging_lookup)
    monkeypatch.setattr(loading, "offline_mode", lambda: False)
    try:
        with pytest.raises(ModelUnavailable, match="cannot be reached"):
            headlab.load("no-such-org/no-such-model")
        assert asked.is_set() and not release.is_set()  # it returned while the lookup hung
    finally:
        release.set()


def test_a_checkpoint_folder_loads_by_path(tmp_path):
    import shutil

    from headlab.models.checkpoints import CHECKPOINT_DIR

    folder = tmp_path / "my-organism"
    shutil.copytree(CHECKPOINT_DIR / "attn-only-1l", folder)
    by_path, by_name = headlab.load(str(folder)), headlab.load("attn-only-1l")
    batch = by_name.tokenize(["t1 t2 t3 t1 t2"])
    with torch.no_grad():
        assert torch.equal(by_path(batch), by_name(batch))
    assert by_path.name == "my-organism" and by_path.provenance == by_name.provenance


def _main(argv, capsys):
    from headlab.__main__ import main
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv", [
    ["report", "--model", "attn-only-2l", "--out", "{tmp}/afile/report"],
    ["sweep", "--model", "attn-only-2l", "--json", "{tmp}/missing/s.json"],
    ["atlas", "--model", "attn-only-2l", "--json", "{tmp}/a.json", "--png", "{tmp}/afile/a.png"],
    ["sweep", "--model", "attn-only-2l", "--json", "{tmp}/s.json", "--texts", "{tmp}/missing.txt"],
])
def test_unwritable_outputs_and_unreadable_inputs_fail_before_any_model_loads(argv, tmp_path, monkeypatch, capsys):
    from headlab import cli  # imported before the patch: cli binds `load` when it is first imported
    from headlab.heads import loading

    (tmp_path / "afile").write_text("x")
    never = lambda *a, **k: pytest.fail("a model was loaded before the check")  # noqa: E731
    monkeypatch.setattr(loading, "load", never)
    monkeypatch.setattr(cli, "load", never)  # the name the commands call
    code, out, err = _main([a.format(tmp=tmp_path) for a in argv], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert "Traceback" not in err and not out


def test_an_unexpected_error_is_one_line_naming_its_type(monkeypatch, capsys):
    from headlab import cli

    def broken(args):
        raise ZeroDivisionError("division by zero\non two lines")

    monkeypatch.setattr(cli, "_cmd_heads", broken)
    code, out, err = _main(["heads"], capsys)
    assert (code, err) == (2, "error: ZeroDivisionError: division by zero on two lines\n")


def test_argument_errors_are_one_line(capsys):
    code, out, err = _main(["sweep", "--model", "minilm", "--json", "x.json", "--max-batch", "0"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--max-batch: must be a positive int, got '0'" in err
    assert "usage:" not in err


def test_the_notebook_runner_pins_one_torch_thread(monkeypatch, tmp_path):
    """scripts/execute_notebooks.py gives the kernels it starts OMP_NUM_THREADS=1, like the tests."""
    import os

    import execute_notebooks

    seen = {}
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    # main() also sets these for the kernels it starts; monkeypatch puts them back afterwards, or
    # every notebook this worker ran later would write the book's claims files (HEADLAB_WRITE_CLAIMS)
    for name in ("HEADLAB_WRITE_CLAIMS", "HEADLAB_PROGRESS"):
        monkeypatch.setenv(name, "")  # recorded (delenv of an unset name is not), so undone at the end
    monkeypatch.setattr(execute_notebooks, "execute",
                        lambda path, timeout, kernel: seen.update({k: os.environ.get(k) for k in execute_notebooks.THREAD_ENV}))
    assert execute_notebooks.main([str(tmp_path / "x.ipynb")]) == 0
    assert seen == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
