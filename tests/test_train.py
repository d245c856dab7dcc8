"""Training data, recipes, reproducibility and the shipped checkpoints (deviating.training, deviating.data.spans,
headlab.models.gpt)."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter

import pytest
import torch

import headlab
from deviating.__main__ import main
from headlab.analysis.detect import induction_score
from headlab.models.checkpoints import (CHECKPOINT_DIR, CheckpointError, available_organisms, load_checkpoint,
                                       load_organism, sha256_file)
from headlab.models.gpt import GPT
from deviating.data.spans import RepeatedSpans
from deviating.training.loop import train
from deviating.training.recipes import RECIPES

TINY = "tiny-attn-2l"
# Retraining on the same machine is bit-identical (checked below); across machines, BLAS
# kernels may sum in another order. This tolerance covers that, and nothing more.
METRIC_ATOL = 2e-3


# ---------------------------------------------------------------------------- data

def test_repeated_spans_really_repeat_at_random_periods():
    task = RepeatedSpans()
    b = task.sample(512, torch.Generator().manual_seed(0))
    assert b.tokens.shape == (512, 64)
    assert (b.tokens[:, 0] == task.bos_id).all()
    assert b.tokens[:, 1:].max() < task.n_tokens and b.tokens.min() >= 0
    for i in range(512):
        s, d, L = int(b.start[i]), int(b.period[i]), int(b.span_len[i])
        assert task.min_span <= L <= task.max_span and d >= L and s >= 1 and s + d + L <= task.n_ctx
        assert torch.equal(b.tokens[i, s + d:s + d + L], b.tokens[i, s:s + L])
        expected = torch.zeros(64, dtype=torch.bool)
        expected[s + d + 1:s + d + L] = True
        assert torch.equal(b.predictable[i], expected)
    periods = Counter(b.period.tolist())
    assert len(periods) >= 30  # random periods ...
    assert max(periods.values()) / 512 < 0.1  # ... and no period a positional head could rely on
    assert len(set(b.span_len.tolist())) == task.max_span - task.min_span + 1
    assert len(set(b.start.tolist())) >= 20


def test_no_fixed_offset_predicts_the_repeated_tokens():
    """By construction: for every offset k, copying the token k positions back is right on a
    small minority of the predictable targets (measured: at most 14%, at k = 32; chance is
    1/64), where induction is right on all of them: a positional head cannot do the job."""
    b = RepeatedSpans().sample(1024, torch.Generator().manual_seed(1))
    targets = b.predictable.nonzero()  # (n, 2): (row, pos)
    rows, pos = targets[:, 0], targets[:, 1]
    best = max(float((b.tokens[rows, pos] == b.tokens[rows, pos - k]).float().mean()) for k in range(1, 63))
    assert best < 0.2


def test_repeated_spans_are_deterministic_and_validate():
    t = RepeatedSpans()
    a = t.sample(8, torch.Generator().manual_seed(3)).tokens
    assert torch.equal(a, t.sample(8, torch.Generator().manual_seed(3)).tokens)
    assert not torch.equal(a, t.sample(8, torch.Generator().manual_seed(4)).tokens)
    with pytest.raises(ValueError, match="do not fit"):
        RepeatedSpans(n_ctx=32, max_span=16)
    with pytest.raises(ValueError, match="min_span"):
        RepeatedSpans(min_span=5, max_span=4)


def test_span_tokenizer_is_a_hf_tokenizer_matching_the_ids():
    task = RepeatedSpans()
    tok = task.tokenizer()
    assert len(tok) == task.d_vocab
    assert tok("t3 t63 t0")["input_ids"] == [task.bos_id, 3, 63, 0]
    assert tok.pad_token_id == task.pad_id and tok.bos_token_id == task.bos_id
    assert tok.decode([task.bos_id, 5, 7], skip_special_tokens=True) == "t5 t7"


# ---------------------------------------------------------------------------- recipes and training

def test_recipes_are_consistent():
    assert {"attn-only-1l", "attn-only-2l", TINY} <= set(RECIPES)
    for name, r in RECIPES.items():
        assert r.name == name
        assert r.config.d_vocab == r.task.d_vocab and r.config.n_ctx == r.task.n_ctx
    assert RECIPES["attn-only-1l"].config.n_layers == 1 and RECIPES["attn-only-2l"].config.n_layers == 2
    assert RECIPES["attn-only-2l"].config.attn_only and RECIPES["attn-only-1l"].config.attn_only
    # the two are the same experiment but for depth
    a, b = RECIPES["attn-only-1l"].to_dict(), RECIPES["attn-only-2l"].to_dict()
    a["config"].pop("n_layers"), b["config"].pop("n_layers")
    assert {k: v for k, v in a.items() if k not in ("name", "description")} == \
           {k: v for k, v in b.items() if k not in ("name", "description")}


@pytest.fixture(scope="module")
def tiny_run():
    return train(RECIPES[TINY], progress=False)


@pytest.mark.slow
def test_tiny_recipe_retrains_identically_and_learns(tiny_run):
    again = train(RECIPES[TINY], progress=False)
    assert again.metrics == tiny_run.metrics
    for (n, p), (_, q) in zip(tiny_run.model.named_parameters(), again.model.named_parameters()):
        assert torch.equal(p, q), n
    # it learned something: in-context token statistics lower the loss on repeated tokens
    assert tiny_run.metrics["loss_repeat"] < math.log(16) - 0.1
    assert tiny_run.curve[0]["step"] == 0 and tiny_run.curve[-1]["step"] == RECIPES[TINY].steps
    other_seed = train(RECIPES[TINY], seed=1, steps=50, progress=False)
    assert other_seed.metrics["loss"] != pytest.approx(tiny_run.metrics["loss"], abs=1e-6)


@pytest.mark.slow
def test_shipped_tiny_checkpoint_matches_a_fresh_retrain(tiny_run):
    org = load_organism(TINY)
    prov = org.provenance
    assert prov["seed"] == 0 and prov["steps"] == RECIPES[TINY].steps
    assert prov["command"].startswith(f"python -m deviating train {TINY} --seed 0 --steps {RECIPES[TINY].steps}")
    for key, value in prov["final_metrics"].items():
        if isinstance(value, float):
            assert tiny_run.metrics[key] == pytest.approx(value, abs=METRIC_ATOL), key
    for (n, p), q in zip(tiny_run.model.state_dict().items(), org.model.state_dict().values()):
        torch.testing.assert_close(p, q, atol=1e-3, rtol=0, msg=n)


def test_train_command_writes_a_loadable_checkpoint(tmp_path, capsys):
    out, log = tmp_path / "run", tmp_path / "curve.jsonl"
    assert main(["train", TINY, "--steps", "30", "--threads", "1", "--out", str(out), "--no-progress",
                 "--log", str(log)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["name"] == TINY and "loss_repeat" in printed["final_metrics"]
    for f in ("model.safetensors", "provenance.json", "loss_curve.json", "loss_curve.png", "tokenizer.json"):
        assert (out / f).is_file(), f
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["sha256"] == sha256_file(out / "model.safetensors")
    assert prov["steps"] == 30 and prov["config"] == RECIPES[TINY].config.to_dict()
    assert prov["command"] == f"python -m deviating train {TINY} --seed 0 --steps 30 --device cpu --threads 1 --out {out}"
    for key in ("data", "torch_version", "train_seconds", "cpu_seconds", "final_metrics", "phase_change", "files"):
        assert key in prov
    curve = json.loads((out / "loss_curve.json").read_text())
    assert [r["step"] for r in curve] == [0, 25, 30]
    assert [json.loads(line) for line in log.read_text().splitlines()] == curve  # --log: the same rows, as they came
    model, tok, _ = load_checkpoint(out)
    ids = tok(["t1 t2 t3 t1 t2"], return_tensors="pt")["input_ids"]
    assert model(ids).shape == (1, 6, RECIPES[TINY].config.d_vocab)
    assert not model.training


def test_train_command_log_in_a_missing_folder_is_refused_before_training(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "curve.jsonl"
    assert main(["train", TINY, "--out", str(tmp_path / "x"), "--no-progress", "--log", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "create it first" in err
    assert not (tmp_path / "x").exists()


def test_train_command_rejects_unknown_names(capsys):
    assert main(["train", "no-such-organism", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no-such-organism" in err and "attn-only-2l" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_train_command_without_cuda_says_so(capsys, tmp_path):
    assert main(["train", TINY, "--device", "cuda", "--out", str(tmp_path / "x")]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------- checkpoints

def test_available_and_unknown_organisms():
    names = available_organisms()
    assert {"attn-only-1l", "attn-only-2l", TINY} <= set(names)
    with pytest.raises(ValueError, match="unknown organism 'gpt-17'.*attn-only-2l"):
        load_organism("gpt-17")


def test_corrupt_checkpoint_is_refused_before_loading(tmp_path, monkeypatch):
    copy = tmp_path / TINY
    shutil.copytree(CHECKPOINT_DIR / TINY, copy)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-5] ^= 0xFF  # one flipped byte inside the weights
    (copy / "model.safetensors").write_bytes(bytes(data))
    loads = []
    import headlab.models.checkpoints as checkpoints
    real = checkpoints.load_file  # the reader the checkpoint loader calls
    monkeypatch.setattr(checkpoints, "load_file", lambda *a, **k: loads.append(a) or real(*a, **k))
    expected = json.loads((copy / "provenance.json").read_text())["sha256"]
    with pytest.raises(CheckpointError) as err:
        load_organism(TINY, checkpoint_dir=tmp_path)
    msg = str(err.value)
    assert "model.safetensors" in msg and expected in msg and sha256_file(copy / "model.safetensors") in msg
    assert f"python -m deviating train {TINY}" in msg
    assert loads == []  # nothing was read
    # the intact shipped checkpoint still loads, through the same (patched) reader
    load_organism(TINY)
    assert len(loads) == 1


def test_missing_tokenizer_file_is_refused(tmp_path):
    copy = tmp_path / TINY
    shutil.copytree(CHECKPOINT_DIR / TINY, copy)
    (copy / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json is missing"):
        load_checkpoint(copy)


def test_shipped_induction_organisms_behave_as_recorded():
    """The 2-layer model has an induction head in layer 1; the 1-layer model has none."""
    data = RepeatedSpans().sample(64, torch.Generator().manual_seed(99))
    best = {}
    for name in ("attn-only-1l", "attn-only-2l"):
        hm = headlab.load(name)
        prov = hm.provenance
        _, cache = hm.run_with_cache(data.tokens, names=["pattern"])
        scores = torch.stack([induction_score(cache.pattern(l), data.tokens).mean(0)
                              for l in range(hm.n_layers)])  # (layer, head)
        best[name] = (float(scores.max()), divmod(int(scores.argmax()), scores.shape[1]))
        assert best[name][0] == pytest.approx(prov["final_metrics"]["induction_best"], abs=0.05)
    assert best["attn-only-2l"][0] > 0.3 and best["attn-only-2l"][1][0] == 1
    assert best["attn-only-1l"][0] < 0.1
    prov2 = load_organism("attn-only-2l").provenance
    assert prov2["phase_change"]["step"] <= prov2["steps"]
    assert load_organism("attn-only-1l").provenance["phase_change"] is None


def test_headlab_load_serves_the_organisms():
    hm = headlab.load("attn-only-2l")
    assert (hm.n_layers, hm.n_heads, hm.d_head) == (2, 4, 16)
    assert hm.provenance["name"] == "attn-only-2l"
    batch = hm.tokenize(["t1 t2 t3 t4 t1 t2 t3", "t5 t6"])
    with torch.no_grad(), hm.capture(["pattern"]) as cache:
        logits = hm(batch)
    assert logits.shape == (2, 8, 66)
    assert cache.pattern(1).shape == (2, 4, 8, 8)


# ---------------------------------------------------------------------------- the synthetic-language task

@pytest.fixture(scope="module")
def lang_task():
    from deviating.data.windows import SyntheticLanguage
    return SyntheticLanguage(n_ctx=48, docs_per_chunk=32)


def test_language_batches_are_full_windows_and_deterministic(lang_task):
    tok = lang_task.tokenizer()
    first = lang_task.train_batches(8, torch.Generator().manual_seed(0))
    a = [next(first) for _ in range(5)]  # more windows than one chunk holds: the buffer refills
    b = [next(lang_task.train_batches(8, torch.Generator().manual_seed(0))) for _ in range(1)]
    c = next(lang_task.train_batches(8, torch.Generator().manual_seed(1)))
    assert all(x.shape == (8, 48) for x in a)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c)
    assert all((x[:, 0] == tok.bos_token_id).all() and not (x == tok.pad_token_id).any() for x in a)
    assert not torch.equal(a[0], a[1])
    assert len(lang_task.lang.vocab) == lang_task.d_vocab == len(tok)


class _Oracle(GPT):
    """A GPT whose logits put all the mass on the true next token (its attention still runs)."""

    def forward(self, input_ids, attention_mask=None):
        super().forward(input_ids, attention_mask)
        nxt = torch.roll(input_ids, -1, dims=1)  # (batch, pos)
        return torch.nn.functional.one_hot(nxt, self.config.d_vocab).float() * 30


def test_language_evaluation_on_known_answers(lang_task):
    from headlab.models.gpt import GPTConfig
    data = lang_task.eval_data(24)
    assert len(data.agreement) > 50 and len(data.pronoun) > 5 and len(data.copy) > 10
    cfg = GPTConfig(d_vocab=lang_task.d_vocab, n_ctx=48, d_model=16, n_layers=1, n_heads=2, d_mlp=0)
    torch.manual_seed(0)
    oracle = _Oracle(cfg).eval()
    m = lang_task.evaluate(oracle, data)
    for name in ("agreement", "pronoun", "copy", "rare"):
        if m[f"{name}_n"]:
            assert m[f"{name}_acc"] == 1.0, name
            assert all(cell["acc"] == 1.0 for table in m[f"{name}_by"].values() for cell in table.values())
    assert m["val_loss"] < 0.01
    by = m["agreement_by"]
    assert sum(c["n"] for c in by["construction"].values()) == m["agreement_n"]
    assert set(by["attractor"]) <= {"True", "False"}
    # an untrained model is at chance on agreement (two forms) and far from exact copying
    random_model = GPT(cfg).eval()
    r = lang_task.evaluate(random_model, data)
    assert 0.3 < r["agreement_acc"] < 0.7 and r["copy_acc"] < 0.1
    assert r["val_loss"] == pytest.approx(math.log(lang_task.d_vocab), abs=0.5)
    assert len(r["induction"]) == 1 and len(r["induction"][0]) == 2


def test_language_recipes():
    for name in ("organism", "organism-small-s0", "organism-small-s1", "organism-small-s2"):
        r = RECIPES[name]
        assert r.config.d_vocab == r.task.d_vocab and r.config.d_mlp > 0
    assert [RECIPES[f"organism-small-s{s}"].seed for s in range(3)] == [0, 1, 2]
    small = [RECIPES[f"organism-small-s{s}"].to_dict() for s in range(3)]
    for d in small:
        d.pop("seed"), d.pop("name"), d.pop("description")
    assert small[0] == small[1] == small[2]  # the seed is the only difference


LANGUAGE_ORGANISMS = ["organism", "organism-small-s0", "organism-small-s1", "organism-small-s2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", LANGUAGE_ORGANISMS)
def test_shipped_language_organisms_reproduce_their_recorded_metrics(name):
    """Re-evaluating the shipped weights gives the metrics in their provenance, and they learned the language."""
    model, tok, prov = load_organism(name)
    recipe = RECIPES[name]
    assert prov["config"] == recipe.config.to_dict() and prov["data"]["language"] == recipe.task.lang.describe()
    assert tok.get_vocab() == recipe.task.tokenizer().get_vocab()
    m = recipe.task.evaluate(model, recipe.task.eval_data(prov["data"]["eval_size"]))
    for key in ("val_loss", "agreement_acc", "pronoun_acc", "copy_acc", "rare_acc", "induction_best"):
        assert m[key] == pytest.approx(prov["final_metrics"][key], abs=1e-4), key
    assert m["agreement_by"] == prov["final_metrics"]["agreement_by"]
    # far above chance (agreement: 1/2, pronoun: 1/4 or less, copy: ~1/800)
    assert m["agreement_acc"] > 0.9 and m["pronoun_acc"] > 0.5 and m["copy_acc"] > 0.5


def test_ablating_either_layer_of_attn_only_2l_undoes_the_phase_change():
    """Through the head interface: zero-ablating all of layer 1 (the induction heads) or all of
    layer 0 (the previous-token heads) of the 2-layer organism takes its loss on repeated tokens
    from below 1 nat to above the 1-layer model's (measured: 0.79 -> 4.55 and 4.39; 1-layer 3.36)."""
    from headlab.metrics import next_token_loss
    data = RepeatedSpans().sample(64, torch.Generator().manual_seed(5))
    loss_mask = torch.zeros_like(data.predictable)
    loss_mask[:, :-1] = data.predictable[:, 1:]  # position t predicts a predictable token t + 1

    def loss_repeat(hm) -> float:
        with torch.no_grad():
            return float(next_token_loss(hm(data.tokens), data.tokens, loss_mask=loss_mask, reduction="mean"))

    two, one = headlab.load("attn-only-2l"), headlab.load("attn-only-1l")
    clean, one_layer = loss_repeat(two), loss_repeat(one)
    assert clean < 1.0 < one_layer
    for layer in (0, 1):
        with two.ablate([(layer, h) for h in range(4)]):
            assert loss_repeat(two) > one_layer, layer
    assert loss_repeat(two) == clean  # nothing left behind


