"""Batched sweeps equal the one-forward-per-head loop, on every adapter and mode, for single heads,
pairs and groups; the lower layers run once; the chunking rule's choices; the Ablation and
Metric values are checked where they are made; 0.1's keyword arguments are refused; a metric of the
wrong shape and a malformed JSON get errors that name them; the sweep's JSON carries its schema and
reads back."""

from __future__ import annotations

import json

import pytest
import torch

from headlab.analysis.importance import pair_effects, subset_effects
from headlab.analysis.sweep import SCHEMA, SweepResult, loop_sweep, sweep
from headlab.heads.replay import chunk_plan, groups_per_pass, tile_budget
from headlab.heads.ablation import Ablation
from headlab.heads.model import HeadModel
from headlab.heads.replay import CleanRecord, tiled_from_gate
from headlab.metrics import Metric, default_kind
from headlab.schema import SchemaError
from tiny_models import ADAPTER_FACTORIES, make_model, random_batch


@pytest.mark.parametrize("name", sorted(ADAPTER_FACTORIES))
@pytest.mark.parametrize("mode", ["zero", "mean", "resample"])
def test_batched_sweep_equals_loop(name, mode):
    hm = make_model(name)
    batch = random_batch(hm, n=3, seq=6)
    reference = None if mode == "zero" else random_batch(hm, n=4, seq=8, seed=5)
    ablation = Ablation(mode, reference=reference)
    slow = loop_sweep(hm, batch, ablation=ablation)
    assert slow.groups == [((l, h),) for l in range(2) for h in range(4)]
    for kwargs in ({}, {"max_batch": 7}, {"per_pass": 1}, {"per_pass": 3}):  # 4, 2, 1 and 3 + 1 per pass
        fast = sweep(hm, batch, ablation=ablation, **kwargs)
        assert fast.groups == slow.groups
        torch.testing.assert_close(fast.effects, slow.effects, atol=1e-6, rtol=0)
        torch.testing.assert_close(fast.clean, slow.clean, atol=1e-6, rtol=0)
    assert fast.effects.abs().max() > 1e-5  # the ablations did something
    assert hm.hooks_installed == 0
    by_head = fast.by_head()
    assert by_head.shape == (2, 4, 3)
    torch.testing.assert_close(by_head[1, 2], fast.effects[6])


@pytest.mark.parametrize("name", sorted(ADAPTER_FACTORIES))
def test_group_sweeps_and_padding(name):
    """Groups across layers, padded inputs, and as many tiles as inputs (k == n == 2)."""
    hm = make_model(name)
    batch = random_batch(hm, n=2, seq=6)
    batch["attention_mask"][1, 4:] = 0  # a padded input
    groups = [[(0, 1), (1, 3)], (1, 0), [(0, 0), (0, 2), (1, 1)], [(1, 2), (1, 3)]]
    slow = loop_sweep(hm, batch, groups=groups)
    for per_pass in (None, 1, 2):
        fast = sweep(hm, batch, groups=groups, per_pass=per_pass)
        torch.testing.assert_close(fast.effects, slow.effects, atol=1e-6, rtol=0)
    assert fast.groups[1] == ((1, 0),)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa", "headlab"])
def test_pairs_and_groups_equal_their_loop(name):
    """Chapter 6's pair ablations (every pair in a layer) and random groups across layers go
    through the batched sweep; each equals one forward pass per group."""
    hm = make_model(name)
    batch = random_batch(hm, n=3, seq=6)
    pairs = pair_effects(hm, batch)
    assert len(pairs.pairs) == 2 * 6
    keys = list(pairs.pairs)
    slow = loop_sweep(hm, batch, groups=[list(p) for p in keys])
    torch.testing.assert_close(torch.stack([pairs.pairs[p] for p in keys]), slow.effects, atol=1e-6, rtol=0)
    singles = loop_sweep(hm, batch)
    torch.testing.assert_close(torch.stack([pairs.singles[g[0]] for g in singles.groups]), singles.effects,
                               atol=1e-6, rtol=0)
    rows = subset_effects(hm, batch, sizes=(2, 5), n_per_size=3, seed=1)
    looped = loop_sweep(hm, batch, groups=[list(r["heads"]) for r in rows])
    assert any(len({l for l, _ in r["heads"]}) == 2 for r in rows)  # groups across layers
    for row, effect in zip(rows, looped.effects):
        assert row["effect"] == pytest.approx(float(effect.mean()), abs=1e-6)


