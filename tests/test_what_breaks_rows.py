"""Chapter 7's claim rows on the shipped results: C10 compares a task's hard cases with the whole task
(like for like; the pooled tail against the loss is shown beside), and C13 judges "unseen by mean attention"
as an equivalence on the layer-mean inspector's AUC."""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pytest

from deviating.analysis.failure import failure_bootstrap, failure_gap, pool_tables
from deviating.analysis.inspection import roc_auc
from deviating.verdicts import judge
from deviating.experiments import what_breaks_rows as rows
from deviating.experiments.pruning import curve_tables


@pytest.fixture(scope="module")
def results():
    return json.loads((files("deviating") / "results" / "what_breaks.json").read_text())


def test_c10_compares_like_with_like_and_shows_the_pooled_tail_beside(results):
    pruning = results["pruning"]
    row = rows.c10_organism_row(pruning, n_resamples=200)
    assert row.primary == "agreement, attractor vs all agreement, mean order, zero ablation, tolerance 0.05"
    assert row.required == () and "whole task" in row.quantity
    # like for like, by hand: all agreement against agreement with an attractor, accuracy, same tolerance
    m = pruning["models"]["organism"]
    higher = {k: k != "loss" for k in m["items_per_window"]}
    t = curve_tables(m, "mean (one-shot)", higher, pruning["settings"]["counts"])
    fb = failure_bootstrap({"all": t["agreement"], "hard": t["agreement, attractor"]}, {"all": 0.05, "hard": 0.05},
                           n_resamples=200, seed=0)
    gap = failure_gap(fb, "all", ["hard"])
    seed0 = next(x for x in row.by_condition[row.primary] if x.seed == 0)
    assert (seed0.effect, seed0.low, seed0.high) == (gap.value, gap.low, gap.high)
    # the old comparison (the pooled tail against the loss, nats against accuracy) is beside the row
    assert list(row.beside) == [rows.POOLED_VS_LOSS]
    by_hand = {"loss": t["loss"], "tail": pool_tables([t[k] for k in rows.TAILS])}
    fb = failure_bootstrap(by_hand, {"loss": 0.05, "tail": 0.05}, n_resamples=200, seed=0)
    old = next(x for x in row.by_condition[rows.POOLED_VS_LOSS] if x.seed == 0)
    assert old.effect == failure_gap(fb, "loss", ["tail"]).value
    assert judge(row).kind == "inconclusive"  # +2 heads on each of three seeds: the sign test's p = 0.125
    pooled = rows.tail_tables(pruning, "organism", "mean (one-shot)")[rows.TAIL]
    assert pooled.weights.sum() == sum(m["item_counts"][k] for k in rows.TAILS)
    with pytest.raises(ValueError, match="unknown tail"):
        rows.organism_gaps(pruning, "mean (one-shot)", 0.05, tail="agreement", n_resamples=100)


def test_c10_on_minilm_pools_the_tail_constructions(results):
    minilm = results["minilm"]
    tables = rows.minilm_tables(minilm, "mean (one-shot)", rows.MINILM_TAILS)
    kinds = np.asarray(minilm["held_out_constructions"])
    assert tables[rows.MINILM_TAIL].weights.tolist() == np.isin(kinds, rows.MINILM_TAILS).astype(float).tolist()
    assert "pooled" in rows.c10_minilm_row(minilm, n_resamples=200).quantity


def test_c13_requires_unseen_by_the_mean_as_an_equivalence_on_its_auc(results):
    adv = results["adversarial"]
    row = rows.c13_row(adv)
    unseen = [c for c in row.required if "unseen by the layer mean" in c]
    assert len(unseen) == 1 and unseen[0].startswith("agreement:") and unseen[0] in row.equivalence
    assert row.unit_for(unseen[0]) == "auc"
    a = adv["models"]["organism"]["agreement"]
    ok = np.asarray(a["success"], bool)
    sc = a["inspectors"]["before, mean"]
    auc = roc_auc(np.asarray(sc["search"])[ok], np.asarray(sc["clean"]))
    got = rows.c13_measurements(a)["unseen"]
    assert got.value == pytest.approx(auc - 0.5)  # inside the AUC band only if the mean is (nearly) blind
    assert got.low < got.value < got.high
