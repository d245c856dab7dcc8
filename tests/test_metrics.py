"""The one metric dispatch (headlab.metrics.Metric) and the logit metric's per-input tokens."""

from __future__ import annotations

import pytest
import torch

from headlab.analysis.patching import activation_patch
from headlab.analysis.sweep import sweep
from headlab.metrics import LogitMetric, Metric, next_token_loss, positions
from tiny_models import make_model, random_batch


def test_score_is_the_one_dispatch_for_every_named_kind():
    causal, encoder = make_model("gpt2"), make_model("bert")
    batch = random_batch(causal, n=3, seq=6)
    with torch.no_grad():
        out = causal(batch)
    loss = Metric("loss").bound(causal).score(out, batch)
    torch.testing.assert_close(loss, next_token_loss(out, batch["input_ids"], batch["attention_mask"]))
    kl = Metric("kl").bound(causal)
    torch.testing.assert_close(kl.score(out, batch, kl.reference(causal, batch)), torch.zeros(3), atol=1e-6, rtol=0)
    ebatch = random_batch(encoder, n=3, seq=6)
    cos = Metric().bound(encoder)
    assert cos.kind == "cosine"
    with torch.no_grad():
        torch.testing.assert_close(cos.score(encoder(ebatch), ebatch, cos.reference(encoder, ebatch)),
                                   torch.zeros(3), atol=1e-6, rtol=0)
    assert Metric().bound(encoder, gradients=True).kind == "retrieval"


@pytest.mark.parametrize("kind, model", [("loss", "bert"), ("kl", "bert"), ("cosine", "gpt2"), ("retrieval", "gpt2")])
def test_a_kind_the_model_cannot_read_is_refused_naming_it(kind, model):
    with pytest.raises(ValueError, match=repr(kind) if kind in ("cosine", "retrieval") else "encoder"):
        Metric(kind).bound(make_model(model))


def test_kl_in_a_sweep_compares_with_the_clean_run():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=5)
    result = sweep(hm, batch, metric=Metric("kl"))
    by_head = result.by_head()
    assert bool((by_head >= -1e-6).all()) and float(by_head.max()) > 0  # a KL is never negative; heads move it


def test_per_input_token_pairs_read_each_input_own_pair():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=5)
    with torch.no_grad():
        out = hm(batch)
    pairs = [(1, 2), (3, 4), (5, 6)]
    values = LogitMetric("logit_diff", pairs)(out, batch)
    last = out[:, -1]
    expected = torch.stack([last[i, a] - last[i, b] for i, (a, b) in enumerate(pairs)])
    torch.testing.assert_close(values, expected)
    same = LogitMetric("logit_diff", torch.tensor(pairs))(out, batch)
    torch.testing.assert_close(same, values)
    # tiled rows (a sweep's) read the pair of the input they copy
    tiled = {k: v.repeat(2, 1) for k, v in batch.items()}
    tiled["index"] = torch.arange(3).repeat(2)
    torch.testing.assert_close(LogitMetric("logit_diff", pairs)(out.repeat(2, 1, 1), tiled), values.repeat(2))


def test_per_input_pairs_in_patching_equal_a_loop_over_inputs():
    hm = make_model("gpt2")
    clean, corrupted = random_batch(hm, n=2, seq=5, seed=0), random_batch(hm, n=2, seq=5, seed=1)
    pairs = [(1, 2), (7, 3)]
    both = activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("logit_diff", pairs)), normalise=False)
    for i in range(2):
        one = {k: v[i:i + 1] for k, v in clean.items()}, {k: v[i:i + 1] for k, v in corrupted.items()}
        alone = activation_patch(hm, *one, metric=Metric(LogitMetric("logit_diff", pairs[i])), normalise=False)
        torch.testing.assert_close(both[i], alone[0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("tokens, message", [
    ((True, 2), "True is not a token id"), ((1.0, 2), "needs 2 token id"), ([(1, 2), (3,)], "needs 2 token id"),
    (torch.ones(3, 3, dtype=torch.long), "per input"), (torch.ones(3, 2), "integer token ids"), ("ab", "tuple of 2"),
])
def test_bad_tokens_are_refused_naming_them(tokens, message):
    with pytest.raises(ValueError, match=message):
        LogitMetric("logit_diff", tokens)


def test_a_table_shorter_than_the_inputs_and_an_all_padding_row_are_refused():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=5)
    with torch.no_grad():
        out = hm(batch)
    with pytest.raises(ValueError, match="for 2 inputs, the batch has 3"):
        LogitMetric("logit_diff", [(1, 2), (3, 4)])(out, batch)
    padded = dict(batch, attention_mask=batch["attention_mask"].clone())
    padded["attention_mask"][1] = 0
    with pytest.raises(ValueError, match=r"rows \[1\] hold only padding"):
        positions(padded, -1)


def test_the_retrieval_loss_of_one_input_is_refused():
    encoder = make_model("bert")
    one = random_batch(encoder, n=1, seq=5)
    metric = Metric("retrieval").bound(encoder)
    with torch.no_grad(), pytest.raises(ValueError, match="at least 2 inputs"):
        metric.score(encoder(one), one, metric.reference(encoder, one))


def test_kl_refuses_clean_logits_of_another_shape_naming_it():
    with pytest.raises(ValueError, match=r"float \(n_inputs, pos, d_vocab\) tensor, got \(2, 5\)"):
        LogitMetric("kl", clean=torch.zeros(2, 5))
    metric = LogitMetric("kl", clean=torch.zeros(2, 4, 7))
    batch = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long)}
    with pytest.raises(ValueError, match=r"clean logits \(2, 4, 7\) do not match this run's \(2, 3, 7\)"):
        metric(torch.zeros(2, 3, 7), batch)