def test_lower_layers_run_once_per_input():
    """The clean pass's blocks are replayed, not recomputed: layer 0's output projection runs
    in the clean pass and in the chunks that ablate layer 0, never in the chunks of layer 1."""
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    calls = {0: [], 1: []}
    # rows = every dimension but (pos, d_model): W_O's output is viewed as (k, n, pos, d_model) when tiled
    handles = [hm.out_proj(l).register_forward_hook(lambda m, a, out, l=l: calls[l].append(out.shape[:-2].numel()))
               for l in (0, 1)]
    try:
        sweep(hm, batch, per_pass=2)  # 4 heads a layer: 2 chunks of 2 per layer
    finally:
        for h in handles:
            h.remove()
    assert calls[0] == [3, 6, 6]  # clean pass, then the 2 chunks of layer 0 (2 tiles of 3 inputs)
    assert calls[1] == [3, 6, 6, 6, 6]  # layer 1 also runs in the chunks of layer 0


def test_model_is_restored_after_an_error_inside_a_sweep():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=5)
    before = hm(batch)

    def broken(output, b):
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        sweep(hm, batch, metric=Metric(broken), per_pass=2)
    assert hm.hooks_installed == 0
    for block in hm.blocks:
        assert "forward" not in vars(block)  # no block left replaying a recorded output
        assert not block._forward_hooks and not block._forward_pre_hooks
    torch.testing.assert_close(hm(batch), before, atol=0, rtol=0)


def test_chunking_rule():
    g = [((0, h),) for h in range(12)] + [((1, 0), (2, 1)), ((2, 3),), ((1, 4),)]
    assert chunk_plan(g, 5) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 14], [13]]  # 4+4+4, not 5+5+2
    assert chunk_plan(g, 12)[0] == list(range(12)) and len(chunk_plan(g, 1)) == len(g)
    with pytest.raises(ValueError, match="per_pass must be at least 1"):
        chunk_plan(g, 0)
    mib = 2**20
    budget = tile_budget("cpu")
    assert budget == 8 * mib  # the same on every CPU: chunks do not depend on the machine
    # the benchmark's GPT-2 case: 16 x 32 tokens x 1536 MLP floats = 3 MiB a copy -> 2 per pass
    assert groups_per_pass(16 * 32 * 1536 * 4, budget, cap=12) == 2
    assert groups_per_pass(mib, budget, cap=12) == 8
    assert groups_per_pass(mib // 64, budget, cap=12) == 12  # capped by the groups a layer has
    assert groups_per_pass(64 * mib, budget, cap=12) == 1  # never fewer than one
    with pytest.raises(ValueError, match="must be positive"):
        groups_per_pass(0, budget, cap=12)


def test_sweep_chooses_groups_per_pass():
    hm = make_model("gpt2")  # tiny: one copy of 3 x 6 tokens is far below the budget
    batch = random_batch(hm, n=3, seq=6)
    assert sweep(hm, batch).per_pass == 4  # every head of a layer in one pass
    assert sweep(hm, batch, max_batch=7).per_pass == 2  # at most 7 inputs: 2 tiles of 3
    assert sweep(hm, batch, per_pass=3).per_pass == 3
    with pytest.raises(ValueError, match="per_pass must be a positive int"):
        sweep(hm, batch, per_pass=0)
    # a wide MLP: the widest activation, measured in the clean pass, sets the tile
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    wide = HeadModel(GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=4, n_embd=8, n_inner=20_000, vocab_size=61,
                                                n_positions=64, bos_token_id=0, eos_token_id=0)).eval())
    big = random_batch(wide, n=8, seq=16)  # 8 x 16 tokens x 20,000 floats = 9.8 MiB a copy: 1 per pass
    assert sweep(wide, big).per_pass == 1
    small = random_batch(wide, n=2, seq=16)  # 2.4 MiB a copy: 3 fit in 8 MiB
    assert sweep(wide, small).per_pass == 3


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


def test_the_loose_keywords_of_0_1_are_gone():
    """0.2.0 removed ``mode=``, ``reference=``, ``seed=``, ``kind=``, ``loss_mask=`` (CHANGELOG.md):
    only the Ablation and Metric values remain, and the old keywords are refused by name."""
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    reference = random_batch(hm, n=4, seq=8, seed=5)
    for function in (sweep, loop_sweep, pair_effects, subset_effects):
        for keyword, value in (("mode", "mean"), ("reference", reference), ("kind", "loss"), ("seed", 1)):
            if function is subset_effects and keyword == "seed":
                continue  # its own seed draws the subsets
            with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
                function(hm, batch, **{keyword: value})
    with pytest.raises(TypeError, match="unexpected keyword argument 'mode'"):
        hm.ablate([(0, 0)], mode="mean", reference=reference).__enter__()
    assert not hasattr(__import__("headlab.heads.ablation").heads.ablation, "upgrade_arguments")
    mean = Ablation("mean", reference=reference)
    with torch.no_grad(), hm.ablate([(0, 1)], mean):  # the value, positionally
        ablated = hm(batch)
    with torch.no_grad(), hm.ablate([(0, 1)], ablation=mean):
        torch.testing.assert_close(hm(batch), ablated)
    with pytest.raises(TypeError, match="replacements needs an Ablation, got str 'mean'"):
        hm.replacements("mean", [0])


