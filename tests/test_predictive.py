"""detect.predictive: relations whose query is the position that predicts the verb or pronoun."""

from __future__ import annotations

import pytest
import torch

from headlab.analysis.detect import offset_baseline, prediction_accuracy, relation_scores
from headlab.analysis.detect.predictive import BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT
from deviating.data.language import (
    Language, agreement_items, pack, predictive_relation_set, pronoun_items, tokenizer,
)
from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT, GPTConfig


@pytest.fixture(scope="module")
def windows():
    return pack(Language().sample(40, seed=0), n_ctx=48, drop_last=True)


def test_queries_sit_one_before_the_word_and_point_at_its_evidence(windows) -> None:
    rs = predictive_relation_set(windows, tokenizer(Language()))
    verbs = rs.relations[BEFORE_VERB_SUBJECT]
    for item in agreement_items(windows):
        assert windows[item.doc].pos_tag[item.pos + 1] == "VERB"
        assert bool(verbs[item.doc, item.pos, item.subject_pos])
        assert int(verbs[item.doc, item.pos].sum()) == 1
    assert int(verbs.sum()) == len({(i.doc, i.pos) for i in agreement_items(windows)})
    pronouns = rs.relations[BEFORE_PRONOUN_ANTECEDENT]
    for item in pronoun_items(windows):
        assert windows[item.doc].pos_tag[item.pos + 1] == "PRON"
        assert bool(pronouns[item.doc, item.pos, item.antecedent_pos])


def test_the_baseline_is_the_nearest_noun_before_the_pronoun(windows) -> None:
    rs = predictive_relation_set(windows, tokenizer(Language()))
    label, nearest = rs.baselines[BEFORE_PRONOUN_ANTECEDENT]
    items = pronoun_items(windows)
    for item in items:
        assert int(nearest[item.doc, item.pos]) == item.nearest_noun_pos
    expected = sum(i.nearest_noun_pos == i.antecedent_pos for i in items) / len(items)
    gold = rs.relations[BEFORE_PRONOUN_ANTECEDENT]
    assert prediction_accuracy(gold, nearest, rs.attention_mask) == pytest.approx(expected)
    # the verb's subject is never at the query itself, so offset 0 never wins
    assert offset_baseline(rs.relations[BEFORE_VERB_SUBJECT], rs.attention_mask).offset < 0


def test_relation_scores_run_on_it(windows) -> None:
    tok = tokenizer(Language())
    torch.manual_seed(0)
    hm = HeadModel(GPT(GPTConfig(d_vocab=len(tok), n_ctx=48, d_model=16, n_layers=2, n_heads=2)), tok)
    results = relation_scores(hm, predictive_relation_set(windows, tok))
    assert set(results) == {BEFORE_VERB_SUBJECT, BEFORE_PRONOUN_ANTECEDENT}
    assert results[BEFORE_PRONOUN_ANTECEDENT].baseline[0] == "nearest noun before the pronoun"
    assert results[BEFORE_VERB_SUBJECT].accuracy.shape == (2, 2)


# ----------------------------------------------------- offset 0, the verb's baseline, splits, copies


def test_the_query_can_be_its_own_target_so_the_offset_baseline_tries_zero(windows) -> None:
    rs = predictive_relation_set(windows, tokenizer(Language()))
    assert 0 in rs.offsets and max(rs.offsets) == 0 and min(rs.offsets) == -(rs.input_ids.shape[1] - 1)
    items = agreement_items(windows)
    at_query = sum(i.subject_pos == i.pos for i in items) / len(items)  # "the cat | sleeps"
    assert at_query > 0.2
    base = offset_baseline(rs.relations[BEFORE_VERB_SUBJECT], rs.attention_mask, rs.offsets)
    assert base.accuracies[0] == pytest.approx(at_query)
    # relation_scores (and so the held-out comparison) uses the set's offsets, and so do subsets
    tok = tokenizer(Language())
    torch.manual_seed(0)
    hm = HeadModel(GPT(GPTConfig(d_vocab=len(tok), n_ctx=48, d_model=16, n_layers=1, n_heads=2)), tok)
    result = relation_scores(hm, rs)[BEFORE_VERB_SUBJECT]
    assert result.offset.accuracies[0] == pytest.approx(at_query)
    assert rs.subset([0, 1]).offsets == rs.offsets


def test_the_verbs_baseline_is_the_nearest_noun_or_pronoun_at_or_before_the_query(windows) -> None:
    rs = predictive_relation_set(windows, tokenizer(Language()))
    label, nearest = rs.baselines[BEFORE_VERB_SUBJECT]
    assert "noun or pronoun" in label
    for item in agreement_items(windows):
        tags = windows[item.doc].pos_tag
        expected = max(k for k in range(item.pos + 1) if tags[k] in ("NOUN", "PRON"))
        assert int(nearest[item.doc, item.pos]) == expected