# ---------------------------------------------------------------------------- the one loop


def _quadratic(target: float = 3.0):
    """A one-parameter model whose loss (w - target)^2 the loop must minimise."""
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    batches = iter(lambda: torch.ones(1), None)  # endless
    return model, batches, lambda batch: ((model.weight.sum() - target) ** 2) * batch.sum()


def test_run_loop_minimises_and_calls_every_hook_in_order():
    from deviating.training.loop import ExtraLoss, Objective, run_loop

    model, batches, loss = _quadratic()
    calls, lrs = [], []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def on_step(s):
        calls.append(("step", s.step, s.terms["loss"] is not None, s.terms["pull"]))
        lrs.append(opt.param_groups[0]["lr"])

    step = iter(range(1, 100))
    extra = ExtraLoss("pull", lambda b: None if next(step) % 2 == 0 else model.weight.sum() ** 2, 0.5)
    evals = []
    result = run_loop(model, opt, batches, 7, Objective(loss, extra=extra), lr_at=lambda i: 0.1 / (i + 1),
                      before_update=lambda: calls.append(("before", model.weight.grad is not None)),
                      on_step=on_step, evaluate=lambda: evals.append(1) or {"w": float(model.weight.detach()), "skip": [1]},
                      eval_every=3, progress=False)
    assert [r["step"] for r in result.curve] == [0, 3, 6, 7]  # at 0, every 3 steps and at the end
    assert len(evals) == 4 and result.metrics["w"] == result.curve[-1]["w"] and "skip" not in result.curve[-1]
    assert result.curve[0]["train_loss"] is None and result.curve[0]["train_pull"] is None
    assert calls[0] == ("before", True) and [c[0] for c in calls] == ["before", "step"] * 7
    assert lrs == pytest.approx([0.1 / (i + 1) for i in range(7)])
    # the extra term adds nothing on even steps (None) and pulls w towards 0 on odd ones: w stays below 3
    assert [c[3] is None for c in calls if c[0] == "step"] == [False, True, False, True, False, True, False]
    assert not model.training
    plain, batches, loss = _quadratic()
    run_loop(plain, torch.optim.SGD(plain.parameters(), lr=0.1), batches, 7, Objective(loss),
             lr_at=lambda i: 0.1 / (i + 1), progress=False)
    assert 0 < float(model.weight.detach()) < float(plain.weight.detach()) < 3.0


