"""One definition of an induction head (both halves), tested on known answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import headlab
from headlab.roles import induction as role
from headlab.roles.induction import (
    COPY_SHARE, INDUCTION_LIFT, copying_half, induction_dependence, induction_heads, induction_lifts,
)
from deviating.exercises.fixtures import repeated_batch, uniform_induction_score
from deviating.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, UNIFORM_HEAD, planted_model

ROWS = [(10, 10), (12, 8), (14, 6), (11, 9), (13, 7), (10, 10), (15, 5), (12, 8)]


@pytest.fixture(scope="module")
def planted():
    return planted_model(d_vocab=16, n_ctx=21)


@pytest.fixture(scope="module")
def tokens():
    return torch.as_tensor(repeated_batch(ROWS, seed=3))


def test_planted_model_has_exactly_its_induction_head(planted, tokens):
    found = induction_heads(planted, tokens, n_resamples=500)
    assert found.heads == (INDUCTION_HEAD,)
    assert found.attends == (INDUCTION_HEAD,) and found.borderline == ()
    # 1.0 copies every token (its OV circuit is a copy); 0.0 writes into a block the unembedding
    # does not read, 0.1 and 1.1 write nothing: none of them copies
    assert found.copies == (INDUCTION_HEAD,)
    assert found.copying[INDUCTION_HEAD].value == 1.0
    for head in (PREVIOUS_TOKEN_HEAD, FIRST_TOKEN_HEAD, UNIFORM_HEAD):
        assert found.copying[head].value == 0.0
    lift = found.lift[INDUCTION_HEAD]  # every item gives 1: an exact tie gets its Clopper-Pearson bound, not [1, 1]
    assert lift.value == 1.0 and lift.high == 1.0
    assert lift.low == pytest.approx(0.025 ** (1 / lift.n)) and "Clopper-Pearson" in lift.method
    assert found.lift[UNIFORM_HEAD].value == pytest.approx(0.0, abs=1e-6)  # uniform attention: lift 0
    expected_uniform = np.mean([uniform_induction_score(*r) for r in ROWS])
    assert found.uniform == pytest.approx(expected_uniform, abs=1e-6)
    assert found.chance == pytest.approx(role.COPY_K / 16)
    assert set(found.split.select).isdisjoint(found.split.measure)


def test_lifts_are_relative_to_uniform_attention(planted, tokens):
    scores, lifts = induction_lifts(planted, tokens)
    uniform = np.array([uniform_induction_score(*r) for r in ROWS])
    expected = (scores[:, 1, 0].numpy() - uniform) / (1 - uniform)
    np.testing.assert_allclose(lifts[:, 1, 0].numpy(), expected, atol=1e-6)


def test_the_rule_selects_on_one_half_and_measures_on_the_other(planted, tokens, monkeypatch):
    """Crafted lifts: a head above the threshold on both halves, one that passes on the selection
    half only (borderline), one that never passes, whatever the measurement half says."""
    split = role.stats.split_items(len(ROWS), seed=0)
    lifts = torch.zeros(len(ROWS), 2, 2, dtype=torch.float64)
    lifts[:, 1, 0] = 0.6                       # 1.0: clearly above 0.3 everywhere
    lifts[split.select, 1, 1] = 0.35           # 1.1: passes on the selection half ...
    lifts[split.measure, 1, 1] = torch.tensor([0.05, 0.6, 0.1, 0.5], dtype=torch.float64)  # ... spread on the other
    lifts[split.select, 0, 0] = 0.1            # 0.0: fails on the selection half ...
    lifts[split.measure, 0, 0] = 0.9           # ... and is never kept, however well it does later
    monkeypatch.setattr(role, "induction_lifts", lambda hm, inputs, queries=None: (lifts, lifts))
    found = induction_heads(planted, tokens, n_resamples=500)
    assert found.selected == ((1, 0), (1, 1))
    assert found.attends == ((1, 0),)
    assert found.borderline == ((1, 1),)
    assert found.heads == ((1, 0),)  # 1.0 copies; 0.0's 0.9 on the measurement half does not count


def test_copying_half_of_attn_only_2l_head_1_3():
    """The copying half on the trained model: head 1.3 (its strongest induction head) writes the
    token it reads; the previous-token head 0.0 does not."""
    hm = headlab.load("attn-only-2l")
    copying = copying_half(hm)
    assert copying[(1, 3)].low >= COPY_SHARE
    assert copying[(0, 0)].high < COPY_SHARE
    n_tokens = 64  # t0 ... t63, the specials left out
    assert copying[(1, 3)].n == n_tokens


def test_one_layer_model_has_no_induction_head():
    hm = headlab.load("attn-only-1l")
    from deviating.training.recipes import RECIPES

    data = RECIPES["attn-only-1l"].task.eval_data(32)
    found = induction_heads(hm, data.tokens, n_resamples=300)
    assert found.heads == () and found.attends == ()
    assert all(e.high < INDUCTION_LIFT for e in found.lift.values())


def test_dependence_on_the_planted_previous_token_head(planted, tokens):
    """Without 0.0 the planted induction head attends uniformly: its score falls from 1 to the
    uniform score, a relative drop known exactly."""
    dep = induction_dependence(planted, tokens, [PREVIOUS_TOKEN_HEAD], [INDUCTION_HEAD], n_resamples=500)
    d = dep[INDUCTION_HEAD]
    uniform = np.mean([uniform_induction_score(*r) for r in ROWS])
    assert d.ablated.value == pytest.approx(uniform, abs=1e-3)
    assert d.relative.value == pytest.approx(1 - uniform / d.clean.value, abs=1e-9)
    assert d.relative.value == pytest.approx(1 - uniform, abs=1e-3)
    assert d.relative.low <= d.relative.value <= d.relative.high
    # removing 0.1 (which writes nothing) costs nothing
    none = induction_dependence(planted, tokens, [FIRST_TOKEN_HEAD], [INDUCTION_HEAD], n_resamples=500)
    assert none[INDUCTION_HEAD].relative.value == pytest.approx(0.0, abs=1e-6)
    # on a subset of the inputs only
    half = induction_dependence(planted, tokens, [PREVIOUS_TOKEN_HEAD], [INDUCTION_HEAD], items=[0, 2, 4],
                                n_resamples=500)
    assert half[INDUCTION_HEAD].clean.n == 3
    assert "percentile" in half[INDUCTION_HEAD].relative.method  # no BCa on 3 inputs


def test_bad_input_is_refused_with_the_value(planted, tokens):
    with pytest.raises(ValueError, match="0.0 is not above"):
        induction_dependence(planted, tokens, [PREVIOUS_TOKEN_HEAD], [PREVIOUS_TOKEN_HEAD])
    with pytest.raises(ValueError, match="threshold"):
        induction_heads(planted, tokens, threshold=1.5)
    with pytest.raises(ValueError, match="at least 4 inputs"):
        induction_heads(planted, tokens[:3])


def _last_repeat_only(rows) -> torch.Tensor:
    """Queries: only the last position of each row (a repeated token in every row of ROWS)."""
    n = 1 + rows[0][0] + rows[0][1]
    queries = torch.zeros(len(rows), n, dtype=torch.bool)
    queries[:, -1] = True
    return queries


def test_queries_restrict_the_score_and_its_uniform_baseline(planted, tokens):
    """Counting only the last query of each row: the planted head still scores 1, uniform
    attention scores 1 / n there (n keys in view), and the lifts are 1 and 0."""
    queries = _last_repeat_only(ROWS)
    n = tokens.shape[1]
    scores, lifts = induction_lifts(planted, tokens, queries)
    assert torch.allclose(scores[:, 1, 0], torch.ones(len(ROWS), dtype=torch.float64), atol=1e-5)
    np.testing.assert_allclose(scores[:, UNIFORM_HEAD[0], UNIFORM_HEAD[1]].numpy(), 1.0 / n, atol=1e-6)
    np.testing.assert_allclose(lifts[:, UNIFORM_HEAD[0], UNIFORM_HEAD[1]].numpy(), 0.0, atol=1e-6)
    found = induction_heads(planted, tokens, queries=queries, n_resamples=300)
    assert found.uniform == pytest.approx(1.0 / n, abs=1e-6)  # not the mean over every repeat
    assert found.uniform != pytest.approx(np.mean([uniform_induction_score(*r) for r in ROWS]), abs=1e-3)
    assert found.heads == (INDUCTION_HEAD,)
    # every query allowed: exactly the unrestricted numbers
    everywhere = torch.ones_like(queries)
    np.testing.assert_array_equal(induction_lifts(planted, tokens, everywhere)[1].numpy(),
                                  induction_lifts(planted, tokens)[1].numpy())
    dep = induction_dependence(planted, tokens, [PREVIOUS_TOKEN_HEAD], [INDUCTION_HEAD], queries=queries,
                               items=[1, 3, 5, 7], n_resamples=300)[INDUCTION_HEAD]
    assert dep.clean.n == 4 and dep.ablated.value == pytest.approx(1.0 / n, abs=1e-3)


def test_bad_queries_are_refused(planted, tokens):
    queries = _last_repeat_only(ROWS)
    with pytest.raises(ValueError, match="bool mask"):
        induction_lifts(planted, tokens, queries.long())
    with pytest.raises(ValueError, match=r"shape \(8, 21\)"):
        induction_heads(planted, tokens, queries=queries[:, :-1])
    first_only = torch.zeros_like(queries)
    first_only[:, 0] = True  # position 0 never repeats a token
    with pytest.raises(ValueError, match="in queries"):
        induction_lifts(planted, tokens, first_only)


def test_the_atlas_labels_and_the_roles_share_one_bar_each():
    """One definition per role: the label rule names a head ``induction`` at the induction role's
    attention-half bar (0.3, not the 0.4 of the other families) and ``previous_token`` at the
    previous-token role's minimum lift; a head between the two bars is labelled induction."""
    import inspect

    from headlab.analysis.detect import DEFAULT_THRESHOLDS, label_heads
    from headlab.roles.positional import fixed_key_heads

    assert DEFAULT_THRESHOLDS.bar("induction") == INDUCTION_LIFT == 0.3
    assert inspect.signature(induction_heads).parameters["threshold"].default == DEFAULT_THRESHOLDS.bar("induction")
    assert inspect.signature(fixed_key_heads).parameters["min_lift"].default == \
        DEFAULT_THRESHOLDS.bar("previous_token") == DEFAULT_THRESHOLDS.lift == 0.4
    # lifts over uniform attention (uniform 0): head 0 between the bars, head 1 below both its bars,
    # head 2 where both families reach their bars (the larger lift names it)
    scores = {"induction": torch.tensor([[0.35, 0.25, 0.45]]), "previous_token": torch.tensor([[0.1, 0.38, 0.5]])}
    uniform = {name: torch.zeros(1, 3) for name in scores}
    labels = label_heads(scores, uniform=uniform)
    assert labels.labels == [["induction", "unlabelled", "previous_token"]]
    assert labels.strength[0, 1] == pytest.approx(0.38)  # unlabelled: its best lift


def test_the_atlas_and_the_role_find_the_same_induction_head(planted):
    """On the atlas's own repeated random tokens, the heads the atlas labels ``induction`` are the
    heads the role finds (both halves) on those inputs."""
    from headlab.analysis.atlas import compute_atlas, repeated_random_tokens

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 16, (8, 20), generator=g)
    atlas = compute_atlas(planted, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, effect="write_norm")
    labelled = {tuple(h["head"]) for h in atlas["heads"] if h["label"] == "induction"}
    repeats = repeated_random_tokens(planted, n=32, length=8, seed=0)
    found = induction_heads(planted, repeats, n_resamples=500)
    assert labelled == set(found.heads) == {INDUCTION_HEAD}
