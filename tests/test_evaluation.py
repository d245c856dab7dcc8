"""Item metrics score annotated items per window, tiled or not, on known logits."""

from __future__ import annotations

from types import SimpleNamespace as Item

import pytest
import torch

from deviating.data.language.metrics import agreement_metric, copy_metric, pronoun_metric
from headlab.metrics import ItemMetric, Metric
from headlab.analysis.sweep import loop_sweep, sweep
from tiny_models import make_model, random_batch

VOCAB = {"sleeps": 0, "sleep": 1, "he": 2, "she": 3, "it": 4, "they": 5, "cat": 6}


def logits_with(entries, n_windows=2, n_pos=4):
    out = torch.zeros(n_windows, n_pos, len(VOCAB))
    for (w, p, tok), value in entries.items():
        out[w, p, VOCAB[tok]] = value
    return out


def test_agreement_accuracy_and_margin():
    items = [Item(doc=0, pos=1, correct="sleeps", wrong="sleep"),
             Item(doc=0, pos=2, correct="sleep", wrong="sleeps"),
             Item(doc=1, pos=0, correct="sleeps", wrong="sleep")]
    logits = logits_with({(0, 1, "sleeps"): 2.0, (0, 2, "sleeps"): 1.0, (1, 0, "sleeps"): 0.5})
    acc = agreement_metric(items, VOCAB, n_windows=2)
    torch.testing.assert_close(acc.per_item(logits), torch.tensor([1.0, 0.0, 1.0]))
    torch.testing.assert_close(acc(logits, {}), torch.tensor([0.5, 1.0]))  # mean per window
    margin = agreement_metric(items, VOCAB, n_windows=2, score="margin")
    torch.testing.assert_close(margin(logits, {}), torch.tensor([(2.0 - 1.0) / 2, 0.5]))
    # tiled twice (as in a sweep): rows 2 and 3 repeat windows 0 and 1
    tiled = torch.cat([logits, torch.zeros_like(logits)])
    torch.testing.assert_close(acc(tiled, {}), torch.tensor([0.5, 1.0, 0.0, 0.0]))


def test_pronoun_competitors_and_copy_argmax():
    items = [Item(doc=0, pos=3, correct="she", alternatives=("he", "it", "they"))]
    logits = logits_with({(0, 3, "she"): 1.0, (0, 3, "they"): 1.0})
    assert pronoun_metric(items, VOCAB, n_windows=1)(logits[:1], {}).item() == 0.0  # a tie is wrong
    logits[0, 3, VOCAB["she"]] = 1.5
    assert pronoun_metric(items, VOCAB, n_windows=1)(logits[:1], {}).item() == 1.0
    copy = copy_metric([Item(doc=0, pos=3, target="cat")], VOCAB, n_windows=1)
    assert copy(logits[:1], {}).item() == 0.0  # "she" is the argmax, not "cat"


def test_window_without_items_is_nan_and_bad_input():
    m = copy_metric([Item(doc=1, pos=0, target="cat")], VOCAB, n_windows=2)
    logits = logits_with({(1, 0, "cat"): 3.0})
    out = m(logits, {})
    assert torch.isnan(out[0]) and out[1] == 1.0
    windows, only = m.restricted()  # keep the windows with items, re-indexed
    assert windows.tolist() == [1] and only.n_windows == 1
    assert only(logits[windows], {}).tolist() == [1.0]
    with pytest.raises(ValueError, match="not in the tokenizer"):
        copy_metric([Item(doc=0, pos=0, target="dog")], VOCAB, n_windows=1)
    with pytest.raises(ValueError, match="outside"):
        copy_metric([Item(doc=3, pos=0, target="cat")], VOCAB, n_windows=2)
    with pytest.raises(ValueError, match="no items"):
        ItemMetric(torch.tensor([], dtype=torch.long), torch.tensor([]), torch.tensor([]), None, 1)


def test_item_metric_in_a_batched_sweep_equals_the_loop():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    vocab = {str(i): i for i in range(hm.model.config.vocab_size)}
    items = [Item(doc=d, pos=p, correct=str(c), wrong=str(w)) for d, p, c, w in
             [(0, 2, 5, 9), (1, 4, 7, 3), (2, 1, 11, 12), (2, 3, 8, 2)]]
    metric = agreement_metric(items, vocab, n_windows=3, score="margin")
    fast = sweep(hm, batch, metric=Metric(metric), max_batch=9)
    slow = loop_sweep(hm, batch, metric=Metric(metric))
    torch.testing.assert_close(fast.effects, slow.effects, atol=1e-5, rtol=1e-4)
    assert fast.effects.abs().max() > 0
