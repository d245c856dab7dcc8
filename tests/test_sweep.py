"""Batched sweeps equal the one-forward-per-head loop, on every adapter and mode."""

from __future__ import annotations

import json

import pytest
import torch

from headlab.analysis.sweep import loop_sweep, sweep
from tiny_models import ADAPTER_FACTORIES, make_model, random_batch


@pytest.mark.parametrize("name", sorted(ADAPTER_FACTORIES))
@pytest.mark.parametrize("mode", ["zero", "mean", "resample"])
def test_batched_sweep_equals_loop(name, mode):
    hm = make_model(name)
    batch = random_batch(hm, n=3, seq=6)
    reference = None if mode == "zero" else random_batch(hm, n=4, seq=8, seed=5)
    fast = sweep(hm, batch, mode=mode, reference=reference, max_batch=7)  # several chunks of 2 groups
    slow = loop_sweep(hm, batch, mode=mode, reference=reference)
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
    res = sweep(hm, batch, loss_mask=mask)
    with torch.no_grad():
        logits = hm(batch)
        clean = torch.nn.functional.cross_entropy(logits[:, 3], batch["input_ids"][:, 4], reduction="none")
    torch.testing.assert_close(res.clean, clean)


def test_encoder_metrics():
    hm = make_model("bert")
    batch = random_batch(hm, n=3, seq=6)
    cos = sweep(hm, batch, kind="cosine")
    assert torch.all(cos.clean.abs() < 1e-6) and torch.all(cos.effects >= -1e-6)
    ret = sweep(hm, batch, kind="retrieval")
    assert torch.all(ret.clean > 0)
    with pytest.raises(ValueError, match="encoder with no language-model head"):
        sweep(hm, batch, kind="loss")


def test_sweep_bad_input():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    with pytest.raises(ValueError, match="unknown ablation mode"):
        sweep(hm, batch, mode="erase")
    with pytest.raises(ValueError, match="groups is empty"):
        sweep(hm, batch, groups=[])
    with pytest.raises(ValueError, match="out of range"):
        sweep(hm, batch, groups=[[(5, 0)]])
    with pytest.raises(ValueError, match="max_batch"):
        sweep(hm, batch, max_batch=2)


def test_to_json_round_trips():
    hm = make_model("gpt2")
    res = sweep(hm, random_batch(hm, n=2, seq=5))
    payload = json.loads(json.dumps(res.to_json()))
    assert payload["n_layers"] == 2 and len(payload["groups"]) == 8
    assert payload["groups"][3]["heads"] == [[0, 3]]
    assert payload["groups"][3]["effects"] == pytest.approx(res.effects[3].tolist(), abs=1e-6)


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

    fast = sweep(hm, batch, kind=target_logit)
    slow = loop_sweep(hm, batch, kind=target_logit)
    torch.testing.assert_close(fast.effects, slow.effects, atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        logits = hm(batch)
    torch.testing.assert_close(fast.clean, logits[torch.arange(3), pos, target])
    assert fast.kind == "target_logit"
