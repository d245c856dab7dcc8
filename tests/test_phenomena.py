"""headlab.detect.phenomena: probes from the language's items, margins on hand-built logits."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.detect.phenomena import Probe, ablation_margins, margin_metric, margins, probes_from_items
from headlab.language import Language, agreement_items, copy_items, pack, pronoun_items, tokenizer


def _logits() -> torch.Tensor:
    """Two inputs, 3 positions, a vocabulary of 5; every logit chosen by hand."""
    x = torch.zeros(2, 3, 5)
    x[0, 1] = torch.tensor([0.0, 2.0, 5.0, 1.0, -1.0])
    x[1, 2] = torch.tensor([3.0, 3.0, 0.5, 4.0, 0.0])
    return x


def test_margins_against_named_alternatives_and_against_everything() -> None:
    probes = [Probe(0, 1, 2, (1,)),        # 5 - 2
              Probe(0, 1, 1, (2, 3)),      # 2 - 5
              Probe(1, 2, 3, None),        # 4 - 3 (best of every other token)
              Probe(1, 2, 0, None)]        # 3 - 4 (token 1 ties at 3; token 3 is larger)
    torch.testing.assert_close(margins(_logits(), probes), torch.tensor([3.0, -3.0, 1.0, -1.0]))


def test_margins_follow_the_index_of_a_tiled_batch() -> None:
    tiled = torch.cat([_logits(), _logits().flip(0)])  # rows hold inputs 0, 1, 1, 0
    index = torch.tensor([0, 1, 1, 0])
    got = margins(tiled, [Probe(1, 2, 3, None)], index=index)
    assert float(got) == 1.0
    with pytest.raises(ValueError, match="not in the batch"):
        margins(_logits(), [Probe(5, 0, 0, None)])
    with pytest.raises(ValueError, match="no probes"):
        margins(_logits(), [])


def test_margin_metric_is_per_input_and_nan_without_probes() -> None:
    metric = margin_metric([Probe(0, 1, 2, (1,)), Probe(0, 1, 1, (2, 3))], n_inputs=2)
    tiled = torch.cat([_logits(), _logits()])
    values = metric(tiled, {"index": torch.tensor([0, 1, 0, 1])})
    assert values[0] == 0.0 and values[2] == 0.0  # (3 + -3) / 2
    assert math.isnan(values[1]) and math.isnan(values[3])  # input 1 has no probe
    with pytest.raises(ValueError, match="outside"):
        margin_metric([Probe(3, 0, 0, None)], n_inputs=2)


def test_probes_from_the_languages_items() -> None:
    lang = Language()
    windows = pack(lang.sample(30, seed=0), n_ctx=64, drop_last=True)
    vocab = tokenizer(lang).get_vocab()
    agreement = probes_from_items(agreement_items(windows), vocab)
    pronoun = probes_from_items(pronoun_items(windows), vocab)
    copies = probes_from_items(copy_items(windows), vocab)
    assert agreement and pronoun and copies
    assert all(len(p.alternatives) == 1 and p.correct not in p.alternatives for p in agreement)
    assert all(len(p.alternatives) >= 2 for p in pronoun)
    assert all(p.alternatives is None for p in copies)
    # the probe's correct id is the token that follows its position in the window
    ids = {(i, k): vocab[t] for i, w in enumerate(windows) for k, t in enumerate(w.tokens)}
    assert all(ids[(p.doc, p.pos + 1)] == p.correct for p in agreement + pronoun + copies)
    with pytest.raises(TypeError, match="not an evaluation item"):
        probes_from_items([object()], vocab)


def test_ablation_margins_on_the_planted_model() -> None:
    """The planted induction circuit predicts the second copy of a span: its copy probes lose
    their margin without 0.0 or 1.0, and the first-token head 0.1 (which writes nothing)
    changes nothing. The per-head loop agrees with a sweep using the same metric."""
    from headlab.detect.planted import planted_model
    from headlab.sweep import sweep

    hm = planted_model(d_vocab=20, n_ctx=32)
    g = torch.Generator().manual_seed(0)
    spans = [torch.randperm(19, generator=g)[:10] + 1 for _ in range(3)]
    ids = torch.stack([torch.cat([torch.tensor([0]), s, s]) for s in spans])  # (3, 21)
    copy = [Probe(d, p, int(ids[d, p + 1]), None) for d in range(3) for p in range(11, 20)]
    first = [Probe(0, 0, int(ids[0, 1]), None)]  # only input 0 has one
    effects = ablation_margins(hm, ids, {"copy": copy, "first": first})
    assert effects["copy"].shape == (2, 2, 3)
    # the clean margin is 1 (the copied token gets logit 1, the rest 0); without 1.0 it is 0
    torch.testing.assert_close(effects["copy"][1, 0], torch.full((3,), -1.0), atol=1e-4, rtol=0)
    assert bool((effects["copy"][0, 0] < -0.9).all())
    assert float(effects["copy"][0, 1].abs().max()) == 0.0
    assert math.isnan(effects["first"][0, 0, 1]) and not math.isnan(effects["first"][0, 0, 0])
    swept = sweep(hm, ids, kind=margin_metric(copy, 3)).by_head()
    torch.testing.assert_close(effects["copy"], swept, atol=1e-4, rtol=1e-4)
