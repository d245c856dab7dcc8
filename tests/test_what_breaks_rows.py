"""Chapter 7's claim rows on the shipped results: C10's tail is the three tails pooled (not the
earliest of them), and C13 judges "unseen by mean attention" as the layer-mean inspector's AUC."""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pytest

from deviating.analysis.failure import failure_bootstrap, failure_gap, pool_tables
from deviating.analysis.inspection import roc_auc
from deviating.bands import BANDS
from deviating.experiments import what_breaks_rows as rows
from deviating.experiments.pruning import curve_tables


@pytest.fixture(scope="module")
def results():
    return json.loads((files("deviating") / "results" / "what_breaks.json").read_text())


def test_c10_judges_the_pooled_tail(results):
    pruning = results["pruning"]
    row = rows.c10_organism_row(pruning, n_resamples=200)
    assert row.required == ("mean order, zero ablation, tolerance 0.05",) and "pooled" in row.quantity
    m = pruning["models"]["organism"]
    higher = {k: k != "loss" for k in m["items_per_window"]}
    t = curve_tables(m, "mean (one-shot)", higher, pruning["settings"]["counts"])
    by_hand = {"loss": t["loss"], "tail": pool_tables([t[k] for k in rows.TAILS])}
    fb = failure_bootstrap(by_hand, {"loss": 0.05, "tail": 0.05}, n_resamples=200, seed=0)
    gap = failure_gap(fb, "loss", ["tail"])
    seed0 = next(x for x in row.by_condition[row.required[0]] if x.seed == 0)
    assert (seed0.effect, seed0.low, seed0.high) == (gap.value, gap.low, gap.high)
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


def test_c13_requires_unseen_by_the_mean_and_reads_its_auc(results):
    adv = results["adversarial"]
    row = rows.c13_row(adv)
    unseen = [c for c in row.required if "unseen by the layer mean" in c]
    assert len(unseen) == 1 and unseen[0].startswith("agreement:")
    a = adv["models"]["organism"]["agreement"]
    ok = np.asarray(a["success"], bool)
    sc = a["inspectors"]["before, mean"]
    auc = roc_auc(np.asarray(sc["search"])[ok], np.asarray(sc["clean"]))
    got = rows.c13_measurements(a)["unseen"]
    assert got.value == pytest.approx(0.5 + BANDS["accuracy"] - auc)  # positive only if the mean is blind
    assert got.low < got.value < got.high
