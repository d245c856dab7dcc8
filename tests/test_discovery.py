"""Circuit discovery and faithfulness: a circuit run alone equals ablating everything outside it with
the head interface's own ``ablate``; the threshold search returns the smallest top-k that keeps the
share; greedy keeps it too; the table differs by ablation; bad inputs name the wrong value.
"""

from __future__ import annotations

import pytest
import torch

from headlab.analysis.attribution import attribution_patch
from headlab.analysis.discovery import circuit_metric, default_ablations, faithfulness, find_circuit
from headlab.analysis.edges import edge_attribution, edge_list
from headlab.heads.ablation import Ablation
from headlab.heads.model import HeadModel
from headlab.metrics import LogitMetric, Metric
from headlab.models.gpt import GPT, GPTConfig
from tiny_models import make_model, random_batch

DIFF = Metric(LogitMetric("logit_diff", (3, 5)))


@pytest.fixture(scope="module")
def setup():
    hm = make_model("headlab")
    return hm, random_batch(hm, n=6, seq=7, seed=0), random_batch(hm, n=6, seq=7, seed=1)


def test_a_circuit_alone_is_everything_else_ablated(setup):
    hm, clean, corrupted = setup
    keep = torch.zeros(2, 4, dtype=torch.bool)
    keep[0, 1] = keep[1, 2] = keep[1, 3] = True
    outside = [(l, h) for l in range(2) for h in range(4) if not keep[l, h]]
    for ablation in default_ablations(corrupted).values():
        with torch.no_grad(), hm.ablate(outside, ablation):
            expected = DIFF.kind(hm.forward(clean), clean)
        torch.testing.assert_close(circuit_metric(hm, clean, keep, ablation, DIFF), expected, atol=1e-5, rtol=0)
        # the same circuit written per position, every position kept
        cells = keep[:, :, None].expand(2, 4, 7).clone()
        torch.testing.assert_close(circuit_metric(hm, clean, cells, ablation, DIFF), expected, atol=1e-5, rtol=0)
    cells[1, 2, -1] = False  # dropping the scored position of one head changes the metric
    assert not torch.allclose(circuit_metric(hm, clean, cells, Ablation(), DIFF),
                              circuit_metric(hm, clean, keep, Ablation(), DIFF), atol=1e-6)


def test_faithfulness_is_the_share_kept_and_depends_on_the_ablation(setup):
    hm, clean, corrupted = setup
    full = torch.ones(2, 4, dtype=torch.bool)
    for f in faithfulness(hm, clean, full, reference=corrupted, metric=DIFF).values():
        assert f.circuit == pytest.approx(f.model, abs=1e-6) and f.share == pytest.approx(1.0, abs=1e-5)
    keep = torch.zeros(2, 4, dtype=torch.bool)
    keep[1, 0] = True
    table = faithfulness(hm, clean, keep, reference=corrupted, metric=DIFF)
    assert list(table) == ["zero", "mean", "resample"]
    for name, f in table.items():
        m = circuit_metric(hm, clean, keep, default_ablations(corrupted)[name], DIFF).mean()
        assert f.circuit == pytest.approx(float(m), abs=1e-6)
        assert f.share == pytest.approx((f.circuit - f.empty) / (f.model - f.empty))
    assert len({round(f.share, 3) for f in table.values()}) == 3  # the number depends on the ablation


@pytest.mark.parametrize("positions", [False, True])
def test_threshold_finds_the_smallest_top_k(setup, positions):
    hm, clean, corrupted = setup
    scores = attribution_patch(hm, clean, corrupted, metric=DIFF, effect=True, positions=positions)
    circuit = find_circuit(hm, clean, corrupted, scores, share=0.7, metric=DIFF)
    mean = default_ablations(corrupted)["mean"]
    f = circuit.faithfulness["mean"]
    assert f.share >= 0.7 and set(circuit.faithfulness) == {"zero", "mean", "resample"}
    order = torch.argsort(scores.mean(0).abs().flatten(), descending=True, stable=True)
    k = int(circuit.keep.sum())
    assert k == len(circuit.nodes) == circuit.evaluated
    assert set(order[:k].tolist()) == set(circuit.keep.flatten().nonzero().flatten().tolist())
    if k > 1:  # one node fewer does not reach the share
        smaller = torch.zeros(circuit.keep.numel(), dtype=torch.bool)
        smaller[order[:k - 1]] = True
        m = circuit_metric(hm, clean, smaller.reshape(circuit.keep.shape), mean, DIFF).mean()
        assert (float(m) - f.empty) / (f.model - f.empty) < 0.7
    assert "| mean |" in circuit.table()


