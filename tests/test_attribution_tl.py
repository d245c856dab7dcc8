"""Attribution patching against TransformerLens's ``attribution_patch`` (run where TransformerLens is
installed; skipped elsewhere, as CI does not install it), on the same tiny GPT-2 weights.

TransformerLens scores each (head, position) in the denoising direction, averaged over the batch,
and each edge per position; headlab's heads x positions grid and its edges (summed over positions)
are the same quantities. To run::

    pip install "transformer-lens>=4.3,<5" && python -m pytest -n0 tests/test_attribution_tl.py
"""

from __future__ import annotations

import pytest
import torch

tl_analysis = pytest.importorskip(
    "transformer_lens.tools.analysis",
    reason="TransformerLens >= 4.3 is not installed (pip install 'transformer-lens>=4.3,<5')")

from test_patching_tl import A, B, models  # noqa: E402,F401 (the shared HeadModel + TransformerBridge fixture)

from headlab.analysis.attribution import attribution_patch  # noqa: E402
from headlab.analysis.edges import INPUTS, edge_attribution  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402
from tiny_models import random_batch  # noqa: E402

DIFF = Metric(LogitMetric("logit_diff", (A, B)))


def tl_metric(logits: torch.Tensor) -> torch.Tensor:
    logits = logits[0] if logits.dim() == 3 else logits
    return logits[-1, A] - logits[-1, B]


def test_node_scores_equal_transformer_lens(models):
    hm, bridge = models
    clean, corrupted = random_batch(hm, seed=0), random_batch(hm, seed=1)
    theirs = tl_analysis.attribution_patch(bridge, clean["input_ids"], corrupted["input_ids"], tl_metric)
    ours = attribution_patch(hm, clean, corrupted, metric=DIFF, direction="denoising", positions=True,
                             effect=True).mean(0)  # (layer, head, pos)
    L, H, P = ours.shape
    for l in range(L):
        for h in range(H):
            for p in range(P):
                assert theirs.node_scores[tl_analysis.Node("attn_head_out", p, l, h)] == pytest.approx(
                    float(ours[l, h, p]), abs=1e-6)
    assert ours.abs().max() > 1e-4


def test_edge_scores_equal_transformer_lens(models):
    hm, bridge = models
    clean, corrupted = random_batch(hm, seed=0), random_batch(hm, seed=1)
    theirs = tl_analysis.attribution_patch(bridge, clean["input_ids"], corrupted["input_ids"], tl_metric,
                                           tl_analysis.EdgeAttributionConfig(granularity="edge"))
    ours = edge_attribution(hm, clean, corrupted, metric=DIFF, direction="denoising", effect=True)
    summed: dict = {}
    for (writer, reader), score in theirs.edge_scores.items():
        if writer.kind == "attn_head_out" and reader.kind in ("q_input", "k_input", "v_input", "logits"):
            key = (writer.layer, writer.head, reader.layer, reader.head, reader.kind)
            summed[key] = summed.get(key, 0.0) + score
    assert len(summed) == 4 * 4 * 3 + 8  # layer 0 -> layer 1 (q, k, v), every head -> logits
    for (ls, hs, lr, hr, kind), score in summed.items():
        mine = ours.logits[:, ls, hs] if kind == "logits" else ours.heads[:, ls, hs, lr, hr, INPUTS.index(kind[0])]
        assert score == pytest.approx(float(mine.mean()), abs=1e-6)
