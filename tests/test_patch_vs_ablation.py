"""Patching against ablation on one scale (deviating.analysis.patch_vs_ablation, chapter 6)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import headlab
from deviating.analysis.patch_vs_ablation import Runs, method_runs, rank_agreement, share
from headlab.heads.ablation import Ablation
from headlab.metrics import LogitMetric, Metric

B, C = 9, 20


@pytest.fixture(scope="module")
def setting():
    hm = headlab.load("attn-only-2l", device="cpu")
    g = torch.Generator().manual_seed(0)
    span = torch.randint(21, 64, (12, 30), generator=g)
    span[:, 19], span[:, 20] = 5, B
    clean = torch.cat([torch.full((12, 1), 64), span, span[:, :20]], dim=1)
    corrupted = clean.clone()
    corrupted[:, 21] = C
    other = torch.randint(21, 64, (12, 30), generator=g)
    reference = torch.cat([torch.full((12, 1), 64), other, other[:, :20]], dim=1)
    metric = Metric(LogitMetric("logit_diff", (B, C)))
    return hm, clean, corrupted, reference, metric, method_runs(hm, clean, corrupted, metric, reference)


def _diff(out: torch.Tensor) -> torch.Tensor:
    return out[:, -1, B] - out[:, -1, C]


def test_each_method_matches_the_run_done_by_hand(setting):
    hm, clean, corrupted, reference, _, runs = setting
    with torch.no_grad():
        assert torch.allclose(runs.clean, _diff(hm(clean)), atol=1e-4)
        assert torch.allclose(runs.corrupted, _diff(hm(corrupted)), atol=1e-4)
        _, cache = hm.run_with_cache(corrupted, names=("z",), layers=[1])
        bad = cache.z(1)

        def put_corrupted(layer, z):  # noising head 1.3: its z from the corrupted run
            z = z.clone()
            z[:, :, 3] = bad[:, :, 3]
            return z

        with hm.patch_z(put_corrupted, layers=[1]):
            noised = _diff(hm(clean))
        with hm.ablate([(1, 3)], Ablation("mean", reference=reference)):
            mean_ablated = _diff(hm(clean))
    assert torch.allclose(runs.values["noising"][:, 1, 3], noised, atol=1e-4)
    assert torch.allclose(runs.values["mean"][:, 1, 3], mean_ablated, atol=1e-4)
    gap = runs.clean.mean() - runs.corrupted.mean()
    assert share(runs, "noising")[1, 3] == pytest.approx(float((runs.clean.mean() - noised.mean()) / gap), abs=1e-5)


def test_denoising_is_a_share_recovered_and_the_others_a_share_lost(setting):
    runs = setting[-1]
    ends = Runs(runs.clean, runs.corrupted, {"noising": runs.clean.expand(2, 4, -1).permute(2, 0, 1),
                                             "denoising": runs.clean.expand(2, 4, -1).permute(2, 0, 1)})
    assert np.allclose(share(ends, "noising"), 0) and np.allclose(share(ends, "denoising"), 1)
    # every head of the real model: shares lie between "nothing" and "a little past everything"
    for method in runs.values:
        assert np.all(share(runs, method) > -0.5) and np.all(share(runs, method) < 1.5), method


def test_the_rank_agreement_of_a_run_with_itself_is_one_and_its_bootstrap_is_seeded(setting):
    runs = setting[-1]
    same = rank_agreement(runs, runs, "noising", n_boot=200)
    assert same["rho"] == pytest.approx(1.0) and same["low"] == pytest.approx(1.0)
    other = rank_agreement(runs, runs, "noising", "resample", n_boot=400)
    assert other["low"] <= other["rho"] <= other["high"] and other["high"] - other["low"] > 0
    assert rank_agreement(runs, runs, "noising", "resample", n_boot=400) == other  # the seed fixes the draws
    assert rank_agreement(runs, runs, "noising", "resample", n_boot=400, seed=1) != other
    flipped = Runs(runs.corrupted, runs.clean, runs.values)  # the gap reversed: every share s becomes 1 - s
    assert rank_agreement(runs, flipped, "noising", n_boot=200)["rho"] == pytest.approx(-1.0)


def test_bad_input_is_refused_with_the_value(setting):
    hm, clean, corrupted, reference, metric, runs = setting
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['gauss'\]"):
        method_runs(hm, clean, corrupted, metric, reference, methods=("zero", "gauss"))
    with pytest.raises(ValueError, match="same number of tokens"):
        method_runs(hm, clean, corrupted[:, :-1], metric, reference, methods=("noising",))
    with pytest.raises(ValueError, match="method 'mean' was not run"):
        share(Runs(runs.clean, runs.corrupted, {"zero": runs.values["zero"]}), "mean")
    with pytest.raises(ValueError, match="no gap"):
        share(Runs(runs.clean, runs.clean, runs.values), "zero")
    with pytest.raises(ValueError, match="12 and 4 inputs"):
        rank_agreement(runs, Runs(runs.clean[:4], runs.corrupted[:4], {k: v[:4] for k, v in runs.values.items()}))
    with pytest.raises(ValueError, match="n_boot=10"):
        rank_agreement(runs, runs, n_boot=10)


def test_copy_twins_plant_the_answer_once_and_change_one_token():
    from deviating.analysis.patch_vs_ablation import copy_twins

    t = copy_twins(8, seed=3)
    assert t.clean.shape == t.corrupted.shape == t.reference.shape == (8, 51)
    assert bool((t.clean[:, 0] == 64).all()) and bool((t.clean[:, -1] == 5).all())  # ends on a
    assert bool((t.clean[:, 21] == t.answer).all()) and bool((t.corrupted[:, 21] == t.wrong).all())
    assert torch.equal((t.clean != t.corrupted).nonzero()[:, 1], torch.full((8,), 21))  # one token differs
    assert torch.equal(t.clean[:, 1:21], t.clean[:, 31:51])  # the span's start again
    assert not bool((t.reference == t.answer).any())  # nothing planted in the reference
    assert torch.equal(copy_twins(8, seed=3).clean, t.clean) and not torch.equal(copy_twins(8, seed=4).clean, t.clean)
    with pytest.raises(ValueError, match="n=0"):
        copy_twins(0)
    with pytest.raises(ValueError, match="a, b, c = 5, 5, 20"):
        copy_twins(4, b=5)
