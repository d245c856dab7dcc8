"""task_shares.margin_share_lost: the share of a task's margin each head carries, by ablation."""

from __future__ import annotations

import copy
from types import SimpleNamespace as Item

import pytest
import torch

import headlab
from deviating.analysis.task_shares import TASKS, busiest_windows, margin_share_lost
from deviating.data.language.metrics import agreement_metric
from deviating.data.language import Language, agreement_items, encode, pack


@pytest.fixture(scope="module")
def model_and_windows():
    hm = headlab.load("organism-small-s0", device="cpu")
    lang = Language.from_description(hm.provenance["data"]["language"])
    return hm, pack(lang.sample(30, seed=1), n_ctx=64, drop_last=True)


def test_busiest_windows_counts_items_and_breaks_ties_by_order() -> None:
    items = [Item(doc=d) for d in (3, 3, 1, 1, 0, 4, 4, 4)]
    assert busiest_windows(items, 5, 1) == [4]
    assert busiest_windows(items, 5, 2) == [1, 4]  # 1 and 3 tie with two items: the earlier
    assert busiest_windows(items, 5, 3) == [1, 3, 4]
    assert busiest_windows(items, 5, 10) == [0, 1, 3, 4]  # window 2 holds none: left out
    with pytest.raises(ValueError, match="outside"):
        busiest_windows([Item(doc=5)], 5, 1)
    with pytest.raises(ValueError, match="at least 1"):
        busiest_windows(items, 5, 0)


def test_a_head_that_writes_nothing_carries_nothing(model_and_windows) -> None:
    hm, windows = model_and_windows
    silent = copy.deepcopy(hm)
    proj = silent.out_proj(1).weight  # (d_model, n_heads * d_head): head 2's columns to 0
    with torch.no_grad():
        proj[:, 2 * hm.d_head:3 * hm.d_head] = 0.0
    share = margin_share_lost(silent, windows, "agreement", n_windows=4)
    assert share.shape == (hm.n_layers, hm.n_heads)
    assert float(share[1, 2]) == pytest.approx(0.0, abs=1e-6)
    assert float(share.abs().max()) > 0.05  # while other heads do carry some


def test_the_share_is_the_margin_lost_under_ablation(model_and_windows) -> None:
    hm, windows = model_and_windows
    share = margin_share_lost(hm, windows, "agreement", n_windows=4)
    # the same quantity by another route: the ablate context and the metric on its own
    chosen = [windows[d] for d in busiest_windows(agreement_items(windows), len(windows), 4)]
    metric = agreement_metric(agreement_items(chosen), hm.tokenizer.get_vocab(), len(chosen), score="margin")
    ids = encode(hm.tokenizer, chosen)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        clean = metric(hm.forward(batch), batch).mean()
        for head in [(0, 1), (1, 3)]:
            with hm.ablate([head]):
                ablated = metric(hm.forward(batch), batch).mean()
            assert float(share[head]) == pytest.approx(float(1 - ablated / clean), abs=1e-4)


def test_unknown_tasks_and_windows_without_items_are_refused(model_and_windows) -> None:
    hm, windows = model_and_windows
    assert TASKS == ("agreement", "pronoun", "copy")
    with pytest.raises(ValueError, match="unknown task"):
        margin_share_lost(hm, windows, "rare")
    no_pronouns = [w for w in windows if "PRON" not in w.pos_tag][:2]
    assert no_pronouns, "the fixture should hold a window without pronouns"
    with pytest.raises(ValueError, match="no pronoun items"):
        margin_share_lost(hm, no_pronouns, "pronoun")
