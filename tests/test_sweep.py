"""Batched sweeps equal the one-forward-per-head loop, on every adapter and mode; the Ablation and
Metric values are checked where they are made; 0.1's keyword arguments still work, with a warning;
the sweep's JSON carries its schema and reads back."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from headlab.analysis.sweep import SCHEMA, SweepResult, loop_sweep, sweep
from headlab.heads.ablation import Ablation
from headlab.metrics import Metric
from headlab.schema import SchemaError
from tiny_models import ADAPTER_FACTORIES, make_model, random_batch


@pytest.mark.parametrize("name", sorted(ADAPTER_FACTORIES))
@pytest.mark.parametrize("mode", ["zero", "mean", "resample"])
def test_batched_sweep_equals_loop(name, mode):
    hm = make_model(name)
    batch = random_batch(hm, n=3, seq=6)
    reference = None if mode == "zero" else random_batch(hm, n=4, seq=8, seed=5)
    ablation = Ablation(mode, reference=reference)
    fast = sweep(hm, batch, ablation=ablation, max_batch=7)  # several chunks of 2 groups
    slow = loop_sweep(hm, batch, ablation=ablation)
    assert fast.groups == slow.groups == [((l, h),) for l in range(2) for h in range(4)]
    torch.testing.assert_close(fast.effects, slow.effects, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(fast.clean, slow.clean)
    assert fast.effects.abs().max() > 1e-5  # the ablations did something
    by_head = fast.by_head()
    assert by_head.shape == (2, 4, 3)
    torch.testing.assert_close(by_head[1, 2], fast.effects[6])


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_group_sweeps_and_padding(name):
    hm = make_model(name)
    batch = random_batch(hm, n=3, seq=6)
    batch["attention_mask"][1, 4:] = 0  # a padded input
    groups = [[(0, 1), (1, 3)], (1, 0), [(0, 0), (0, 2), (1, 1)]]
    fast = sweep(hm, batch, groups=groups)
    slow = loop_sweep(hm, batch, groups=groups)
    torch.testing.assert_close(fast.effects, slow.effects, atol=1e-5, rtol=1e-4)
    assert fast.groups[1] == ((1, 0),)


def test_loss_mask_restricts_the_metric():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=6)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 3] = True  # only the prediction made at position 3 counts
    res = sweep(hm, batch, metric=Metric("loss", loss_mask=mask))
    with torch.no_grad():
        logits = hm(batch)
        clean = torch.nn.functional.cross_entropy(logits[:, 3], batch["input_ids"][:, 4], reduction="none")
    torch.testing.assert_close(res.clean, clean)


def test_encoder_metrics():
    hm = make_model("bert")
    batch = random_batch(hm, n=3, seq=6)
    cos = sweep(hm, batch, metric=Metric("cosine"))
    assert torch.all(cos.clean.abs() < 1e-6) and torch.all(cos.effects >= -1e-6)
    ret = sweep(hm, batch, metric="retrieval")  # a kind name is shorthand for Metric(kind)
    assert torch.all(ret.clean > 0) and ret.kind == "retrieval"
    with pytest.raises(ValueError, match="encoder with no language-model head"):
        sweep(hm, batch, metric=Metric("loss"))


def test_sweep_bad_input():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    with pytest.raises(ValueError, match="unknown ablation mode 'erase'"):
        sweep(hm, batch, ablation="erase")
    with pytest.raises(ValueError, match=r"loss_mask \(2, 6\) must have the shape of the inputs \(3, 6\)"):
        sweep(hm, batch, metric=Metric(loss_mask=torch.ones(2, 6, dtype=torch.bool)))
    with pytest.raises(TypeError, match="ablation must be an Ablation"):
        sweep(hm, batch, ablation=0.5)
    with pytest.raises(ValueError, match="groups is empty"):
        sweep(hm, batch, groups=[])
    with pytest.raises(ValueError, match="out of range"):
        sweep(hm, batch, groups=[[(5, 0)]])
    with pytest.raises(ValueError, match="max_batch"):
        sweep(hm, batch, max_batch=2)


def test_to_json_round_trips():
    hm = make_model("gpt2")
    res = sweep(hm, random_batch(hm, n=2, seq=5), groups=[[(0, 3)], [(1, 0), (0, 2)]])
    payload = json.loads(json.dumps(res.to_json()))
    assert payload["schema"] == SCHEMA == "headlab.sweep/1"
    assert payload["n_layers"] == 2 and len(payload["groups"]) == 2
    assert payload["groups"][0]["heads"] == [[0, 3]] and payload["groups"][1]["heads"] == [[0, 2], [1, 0]]
    assert payload["groups"][0]["effects"] == pytest.approx(res.effects[0].tolist(), abs=1e-6)
    back = SweepResult.from_json(payload)
    assert back.groups == res.groups and (back.mode, back.kind) == (res.mode, res.kind)
    torch.testing.assert_close(back.effects, res.effects, atol=1e-6, rtol=0)
    with pytest.raises(SchemaError, match="headlab.sweep/9.*newer than this headlab reads"):
        SweepResult.from_json({**payload, "schema": "headlab.sweep/9"}, "sweep.json")
    with pytest.raises(SchemaError, match="is a headlab atlas file"):
        SweepResult.from_json({**payload, "schema": "headlab.atlas/1"})


def test_ablation_is_checked_where_it_is_made():
    assert Ablation().mode == "zero" and Ablation.of(None).mode == "zero" and Ablation.of("zero").reference is None
    with pytest.raises(ValueError, match="unknown ablation mode 'erase': choose from zero, mean, resample"):
        Ablation("erase")
    with pytest.raises(ValueError, match="zero ablation takes no reference"):
        Ablation("zero", reference=["a text"])
    for mode in ("mean", "resample"):
        with pytest.raises(ValueError, match=f"{mode} ablation needs reference="):
            Ablation(mode)
    with pytest.raises(TypeError, match="seed must be an int"):
        Ablation("resample", reference=["a"], seed=1.5)


def test_metric_is_checked_where_it_is_made():
    assert Metric().name is None and Metric("cosine").name == "cosine" and Metric.of("loss").kind == "loss"
    with pytest.raises(ValueError, match="unknown metric kind 'accuracy'"):
        Metric("accuracy")
    with pytest.raises(ValueError, match="loss_mask selects positions of the next-token loss"):
        Metric("cosine", loss_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"loss_mask must be a \(batch, pos\) tensor"):
        Metric("loss", loss_mask=torch.ones(3, dtype=torch.bool))


def test_old_keyword_arguments_still_work_and_show_the_new_call():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    reference = random_batch(hm, n=4, seq=8, seed=5)
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[:, 2:] = True
    with pytest.warns(DeprecationWarning) as caught:
        old = sweep(hm, batch, mode="mean", reference=reference, kind="loss", loss_mask=mask)
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    message = str(warning.message)
    assert "sweep(mode=, reference=, kind=, loss_mask=...) is deprecated" in message
    assert ("sweep(..., ablation=Ablation('mean', reference=...), metric=Metric('loss', loss_mask=...))"
            in message)
    assert warning.filename == __file__  # it points at the caller's line, not into the library
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = sweep(hm, batch, ablation=Ablation("mean", reference=reference), metric=Metric("loss", loss_mask=mask))
    torch.testing.assert_close(old.effects, new.effects)
    with pytest.raises(TypeError, match="give either ablation= or mode=, not both"):
        sweep(hm, batch, ablation=Ablation(), mode="zero")
    with pytest.raises(TypeError, match="unexpected keyword argument 'modes'"):
        sweep(hm, batch, modes="zero")


def test_custom_metric_sees_the_input_index():
    """A callable metric (here: is the logit of a per-input target token the largest at a
    per-input position) gets the tiled batch with each row's input index."""
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    pos = torch.tensor([2, 4, 5])
    target = torch.tensor([7, 1, 30])

    def target_logit(output, b):
        i = b["index"]
        rows = torch.arange(len(i))
        return output[rows, pos[i], target[i]]

    fast = sweep(hm, batch, metric=Metric(target_logit))
    slow = loop_sweep(hm, batch, metric=target_logit)  # a callable is shorthand for Metric(it)
    torch.testing.assert_close(fast.effects, slow.effects, atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        logits = hm(batch)
    torch.testing.assert_close(fast.clean, logits[torch.arange(3), pos, target])
    assert fast.kind == "target_logit"