def test_a_metric_that_returns_one_scalar_is_refused_by_name():
    """Issue 28, item 5: a metric reducing over the inputs used to fail inside a reshape
    ("shape '[1, 2]' is invalid"); now the error names the metric, the shape and the fix."""
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)

    def mean_loss(output, b):
        return output.float().logsumexp(-1).mean()  # one number for the whole batch

    for run in (sweep, loop_sweep):
        with pytest.raises(ValueError, match=r"metric 'mean_loss' returned shape \(\) for a batch of 3 rows .*"
                                             r"one value per row, shape \(3,\)"):
            run(hm, batch, metric=Metric(mean_loss))
    with pytest.raises(ValueError, match=r"returned list .*one value per row"):
        sweep(hm, batch, metric=Metric(lambda output, b: [0.0] * len(output)))
    assert hm.hooks_installed == 0


def test_from_json_names_what_is_wrong():
    """Issue 28, item 5: ``SweepResult.from_json({"groups": "x"})`` used to fail with "string
    indices must be integers"; each malformed field is now named, with what to read instead."""
    hm = make_model("gpt2")
    good = sweep(hm, random_batch(hm, n=2, seq=5), groups=[[(0, 3)]]).to_json()
    with pytest.raises(SchemaError, match="has no 'mode' field"):
        SweepResult.from_json({"groups": "x"})
    with pytest.raises(SchemaError, match=r"'groups' must be a list .*got 'x'; read a file written by to_json"):
        SweepResult.from_json({**good, "groups": "x"})
    with pytest.raises(SchemaError, match=r"group 0 must be .*got \[1, 2\]"):
        SweepResult.from_json({**good, "groups": [[1, 2]]})
    with pytest.raises(SchemaError, match=r"group 0 must have one effect per input \(2"):
        SweepResult.from_json({**good, "groups": [{"heads": [[0, 3]], "effects": [0.1]}]})
    with pytest.raises(SchemaError, match=r"'clean' must be a list of numbers"):
        SweepResult.from_json({**good, "clean": "0.5"})
    with pytest.raises(SchemaError, match=r"'n_heads' must be a positive int, got '4'"):
        SweepResult.from_json({**good, "n_heads": "4"})
    with pytest.raises(SchemaError, match=r"a group's heads are not \[\[layer, head\]"):
        SweepResult.from_json({**good, "groups": [{"heads": [["a", 3]], "effects": [0.1, 0.2]}]})
    with pytest.raises(SchemaError, match="expected a JSON object, got str"):
        SweepResult.from_json("x")


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


def test_one_default_metric_rule():
    """``metrics.default_kind`` is the one rule: a sweep, HeadModel.metric and head_gradients follow it."""
    assert (default_kind(True), default_kind(False), default_kind(False, gradients=True)) == \
        ("loss", "cosine", "retrieval")
    assert default_kind(True, gradients=True) == "loss"
    for name in ("gpt2", "bert"):
        hm = make_model(name)
        batch = random_batch(hm, n=3, seq=6)
        assert sweep(hm, batch, groups=[(0, 0)]).kind == default_kind(hm.causal)
    bert = make_model("bert")
    batch = random_batch(bert, n=3, seq=6)
    torch.testing.assert_close(bert.head_gradients(batch), bert.head_gradients(batch, Metric("retrieval")))


def test_the_replay_refuses_what_it_did_not_record():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=5)
    record = CleanRecord(hm, 10, keep=True)
    with pytest.raises(ValueError, match=r"layers \[0, 1\] were not recorded"):
        with record.replaying(2):
            pass
    with torch.no_grad(), record.recording():
        clean = hm(batch)
    assert record.seen and sorted(record.outputs) == [0, 1] and record.width >= hm.d_model
    assert hm.hooks_installed == 0
    with torch.no_grad(), record.replaying(2):
        torch.testing.assert_close(hm(batch), clean)  # every block replayed: the same logits
    with pytest.raises(ValueError, match="below must be between 0 and 2, got 3"):
        with record.replaying(3):
            pass
    assert all("forward" not in vars(b) for b in hm.blocks)
    with pytest.raises(ValueError, match=r"n \(2\) and k \(0\) must be positive"):
        with tiled_from_gate(hm, 0, 2, 0, None):
            pass
