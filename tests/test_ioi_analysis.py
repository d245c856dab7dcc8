"""The indirect-object model and the analysis of its circuit: the shipped seeds do the task on
held-out names and templates, and every measurement of deviating.analysis.ioi* obeys what it
promises (a known value, an invariant, or an error naming the bad input)."""

from __future__ import annotations

import pytest
import torch

import headlab
from deviating.analysis.ioi import (
    IoiMetric, attention_scores, effect_fraction, evaluation_prompts, head_dla, logit_diffs, patch_heads,
    path_patch_senders, prompt_batch,
)
from deviating.analysis.ioi_circuit import backup_test, complement, faithfulness, make_ablation
from deviating.analysis.ioi_roles import ROLES, THRESHOLDS, find_roles
from deviating.data.ioi.prompts import logit_diff
from deviating.data.ioi.windows import IoiSplit
from deviating.experiments.ioi_circuit import IOI_MODELS


@pytest.fixture(scope="module")
def hm():
    torch.set_num_threads(1)
    return headlab.load("ioi-gpt", device="cpu")


@pytest.fixture(scope="module")
def prompts(hm):
    return evaluation_prompts(hm, 64, seed=0)


@pytest.mark.parametrize("name", IOI_MODELS)
def test_every_shipped_seed_does_the_task_on_held_out_names_and_templates(name):
    model = headlab.load(name, device="cpu")
    split = IoiSplit.from_provenance(model.provenance)
    assert not set(split.train_names) & set(split.heldout_names)
    assert not set(split.train_templates) & set(split.heldout_templates)
    clean, _ = evaluation_prompts(model, 64, seed=7)  # prompts the training run never scored
    diffs = logit_diffs(model, clean)
    assert float((diffs > 0).float().mean()) >= 0.9
    prov = model.provenance
    assert prov["final_metrics"]["ioi_accuracy"] >= 0.9 and prov["cpu_seconds"] > 0 and prov["threads"] == 1


def test_the_provenance_split_is_refused_for_another_model():
    with pytest.raises(ValueError, match="ioi_windows"):
        IoiSplit.from_provenance(headlab.load("brown-gpt", device="cpu").provenance)


def test_the_metric_reads_tiled_rows_by_index(hm, prompts):
    clean, _ = prompts
    logits = hm.forward(prompt_batch(clean))
    direct = logit_diff(logits, clean)
    tiled = IoiMetric(clean)(logits.repeat(2, 1, 1), {"index": torch.arange(len(clean)).repeat(2)})
    assert torch.allclose(tiled, direct.repeat(2).float())
    with pytest.raises(ValueError, match="prompts"):
        IoiMetric(clean.subset(range(4)))(logits, {"index": torch.arange(len(clean))})


def test_effect_fraction_known_values_and_a_gap_of_zero():
    clean, corrupted = torch.tensor([3.0, 5.0]), torch.tensor([1.0, 1.0])
    patched = torch.tensor([[1.0, 1.0], [4.0, 4.0]])  # prompt-major: (n=2, 2 patches)
    assert torch.allclose(effect_fraction(patched, clean, corrupted), torch.tensor([-0.5, -0.5]))
    assert torch.allclose(effect_fraction(torch.tensor([[1.0], [1.0]]), clean, corrupted), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="same mean"):
        effect_fraction(patched, clean, clean)


def test_direct_shares_vanish_for_an_ablated_head_and_sum_below_the_logit_difference(hm, prompts):
    clean, _ = prompts
    dla = head_dla(hm, clean.subset(range(8)))
    assert dla.shape == (8, hm.n_layers, hm.n_heads)
    with hm.ablate([(3, 0)]):
        ablated = head_dla(hm, clean.subset(range(8)))
    assert torch.all(ablated[:, 3, 0] == 0) and not torch.all(ablated[:, 2, 1] == dla[:, 2, 1])


def test_patching_identical_runs_is_refused_and_senders_above_the_receiver_are_zero(hm, prompts):
    clean, abc = prompts
    few, few_abc = clean.subset(range(16)), abc.subset(range(16))
    with pytest.raises(ValueError, match="same mean"):
        patch_heads(hm, few, few)
    out = path_patch_senders(hm, few, few_abc, (2, 1), inputs=("q",))
    assert out.shape == (1, hm.n_layers, hm.n_heads)
    assert torch.all(out[:, 2:] == 0) and torch.any(out[:, :2] != 0)


def test_attention_scores_are_means_of_probabilities(hm, prompts):
    clean, _ = prompts
    att = attention_scores(hm, clean)
    for v in att.values():
        assert v.shape == (hm.n_layers, hm.n_heads) and float(v.min()) >= 0 and float(v.max()) <= 1
    # from END, the weights on IO, S1 and S2 are three of the keys of one distribution
    assert float((att["END->IO"] + att["END->S1"] + att["END->S2"]).max()) <= 1 + 1e-5


def test_faithfulness_of_every_head_is_one_and_of_no_head_is_the_ablated_model(hm, prompts):
    clean, abc = prompts
    every = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    whole = faithfulness(hm, clean, every, abc)
    assert all(abs(v["faithfulness"] - 1) < 1e-6 for v in whole.values())
    empty = faithfulness(hm, clean, [], abc, kinds=("zero",))["zero"]
    assert abs(empty["circuit"] - empty["no_heads"]) < 1e-5
    assert complement(hm, every) == []
    with pytest.raises(ValueError, match="reference"):
        make_ablation("mean")
    with pytest.raises(ValueError, match="unknown ablation"):
        make_ablation("half")


def test_the_backup_test_removes_what_it_says(hm, prompts):
    clean, abc = prompts
    few = clean.subset(range(24))
    b = backup_test(hm, few, [(3, 0)], make_ablation("mean", abc))
    assert (3, 0) not in b.change and len(b.change) == hm.n_layers * hm.n_heads - 1
    assert abs(b.drop.value - float((b.clean - b.ablated).mean())) < 1e-5
    assert torch.all(b.dla_ablated[:, 3, 0] == 0)
    with pytest.raises(ValueError, match="removed is empty"):
        backup_test(hm, few, [])


def test_roles_follow_their_definitions(hm, prompts):
    clean, abc = prompts
    roles = find_roles(hm, clean, abc)
    t = roles.thresholds
    assert t == THRESHOLDS and roles.logit_diff > 0
    movers = roles.heads_with("name mover")
    assert movers, "the shipped model has no name mover"
    for h in movers:
        e = roles.evidence[h]
        assert e.dla >= t["dla"] and e.end_io > t["attend"] and e.end_io > e.end_s
    for h in roles.heads_with("S-inhibition"):
        assert roles.evidence[h].si_path <= -t["path"] and h[0] < max(l for l, _ in movers)
    for h in roles.no_role():
        e = roles.evidence[h]
        assert e.s2_s1 <= t["pattern"] and e.s2_s1_next <= t["pattern"] and e.prev <= t["previous"]
    core = [h for h, r in roles.roles.items() if r in ROLES[:4]]
    assert set(core) <= set(roles.circuit)
    assert set(roles.table()) == set(ROLES) | {"no role"}
    with pytest.raises(ValueError, match="unknown thresholds"):
        find_roles(hm, clean, abc, thresholds={"nope": 1.0})
