"""The analysis of the indirect-object circuit (deviating.analysis.ioi*): every measurement obeys what
it promises (a known value, an invariant, or an error naming the bad input). It runs on a small
random GPT over a tokenizer that keeps names whole, so it needs neither the corpus nor a shipped model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deviating.analysis.ioi import (
    IoiMetric, attention_scores, effect_fraction, head_dla, logit_diffs, patch_head_positions, patch_heads,
    path_patch_senders, prompt_batch,
)
from deviating.analysis.ioi_circuit import backup_test, complement, faithfulness, make_ablation
from deviating.analysis.ioi_roles import ROLES, THRESHOLDS, find_roles
from deviating.data.ioi.names import name_tokenizer
from deviating.data.ioi.prompts import corrupt_abc, logit_diff, make_prompts
from deviating.data.ioi.windows import IoiSplit
from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT, GPTConfig

NAMES = ["Mary", "John", "Alice", "Peter", "Susan", "George", "Kate", "Henry", "Ruth", "Walter"]
TEXTS = ["When the man went to the store, he gave a book to his friend. The river was quiet."] * 40


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tok = name_tokenizer(TEXTS, NAMES, vocab_size=300)
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=tok.get_vocab_size(), n_ctx=64, d_model=32, n_layers=3, n_heads=2, d_mlp=64))
    hm = HeadModel(model.eval(), name="a random GPT")
    clean = make_prompts(tok, NAMES, range(4), 12, seed=0)
    return hm, tok, clean, corrupt_abc(tok, clean, NAMES, seed=1)


def test_the_metric_reads_tiled_rows_by_index(setup):
    hm, _, clean, _ = setup
    logits = hm.forward(prompt_batch(clean))
    direct = logit_diff(logits, clean)
    tiled = IoiMetric(clean)(logits.repeat(2, 1, 1), {"index": torch.arange(len(clean)).repeat(2)})
    assert torch.allclose(tiled, direct.repeat(2).float())
    assert torch.allclose(logit_diffs(hm, clean), direct.float())
    with pytest.raises(ValueError, match="prompts"):
        IoiMetric(clean.subset(range(4)))(logits, {"index": torch.arange(len(clean))})


def test_effect_fraction_known_values_and_a_gap_of_zero():
    clean, corrupted = torch.tensor([3.0, 5.0]), torch.tensor([1.0, 1.0])
    patched = torch.tensor([[1.0, 1.0], [4.0, 4.0]])  # prompt-major: (n=2, 2 patches)
    assert torch.allclose(effect_fraction(patched, clean, corrupted), torch.tensor([-0.5, -0.5]))
    assert torch.allclose(effect_fraction(torch.tensor([[1.0], [1.0]]), clean, corrupted), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="same mean"):
        effect_fraction(patched, clean, clean)


def test_direct_shares_vanish_for_an_ablated_head(setup):
    hm, _, clean, _ = setup
    dla = head_dla(hm, clean)
    assert dla.shape == (len(clean), hm.n_layers, hm.n_heads) and bool(dla.abs().sum() > 0)
    with hm.ablate([(2, 0)]):
        ablated = head_dla(hm, clean)
    assert torch.all(ablated[:, 2, 0] == 0) and not torch.equal(ablated[:, 1, 1], dla[:, 1, 1])


def test_patching_a_run_into_itself_is_refused_and_a_patch_moves_the_metric_toward_abc(setup):
    hm, _, clean, abc = setup
    with pytest.raises(ValueError, match="same mean"):
        patch_heads(hm, clean, clean)
    per_head = patch_heads(hm, clean, abc)
    assert per_head.shape == (hm.n_layers, hm.n_heads) and torch.isfinite(per_head).all()
    by_position = patch_head_positions(hm, clean, abc)
    assert by_position.shape == (hm.n_layers, hm.n_heads, 5)
    # a head's output at END depends only on END's row: patching END of a last-layer head reproduces
    # the whole-head patch of that head, which changes nothing before END
    assert torch.allclose(by_position[2, :, -1], per_head[2], atol=1e-5)


def test_senders_at_or_above_the_receiver_are_zero(setup):
    hm, _, clean, abc = setup
    out = path_patch_senders(hm, clean, abc, (2, 1))
    assert out.shape == (3, hm.n_layers, hm.n_heads)
    assert torch.all(out[:, 2:] == 0) and torch.any(out[:, :2] != 0)
    with pytest.raises(ValueError, match="query, key or value"):
        path_patch_senders(hm, clean, abc, (1, 0), inputs=("x",))


def test_attention_scores_are_means_of_probabilities(setup):
    hm, _, clean, _ = setup
    att = attention_scores(hm, clean)
    for v in att.values():
        assert v.shape == (hm.n_layers, hm.n_heads) and float(v.min()) >= 0 and float(v.max()) <= 1
    assert float((att["END->IO"] + att["END->S1"] + att["END->S2"]).max()) <= 1 + 1e-5


def test_faithfulness_of_every_head_is_one_and_of_no_head_is_the_ablated_model(setup):
    hm, _, clean, abc = setup
    every = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    whole = faithfulness(hm, clean, every, abc)
    assert set(whole) == {"zero", "mean", "resample"}
    assert all(abs(v["faithfulness"] - 1) < 1e-6 for v in whole.values())
    empty = faithfulness(hm, clean, [], abc, kinds=("zero",))["zero"]
    assert abs(empty["circuit"] - empty["no_heads"]) < 1e-5
    assert complement(hm, every) == [] and len(complement(hm, [(0, 0)])) == len(every) - 1
    with pytest.raises(ValueError, match="reference"):
        make_ablation("mean")
    with pytest.raises(ValueError, match="unknown ablation"):
        make_ablation("half")


def test_the_backup_test_removes_what_it_says(setup):
    hm, _, clean, abc = setup
    b = backup_test(hm, clean, [(2, 0)], make_ablation("mean", abc))
    assert (2, 0) not in b.change and len(b.change) == hm.n_layers * hm.n_heads - 1
    assert abs(b.drop.value - float((b.clean - b.ablated).mean())) < 1e-5
    assert torch.all(backup_test(hm, clean, [(2, 0)]).dla_ablated[:, 2, 0] == 0)  # zero ablation: no write
    assert abs(b.expected_drop.value - float(b.dla_clean[:, 2, 0].mean())) < 1e-5
    with pytest.raises(ValueError, match="removed is empty"):
        backup_test(hm, clean, [])


def test_roles_follow_their_definitions_and_a_model_that_fails_the_task_has_none(setup):
    hm, _, clean, abc = setup
    swapped = dataclasses.replace(clean, io_id=clean.s_id, s_id=clean.io_id)
    D = float(logit_diffs(hm, clean).mean())
    does, fails = (clean, swapped) if D > 0 else (swapped, clean)
    with pytest.raises(ValueError, match="does not do the task"):
        find_roles(hm, fails, abc)
    roles = find_roles(hm, does, abc)
    t = roles.thresholds
    assert t == THRESHOLDS and roles.logit_diff > 0
    for h in roles.heads_with("name mover"):
        e = roles.evidence[h]
        assert e.dla >= t["dla"] and e.end_io > t["attend"] and e.end_io > e.end_s
    for h in roles.heads_with("S-inhibition"):
        assert roles.evidence[h].si_path <= -t["path"]
    for h in roles.no_role():
        e = roles.evidence[h]
        assert e.s2_s1 <= t["pattern"] and e.s2_s1_next <= t["pattern"] and e.prev <= t["previous"]
    core = [h for h, r in roles.roles.items() if r in ROLES[:4]]
    assert set(core) <= set(roles.circuit)
    assert set(roles.table()) == set(ROLES) | {"no role"}
    with pytest.raises(ValueError, match="unknown role"):
        roles.heads_with("hero")
    with pytest.raises(ValueError, match="unknown thresholds"):
        find_roles(hm, does, abc, thresholds={"nope": 1.0})


def test_the_provenance_split_is_refused_for_another_model():
    with pytest.raises(ValueError, match="ioi_windows"):
        IoiSplit.from_provenance({"data": {"kind": "brown_windows"}})
    split = IoiSplit.from_provenance({"data": {"kind": "ioi_windows", "train_names": ["A"], "heldout_names": ["B"],
                                               "train_templates": [0], "heldout_templates": [12]}})
    assert split.heldout_names == ("B",) and split.heldout_templates == (12,)