def test_run_loop_rejects_bad_settings():
    from deviating.training.loop import Objective, run_loop

    model, batches, loss = _quadratic()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        run_loop(model, opt, batches, 0, Objective(loss), progress=False)
    with pytest.raises(ValueError, match="evaluate needs eval_every"):
        run_loop(model, opt, batches, 2, Objective(loss), evaluate=dict, progress=False)


def test_warmup_cosine_known_values():
    from deviating.training.loop import warmup_cosine

    assert [warmup_cosine(i, 1.0, 4, 14) for i in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert warmup_cosine(4, 1.0, 4, 14) == pytest.approx(1.0)  # the cosine starts at the top
    assert warmup_cosine(9, 1.0, 4, 14) == pytest.approx(0.55)  # half way: 0.1 + 0.9 / 2
    assert warmup_cosine(14, 1.0, 4, 14) == pytest.approx(0.1) == warmup_cosine(99, 1.0, 4, 14)


# ---------------------------------------------------------------------------- the one registry


def test_one_registry_gathers_every_family_and_every_shipped_checkpoint():
    from deviating.training.recipes import BROWN, CHAPTERS_1_2, IOI, ORGANISMS, STUDENTS, WIDTH_DEPTH, get_recipe

    families = [ORGANISMS, CHAPTERS_1_2, STUDENTS, WIDTH_DEPTH, BROWN, IOI]
    assert sum(len(f) for f in families) == len(RECIPES)  # no name in two families
    assert all(RECIPES[name] is r for f in families for name, r in f.items())
    assert all(r.name == name for name, r in RECIPES.items())
    shipped = {p.name for p in CHECKPOINT_DIR.iterdir() if (p / "provenance.json").is_file()}
    assert shipped and shipped <= set(RECIPES), shipped - set(RECIPES)
    assert {"distill-student", "wd-2l-1h", "wd-4l-4h-flops"} <= set(RECIPES)
    assert get_recipe("heads-4") is CHAPTERS_1_2["heads-4"]
    with pytest.raises(ValueError, match="unknown recipe 'wd-3l'.*wd-2l-1h"):
        get_recipe("wd-3l")


def test_train_command_reaches_the_width_depth_family(tmp_path, capsys):
    out = tmp_path / "wd"
    assert main(["train", "wd-1l-4h", "--steps", "1", "--out", str(out), "--no-progress"]) == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["name"] == "wd-1l-4h" and prov["config"] == RECIPES["wd-1l-4h"].config.to_dict()
    assert [r["step"] for r in json.loads((out / "loss_curve.json").read_text())] == [0, 1]