def test_greedy_keeps_the_share_with_fewer_nodes_than_the_whole_model(setup):
    hm, clean, corrupted = setup
    scores = attribution_patch(hm, clean, corrupted, metric=DIFF, effect=True)
    circuit = find_circuit(hm, clean, corrupted, scores, share=0.9, method="greedy", ablation="resample", metric=DIFF)
    assert circuit.faithfulness["resample"].share >= 0.9
    assert 0 < int(circuit.keep.sum()) < 8 and circuit.evaluated == 8 and circuit.ablation == "resample"


def test_an_edge_circuit_without_the_edges_out_of_heads_is_those_heads_ablated():
    """Attention only (nothing but heads reads the stream): cutting every edge out of a head is ablating it."""
    torch.manual_seed(0)
    hm = HeadModel(GPT(GPTConfig(d_vocab=61, n_ctx=32, d_model=32, n_layers=3, n_heads=4, d_mlp=0)).eval())
    clean, corrupted = random_batch(hm, n=6, seq=7, seed=0), random_batch(hm, n=6, seq=7, seed=1)
    edges = edge_list(3, 4)
    assert len(edges) == (4 * 4 * 3) * 3 + 12  # (0 -> 1, 0 -> 2, 1 -> 2) x q, k, v, then every head -> logits
    full = torch.ones(len(edges), dtype=torch.bool)
    for ablation in default_ablations(corrupted).values():
        torch.testing.assert_close(circuit_metric(hm, clean, full, ablation, DIFF), DIFF.kind(hm.forward(clean), clean),
                                   atol=1e-5, rtol=0)
        keep = torch.tensor([e[:2] not in ((0, 1), (1, 2)) for e in edges])
        with torch.no_grad(), hm.ablate([(0, 1), (1, 2)], ablation):
            expected = DIFF.kind(hm.forward(clean), clean)
        torch.testing.assert_close(circuit_metric(hm, clean, keep, ablation, DIFF), expected, atol=1e-5, rtol=0)
        one = full.clone()
        one[edges.index((0, 1, 2, 3, 2))] = False  # only 0.1 -> 2.3's value input
        assert not torch.allclose(circuit_metric(hm, clean, one, ablation, DIFF), expected, atol=1e-4)
        assert not torch.allclose(circuit_metric(hm, clean, one, ablation, DIFF),
                                  circuit_metric(hm, clean, full, ablation, DIFF), atol=1e-6)


def test_find_an_edge_circuit(setup):
    hm, clean, corrupted = setup
    scores = edge_attribution(hm, clean, corrupted, metric=DIFF, effect=True)
    circuit = find_circuit(hm, clean, corrupted, scores, share=0.8, metric=DIFF)
    assert circuit.keep.shape == (len(edge_list(2, 4)),) and circuit.faithfulness["mean"].share >= 0.8
    assert len(circuit.nodes) == int(circuit.keep.sum()) and all("->" in name for name in circuit.nodes)
    greedy = find_circuit(hm, clean, corrupted, scores, share=0.8, method="greedy", metric=DIFF)
    assert greedy.faithfulness["mean"].share >= 0.8 and greedy.evaluated == len(edge_list(2, 4))
    llama = make_model("llama_gqa")
    with pytest.raises(NotImplementedError, match="rotates"):
        circuit_metric(llama, random_batch(llama), torch.ones(len(edge_list(2, 4)), dtype=torch.bool))


def test_bad_inputs_name_the_value(setup):
    hm, clean, corrupted = setup
    scores = torch.ones(2, 4)
    for share in (0, 1.5, -0.1, True):
        with pytest.raises(ValueError, match=f"share must be in \\(0, 1\\].*{share!r}"):
            find_circuit(hm, clean, corrupted, scores, share=share)
    with pytest.raises(ValueError, match="'bogus'"):
        find_circuit(hm, clean, corrupted, scores, method="bogus")
    with pytest.raises(ValueError, match="'bogus'"):
        find_circuit(hm, clean, corrupted, scores, ablation="bogus")
    with pytest.raises(ValueError, match=r"\(3, 4\) fit no node set"):
        find_circuit(hm, clean, corrupted, torch.ones(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        find_circuit(hm, clean, corrupted, torch.full((2, 4), float("nan")))
    with pytest.raises(ValueError, match="differ in shape"):
        find_circuit(hm, clean, random_batch(hm, n=5, seq=7), scores)
    with pytest.raises(ValueError, match="empty circuit"):
        circuit_metric(hm, clean, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        circuit_metric(hm, clean, torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"\(2, 4, 7\)"):
        circuit_metric(hm, clean, torch.ones(2, 4, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="reference"):
        faithfulness(hm, clean, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"returned shape \(6, 7\) for a batch of 6 rows"):
        circuit_metric(hm, clean, torch.ones(2, 4, dtype=torch.bool), metric=lambda output, batch: output[..., 0])
    with pytest.raises(ValueError, match="unknown ablation mode 'bogus'"):
        faithfulness(hm, clean, torch.ones(2, 4, dtype=torch.bool), ablations={"x": Ablation("bogus")})
    assert hm.hooks_installed == 0