def _planted(rs, hit) -> torch.Tensor:
    """One head that points at the gold target of the queries where ``hit[b, q]``, else at key 0."""
    gold = rs.relations[BEFORE_VERB_SUBJECT]
    batch, pos = rs.input_ids.shape
    pattern = torch.zeros(batch, 1, pos, pos)
    pattern[:, 0, :, 0] = 1.0
    b, q, k = torch.nonzero(gold & hit[:, :, None], as_tuple=True)
    pattern[b, 0, q] = 0.0
    pattern[b, 0, q, k] = 1.0
    return pattern


def test_split_relation_partitions_the_queries_and_scores_each_group(windows) -> None:
    from headlab.analysis.detect import relation_accuracy
    from headlab.analysis.detect.predictive import split_relation

    rs = predictive_relation_set(windows, tokenizer(Language()))
    items = agreement_items(windows)
    split = split_relation(rs, BEFORE_VERB_SUBJECT, items, "attractor")
    assert list(split.relations) == [f"{BEFORE_VERB_SUBJECT} [False]", f"{BEFORE_VERB_SUBJECT} [True]"]
    parts = list(split.relations.values())
    assert torch.equal(parts[0] | parts[1], rs.relations[BEFORE_VERB_SUBJECT])
    assert not bool((parts[0] & parts[1]).any())
    assert split.baselines[f"{BEFORE_VERB_SUBJECT} [True]"] is rs.baselines[BEFORE_VERB_SUBJECT]
    assert split.offsets == rs.offsets
    # a head right on exactly the items with an attractor: 1 there, 0 on the others
    hit = torch.zeros(rs.input_ids.shape, dtype=torch.bool)
    for item in items:
        hit[item.doc, item.pos] = item.attractor and item.subject_pos != 0
    pattern = _planted(rs, hit)
    on = relation_accuracy(pattern, parts[1], rs.attention_mask, pooled=True).item()
    off = relation_accuracy(pattern, parts[0], rs.attention_mask, pooled=True).item()
    assert on == 1.0 and off < 0.05  # (a subject at key 0 is hit by the parked weight)
    # a function works as well as an attribute name
    by_distance = split_relation(rs, BEFORE_VERB_SUBJECT, items, lambda i: min(i.distance, 3))
    assert len(by_distance.relations) == 3


def test_split_relation_refuses_items_that_do_not_match(windows) -> None:
    from headlab.analysis.detect.predictive import split_relation

    rs = predictive_relation_set(windows, tokenizer(Language()))
    with pytest.raises(ValueError, match="no relation"):
        split_relation(rs, "verb->object", agreement_items(windows), "construction")
    with pytest.raises(ValueError, match="not an annotated query"):
        split_relation(rs, BEFORE_VERB_SUBJECT, pronoun_items(windows), "construction")
    with pytest.raises(ValueError, match="have no item"):
        split_relation(rs, BEFORE_VERB_SUBJECT, agreement_items(windows)[1:], "construction")


def test_copy_relation_points_at_the_token_after_the_earlier_copy(windows) -> None:
    from headlab.analysis.detect import relation_accuracy
    from headlab.analysis.detect.predictive import COPY_SOURCE, RARE_SOURCE
    from deviating.data.language import copy_items, copy_relation_set, rare_items

    lang = Language()
    rs = copy_relation_set(windows, tokenizer(lang), lang)
    gold = rs.relations[COPY_SOURCE]
    items = copy_items(windows)
    assert int(gold.sum()) == len(items) > 0
    batch, pos = rs.input_ids.shape
    induction = torch.zeros(batch, 1, pos, pos)
    induction[:, 0, :, 0] = 1.0
    for b, doc in enumerate(windows):  # a planted induction head: after the previous occurrence
        for q in range(pos):
            earlier = [j for j in range(q) if doc.tokens[j] == doc.tokens[q]]
            if earlier and earlier[-1] + 1 <= q:
                induction[b, 0, q] = 0.0
                induction[b, 0, q, earlier[-1] + 1] = 1.0
    accuracy = relation_accuracy(induction, gold, rs.attention_mask, pooled=True).item()
    # the earlier copy is the latest earlier occurrence unless the token also occurs in between
    assert accuracy > 0.8
    assert int(rs.relations[RARE_SOURCE].sum()) == len(rare_items(windows, lang))
    assert set(copy_relation_set(windows, tokenizer(lang)).relations) == {COPY_SOURCE}
