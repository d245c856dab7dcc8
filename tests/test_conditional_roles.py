"""deviating.analysis.conditional_roles: chapter 7's subject head by construction, through the book's
one definition (deviating.roles.syntactic), on a model whose heads are set by hand on real
windows of the synthetic language, so that every answer is known.

Head 0.0 attends to its own position everywhere; head 0.1 attends, from the token before each
agreeing verb, to the verb's subject, except for a pronoun subject with an antecedent, where it
attends to the antecedent; head 0.2 finds the subject only in ``pp`` sentences (elsewhere its own
position). Rows put 0.9 on their key and spread the rest over every key they may see.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from deviating.analysis.conditional_roles import SEPARATED, construction_of, subject_head_by_construction
from deviating.data.language import agreement_items
from headlab.stats import split_items
from deviating.training.recipes import RECIPES


class _HandModel:
    """Just enough of a HeadModel for relation_outcomes: one layer of three hand-set heads."""

    causal, n_layers, n_heads = True, 1, 3

    def __init__(self, docs, tokenizer, ids):
        self.tokenizer, self.ids = tokenizer, ids
        n, pos = ids.shape
        key = torch.arange(pos).repeat(n, 3, 1)  # (doc, head, query): the key each row favours
        for i in agreement_items(docs):
            ante = docs[i.doc].antecedent[i.subject_pos]
            key[i.doc, 1, i.pos] = ante if (i.construction == "pron_subj" and ante >= 0) else i.subject_pos
            if i.construction == "pp":
                key[i.doc, 2, i.pos] = i.subject_pos
        seen = torch.tril(torch.ones(pos, pos))
        rest = 0.1 * seen / seen.sum(-1, keepdim=True)
        self.pattern = rest.expand(n, 3, pos, pos).clone()
        self.pattern.scatter_add_(-1, key[..., None], torch.full((n, 3, pos, 1), 0.9))

    def run_with_cache(self, batch, names=("pattern",)):
        ids = batch["input_ids"]
        start = next(s for s in range(len(self.ids)) if torch.equal(self.ids[s], ids[0]))
        p = self.pattern[start:start + len(ids)]
        return None, SimpleNamespace(pattern=lambda layer: p, attention_mask=batch["attention_mask"])


@pytest.fixture(scope="module")
def hand():
    task = RECIPES["organism"].task
    data = task.eval_data(24)
    return data, _HandModel(data.windows, task.tokenizer(), data.ids), split_items(24)


def test_the_head_is_chosen_on_the_separated_constructions_and_measured_on_each(hand):
    data, hm, split = hand
    roles = subject_head_by_construction(hm, data.windows, split, min_items=5, n_resamples=199)
    assert {"simple", "pp", "pron_subj"} <= set(roles.by_construction)
    assert roles.head.head == (0, 1) and roles.head.accuracy.value == 1.0
    for kind, r in roles.by_construction.items():
        assert r.head == (0, 1)
        measured = [i for i in data.agreement if construction_of(i) == kind and i.doc in set(split.measure.tolist())]
        assert r.n_items == len(measured) >= 5
        if kind.split("+")[0] in SEPARATED:  # the subject, wherever it is
            assert r.accuracy.value == 1.0 and r.lead.value > 0 and r.lead.low > 0
    simple = roles.by_construction["simple"]  # the subject is the query: offset 0 is as good
    assert simple.offset == 0 and simple.lead.value == 0.0
    kinds = list(roles.by_construction)
    assert kinds.index("simple") < kinds.index("pp") < kinds.index("pron_subj")  # adjacent, separated, pronouns


def test_a_pronoun_subject_counts_its_antecedent_only_in_the_wider_table(hand):
    data, hm, split = hand
    roles = subject_head_by_construction(hm, data.windows, split, min_items=5, n_resamples=199)
    measure = set(split.measure.tolist())
    ps = [i for i in data.agreement if i.construction == "pron_subj" and i.doc in measure]
    with_ante = np.mean([data.windows[i.doc].antecedent[i.subject_pos] >= 0 for i in ps])
    assert with_ante > 0  # some pronoun subjects have their antecedent in the window: the tables differ
    assert roles.by_construction["pron_subj"].accuracy.value == pytest.approx(1 - with_ante)
    assert roles.either["pron_subj"].accuracy.value == 1.0
    assert roles.either["pp"].accuracy.value == roles.by_construction["pp"].accuracy.value == 1.0


def test_the_constructions_named_decide_the_head(hand):
    data, hm, split = hand
    only_pp = subject_head_by_construction(hm, data.windows, split, constructions=("pp",), n_resamples=199)
    assert only_pp.head.head == (0, 1)  # heads 0.1 and 0.2 tie on pp: the lower index
    simple = subject_head_by_construction(hm, data.windows, split, constructions=("simple",), n_resamples=199)
    assert simple.head.head == (0, 0)  # every head is right there: the first
    assert simple.pooled.head == only_pp.pooled.head == (0, 1)  # pooled over every construction: 0.1
    assert simple.pooled.n_items == sum(i.doc in set(split.measure.tolist()) for i in data.agreement)


def test_small_constructions_are_listed_and_bad_arguments_refused(hand):
    data, hm, split = hand
    roles = subject_head_by_construction(hm, data.windows, split, min_items=10_000, n_resamples=199)
    assert roles.by_construction == {} and roles.either == {}
    assert sum(roles.left_out.values()) == sum(i.doc in set(split.measure.tolist()) for i in data.agreement)
    with pytest.raises(ValueError, match="min_items must be at least 2"):
        subject_head_by_construction(hm, data.windows, split, min_items=1)
    with pytest.raises(ValueError, match=r"construction\(s\) \['passive'\]"):
        subject_head_by_construction(hm, data.windows, split, constructions=("passive",))
