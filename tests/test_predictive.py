"""detect.predictive: relations whose query is the position that predicts the verb or pronoun."""

from __future__ import annotations

import pytest
import torch

from headlab.detect import offset_baseline, prediction_accuracy, relation_scores
from headlab.detect.predictive import (
    BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT, predictive_relation_set,
)
from headlab.language import Language, agreement_items, pack, pronoun_items, tokenizer
from headlab.model import HeadModel
from headlab.organisms import GPT, GPTConfig


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
