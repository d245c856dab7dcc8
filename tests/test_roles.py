"""The role definitions (headlab.roles) and the label null (detect.calibration), on known answers.

The planted model of deviating.planted has its heads set by hand: 0.0 copies the previous
token, 0.1 attends to the first token and writes nothing, 1.0 is an induction head, 1.1 attends
uniformly and writes ten times the context's average token (the orphan).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.analysis.detect import head_scores, pointer_targets
from headlab.analysis.detect.annotated import RelationSet
from headlab.analysis.detect.calibration import (
    calibrated_thresholds, decoy_lifts, label_stability, offset_scores,
)
from headlab.roles.orphan import named_heads, orphan_heads, orphans_from_effects
from headlab.roles.positional import first_token_heads, previous_token_heads
from headlab.roles.syntactic import (
    OFFSET, english_split, relation_head, relation_outcomes, relations_outcomes,
)
from headlab.analysis.texts import repeated_tokens
from deviating.data.language import SUBJECT_OR_ANTECEDENT, subject_or_antecedent_set
from deviating.exercises.fixtures import hand_pattern
from deviating.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, UNIFORM_HEAD, planted_model
from headlab.stats import Split, split_items


@pytest.fixture(scope="module")
def planted():
    hm = planted_model(d_vocab=20, n_ctx=48, orphan=10.0)
    inputs = repeated_tokens(range(1, 20), 24, 15, torch.Generator().manual_seed(0), prefix=[0])
    return hm, {"input_ids": inputs, "attention_mask": torch.ones_like(inputs)}


# ----------------------------------------------------------------------------- calibration


def test_offset_scores_match_a_hand_built_previous_token_pattern(planted) -> None:
    hm, batch = planted
    s = offset_scores(hm, batch, (-1, -3), (0,))
    assert s.keys == ("offset -1", "offset -3", "position 0")
    prev = s.scores[:, 0, PREVIOUS_TOKEN_HEAD[0], PREVIOUS_TOKEN_HEAD[1]]
    assert torch.allclose(prev, torch.ones_like(prev), atol=1e-3)
    first = s.scores[:, 2, FIRST_TOKEN_HEAD[0], FIRST_TOKEN_HEAD[1]]
    assert torch.allclose(first, torch.ones_like(first), atol=1e-3)
    n = batch["input_ids"].shape[1]
    # uniform causal attention puts 1/(i+1) on key i-1 for queries i >= 1
    assert float(s.uniform[0, 0]) == pytest.approx(np.mean([1 / (i + 1) for i in range(1, n)]))
    lifts = s.lifts()
    assert float(lifts[0][PREVIOUS_TOKEN_HEAD]) == pytest.approx(1.0, abs=1e-3)
    assert float(lifts[1][PREVIOUS_TOKEN_HEAD]) < 0  # it avoids the key three back


def test_a_causal_model_refuses_positive_offsets(planted) -> None:
    hm, batch = planted
    with pytest.raises(ValueError, match="causal"):
        offset_scores(hm, batch, (1,))
    with pytest.raises(ValueError, match="distances"):
        decoy_lifts(hm, batch, offsets=(0, 3))


def test_the_decoy_threshold_sits_below_every_planted_specialist(planted) -> None:
    hm, batch = planted
    thresholds = calibrated_thresholds(decoy_lifts(hm, batch))
    assert 0 < thresholds.lift < 0.5
    scores = head_scores(hm, batch)
    for head, family in ((PREVIOUS_TOKEN_HEAD, "previous_token"), (FIRST_TOKEN_HEAD, "first_token"),
                         (INDUCTION_HEAD, "induction")):
        assert float(scores.lift(family)[head]) > thresholds.lift
    assert float(max(scores.lift(f)[UNIFORM_HEAD] for f in ("previous_token", "first_token"))) < thresholds.lift


def test_planted_labels_are_stable_and_a_coin_flip_label_is_not(planted) -> None:
    hm, batch = planted
    scores = head_scores(hm, batch)
    stable = label_stability(scores, n_resamples=40)
    assert stable.printed(PREVIOUS_TOKEN_HEAD) == "previous_token"
    assert stable.printed(FIRST_TOKEN_HEAD) == "first_token"
    assert stable.shares[PREVIOUS_TOKEN_HEAD] == 1.0
    # a score that sits exactly at the threshold on average: half the texts above, half below
    flip = head_scores(hm, batch)
    values = flip.per_input["previous_token"]
    u = float(flip.uniform["previous_token"].mean())
    target = u + 0.4 * (1 - u)  # lift 0.4 exactly
    values[:, 1, 1] = torch.where(torch.arange(values.shape[0]) % 2 == 0, target + 0.2, target - 0.2)
    shaky = label_stability(flip, n_resamples=60)
    assert 0.2 < shaky.shares[1, 1] < 0.8
    assert shaky.printed((1, 1)) == "unstable"
    assert "unstable" in shaky.counts()


# ------------------------------------------------------------------------------ positional


def test_previous_and_first_token_heads_are_the_planted_ones(planted) -> None:
    hm, batch = planted
    prev = previous_token_heads(hm, batch, n_resamples=999)
    assert [c.head for c in prev.heads] == [PREVIOUS_TOKEN_HEAD]
    assert prev.best.head == PREVIOUS_TOKEN_HEAD
    assert prev.heads[0].lift.low > prev.threshold and prev.heads[0].lift.value == pytest.approx(1.0, abs=1e-3)
    assert prev.n_select + prev.n_measure == batch["input_ids"].shape[0]
    first = first_token_heads(hm, batch, n_resamples=999)
    assert [c.head for c in first.heads] == [FIRST_TOKEN_HEAD]


def test_fixed_key_heads_needs_one_key(planted) -> None:
    hm, batch = planted
    from headlab.roles.positional import fixed_key_heads

    with pytest.raises(ValueError, match="exactly one"):
        fixed_key_heads(hm, batch)
    with pytest.raises(ValueError, match="causal"):
        fixed_key_heads(hm, batch, offset=1)


def test_a_null_computed_once_gives_the_same_heads(planted) -> None:
    from headlab.analysis.detect.calibration import decoy_lifts

    hm, batch = planted
    null = decoy_lifts(hm, batch)
    own, reused = (previous_token_heads(hm, batch, n_resamples=999, null=x) for x in (None, null))
    assert own.threshold == reused.threshold and own.candidates == reused.candidates
    half = {k: v[:4] for k, v in batch.items()}
    with pytest.raises(ValueError, match=r"same \d+ texts; got 4 texts"):
        previous_token_heads(hm, batch, null=decoy_lifts(hm, half))
    with pytest.raises(ValueError, match="got dict"):
        previous_token_heads(hm, batch, null={})


# --------------------------------------------------------------------------------- orphans


def test_the_uniform_writer_is_the_orphan_and_the_silent_sink_is_not(planted) -> None:
    hm, batch = planted
    found = orphan_heads(hm, batch, n_resamples=999)
    assert [c.head for c in found.heads] == [UNIFORM_HEAD]
    assert found.named[PREVIOUS_TOKEN_HEAD] and found.named[FIRST_TOKEN_HEAD] and not found.named[UNIFORM_HEAD]
    head, share, low, high = found.top()
    assert head == UNIFORM_HEAD and share > 0.9 and (low, high) == (1, 1)


def test_orphans_from_effects_selects_on_one_half_and_measures_on_the_other() -> None:
    rng = np.random.default_rng(0)
    effects = rng.uniform(0, 0.1, (2, 2, 40))
    effects[1, 1, :20] = 1.0          # large on the selection half only
    effects[0, 1, 20:] = 1.0          # large on the measurement half only: never chosen
    named = np.zeros((2, 2), dtype=bool)
    split = Split(np.arange(20), np.arange(20, 40), seed=0)
    found = orphans_from_effects(effects, named, split, n_resamples=999)
    assert [c.head for c in found.candidates] == [(1, 1)]
    assert found.heads == ()  # chosen on the first half, it is ordinary on the second
    named[1, 1] = True
    assert orphans_from_effects(effects, named, split, n_resamples=999).candidates == ()
    with pytest.raises(ValueError, match="n_layers, n_heads"):
        orphans_from_effects(effects[0], named, split)


def test_named_heads_uses_the_threshold(planted) -> None:
    hm, batch = planted
    scores = head_scores(hm, batch)
    named = named_heads(scores, 0.5)
    assert named[PREVIOUS_TOKEN_HEAD] and named[FIRST_TOKEN_HEAD] and not named[UNIFORM_HEAD]
    assert not named_heads(scores, 1.01).any()


# ------------------------------------------------------------------------------- syntactic


def _relations(batch) -> RelationSet:
    ids, mask = batch["input_ids"], batch["attention_mask"]
    n, pos = ids.shape
    first = torch.full((n, pos), -1)
    first[:, 3:] = 0                              # from every query >= 3 to the first token
    prev = torch.full((n, pos), -1)
    prev[:, 5::3] = torch.arange(4, pos - 1, 3)   # from every third query to the previous token
    return RelationSet(ids, mask, {"to first": pointer_targets(first), "to previous": pointer_targets(prev)},
                       {"to first": ("nearest zero", torch.zeros(n, pos, dtype=torch.long))})


def test_a_relation_head_beats_its_baseline_only_where_position_does_not_solve_it(planted) -> None:
    hm, batch = planted
    rs = _relations(batch)
    split = split_items(len(rs))
    to_first = relation_head(hm, rs, "to first", split, n_resamples=999)
    assert to_first.head == FIRST_TOKEN_HEAD and to_first.accuracy.value == 1.0
    assert to_first.baselines["nearest zero"].value == 1.0  # the named baseline is right too
    assert to_first.strongest == "nearest zero" and not to_first.beats_baseline
    assert to_first.baselines[OFFSET].value < 0.2  # no single offset reaches the first token
    to_prev = relation_head(hm, rs, "to previous", split, n_resamples=999)
    assert to_prev.head == PREVIOUS_TOKEN_HEAD and to_prev.offset == -1
    assert to_prev.lead.value == 0.0 and not to_prev.beats_baseline
    assert to_prev.tests[OFFSET].pvalue == 1.0  # no discordant query


def test_outcomes_measure_a_fixed_head_on_a_subgroup(planted) -> None:
    hm, batch = planted
    rs = _relations(batch)
    out = relation_outcomes(hm, rs, "to first")
    assert out.hits.shape[1:] == (2, 2) and out.text.shape == out.query.shape
    late = out.query >= 20
    split = split_items(len(rs))
    r = out.measure(INDUCTION_HEAD, -5, split.measure, late, n_resamples=999)
    assert r.n_items == int((late & np.isin(out.text, split.measure)).sum())
    assert r.accuracy.value < 0.5
    with pytest.raises(ValueError, match="no relation"):
        relation_outcomes(hm, rs, "nothing")


def test_several_relations_from_one_run_equal_one_run_each(planted) -> None:
    hm, batch = planted
    rs = _relations(batch)
    both = relations_outcomes(hm, rs, ("to first", "to previous"))
    for name in ("to first", "to previous"):
        one = relation_outcomes(hm, rs, name)
        assert np.array_equal(both[name].hits, one.hits) and np.array_equal(both[name].query, one.query)
        assert all(np.array_equal(both[name].offsets[k], one.offsets[k]) for k in one.offsets)
    assert not np.array_equal(both["to first"].hits, both["to previous"].hits)
    with pytest.raises(ValueError, match="no relation 'nothing'"):
        relations_outcomes(hm, rs, ("to first", "nothing"))


def test_a_head_chosen_elsewhere_is_measured_like_a_chosen_one(planted) -> None:
    hm, batch = planted
    out = relation_outcomes(hm, _relations(batch), "to previous")
    split = split_items(len(batch["input_ids"]))
    own = out.choose_and_measure(split, n_resamples=999)
    again = out.measure_chosen(own.head, split, n_resamples=999)  # the same head: the same numbers
    assert (again.head, again.offset, again.strongest, again.n_items) == (own.head, own.offset, own.strongest,
                                                                         own.n_items)
    assert again.accuracy == own.accuracy and again.lead == own.lead
    assert again.select_accuracy == own.select_accuracy == 1.0
    early = out.query < 20  # another head on a subgroup: offset chosen there, head scored there
    other = out.measure_chosen(INDUCTION_HEAD, split, early, n_resamples=999)
    keep = early & np.isin(out.text, split.select)
    assert other.head == INDUCTION_HEAD and other.offset == -1
    assert other.select_accuracy == pytest.approx(out.hits[keep, 1, 0].mean())
    assert other.n_items == int((early & np.isin(out.text, split.measure)).sum())
    with pytest.raises(ValueError, match=r"head \(2, 0\) is not a head"):
        out.measure_chosen((2, 0), split)


def test_the_wider_subject_relation_adds_only_a_pronoun_subjects_antecedent() -> None:
    from headlab.analysis.detect.predictive import BEFORE_VERB_SUBJECT
    from deviating.data.language import agreement_items, predictive_relation_set
    from deviating.training.recipes import RECIPES

    task = RECIPES["organism"].task
    docs = task.eval_data(8).windows
    rs = predictive_relation_set(docs, task.tokenizer())
    wide = subject_or_antecedent_set(rs, docs)
    gold, more = rs.relations[BEFORE_VERB_SUBJECT], wide.relations[SUBJECT_OR_ANTECEDENT]
    assert list(wide.relations) == [SUBJECT_OR_ANTECEDENT] and wide.baselines == {} and wide.offsets == rs.offsets
    assert torch.equal(gold.any(-1), more.any(-1)) and bool((more | ~gold).all())  # same queries, targets kept
    added = 0
    for i in agreement_items(docs):
        ante = docs[i.doc].antecedent[i.subject_pos]
        extra = more[i.doc, i.pos] & ~gold[i.doc, i.pos]
        if ante >= 0:
            assert docs[i.doc].pos_tag[i.subject_pos] == "PRON"  # only a pronoun subject has an antecedent
            assert torch.nonzero(extra).flatten().tolist() == [ante]
            added += 1
        else:
            assert not bool(extra.any())
    assert added > 0 and int((more & ~gold).sum()) == added
    with pytest.raises(ValueError, match="8 documents for a set of 4"):
        subject_or_antecedent_set(rs.subset(range(4)), docs)
    with pytest.raises(ValueError, match="no 'before verb->subject' relation"):
        subject_or_antecedent_set(wide, docs)


def test_english_split_reads_the_fixed_field() -> None:
    from types import SimpleNamespace as Item

    split = english_split([Item(split="select"), Item(split="measure"), Item(split="select")])
    assert split.select.tolist() == [0, 2] and split.measure.tolist() == [1]
    with pytest.raises(ValueError, match="select"):
        english_split([Item(split="train")])


def test_hand_pattern_spreads_the_rest_and_refuses_bad_rows() -> None:
    p = hand_pattern(4, {2: {0: 0.5}})
    assert np.allclose(p.sum(-1), 1) and p[2, 0] == 0.5 and p[2, 1] == p[2, 2] == 0.25 and p[1, 1] == 0.5
    assert np.allclose(hand_pattern(3, {}, causal=False), 1 / 3)
    with pytest.raises(ValueError, match="may not see"):
        hand_pattern(4, {1: {3: 1.0}})
    with pytest.raises(ValueError, match="sum"):
        hand_pattern(2, {0: {0: 0.5}})


def test_the_null_never_lowers_the_share_that_names_a_head(planted) -> None:
    from headlab.analysis.detect.calibration import null_lift

    hm, batch = planted
    null = decoy_lifts(hm, batch)
    q = null_lift(null)
    assert 0 < q < 0.4  # the planted heads put next to nothing on decoy keys
    assert calibrated_thresholds(null).lift == 0.4
    prev = previous_token_heads(hm, batch, n_resamples=999)
    assert prev.null_threshold == pytest.approx(null_lift(null, prev_split := split_items(24).select), abs=0)
    assert prev.threshold == 0.4 and [c.head for c in prev.beyond_null] == [PREVIOUS_TOKEN_HEAD]
    del prev_split
