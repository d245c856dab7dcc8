"""Relations as a causal language model needs them: from the position that *predicts* a word.

:func:`headlab.detect.synthetic_relation_set` asks whether a head attends from a verb to
its subject. A causal language model has to know the subject one step earlier: the verb's
form (*sleeps* or *sleep*) is predicted at the position before the verb, and whatever
attention gathers the subject's number must happen there. The same holds for a pronoun's
form (*he*, *she*, *they*) and its antecedent. So the relations here put the query at the
predicting position ``pos`` of the language's evaluation items:

* ``"before verb->subject"``: from the token before each agreeing verb to the verb's subject
  (``headlab.language.agreement_items``);
* ``"before pronoun->antecedent"``: from the token before each pronoun to its antecedent
  (``headlab.language.pronoun_items``), beside the baseline *nearest noun before the
  pronoun* (the query itself included, if it is a noun).

Scores and baselines are computed exactly as for the other relation sets
(:func:`headlab.detect.relation_scores`, :func:`headlab.detect.held_out_relation_scores`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from .annotated import RelationSet
from .relations import nearest_preceding, pointer_targets

__all__ = ["BEFORE_VERB_SUBJECT", "BEFORE_PRONOUN_ANTECEDENT", "predictive_relation_set"]

BEFORE_VERB_SUBJECT = "before verb->subject"
BEFORE_PRONOUN_ANTECEDENT = "before pronoun->antecedent"


def predictive_relation_set(docs: Sequence, tok) -> RelationSet:
    """The two predictive relations of synthetic-language documents (e.g. packed windows).

    ``tok``: the language's tokenizer. A query is only made where the target lies inside
    the same document (as for the evaluation items).
    """
    from headlab.language import PAD, agreement_items, encode, pronoun_items

    docs = list(docs)
    if not docs:
        raise ValueError("no documents to build relations from")
    ids = encode(tok, docs)  # (batch, pos): one word, one id
    mask = torch.tensor([[t != PAD for t in d.tokens] for d in docs], dtype=torch.long)
    subject = torch.full(ids.shape, -1, dtype=torch.long)
    for item in agreement_items(docs):
        subject[item.doc, item.pos] = item.subject_pos
    antecedent = torch.full(ids.shape, -1, dtype=torch.long)
    for item in pronoun_items(docs):
        antecedent[item.doc, item.pos] = item.antecedent_pos
    nouns = torch.tensor([[tag == "NOUN" for tag in d.pos_tag] for d in docs])
    # the nearest noun before the pronoun at pos + 1, i.e. at or before the query pos
    nearest = torch.full(ids.shape, -1, dtype=torch.long)
    nearest[:, :-1] = nearest_preceding(nouns)[:, 1:]
    relations = {BEFORE_VERB_SUBJECT: pointer_targets(subject),
                 BEFORE_PRONOUN_ANTECEDENT: pointer_targets(antecedent)}
    baselines = {BEFORE_PRONOUN_ANTECEDENT: ("nearest noun before the pronoun", nearest)}
    return RelationSet(ids, mask, relations, baselines,
                       source="synthetic language, queries at the predicting position")
