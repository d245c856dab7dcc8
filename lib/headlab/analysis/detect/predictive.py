"""Relations as a causal language model needs them: from the position that *predicts* a word.

:func:`headlab.analysis.detect.synthetic_relation_set` asks whether a head attends from a verb to
its subject. A causal language model has to know the subject one step earlier: the verb's
form (*sleeps* or *sleep*) is predicted at the position before the verb, and whatever
attention gathers the subject's number must happen there. The same holds for a pronoun's
form (*he*, *she*, *they*) and its antecedent. So the relations here put the query at the
predicting position ``pos`` of the language's evaluation items:

* ``"before verb->subject"``: from the token before each agreeing verb to the verb's subject
  (``deviating.data.language.agreement_items``), beside the baseline *nearest noun or pronoun at or
  before the query*;
* ``"before pronoun->antecedent"``: from the token before each pronoun to its antecedent
  (``deviating.data.language.pronoun_items``), beside the baseline *nearest noun before the
  pronoun* (the query itself included, if it is a noun).

The query can be its own target ("the cat | sleeps": the token before the verb is the
subject), so the fixed-offset baseline of these sets tries offset 0 too (``RelationSet.offsets``).
Scores and baselines are computed exactly as for the other relation sets
(:func:`headlab.analysis.detect.relation_scores`, :func:`headlab.analysis.detect.held_out_relation_scores`);
:func:`split_relation` splits a relation by a property of its items (construction,
attractor, distance), so that each group gets its own accuracies and baselines.
:func:`copy_relation_set` does the same for copying: from a position inside a repeated
sentence (or before a repeated rare word) to the earlier occurrence of the token to predict.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from headlab.analysis.detect.annotated import RelationSet
from headlab.analysis.detect.relations import nearest_preceding, pointer_targets

__all__ = ["BEFORE_VERB_SUBJECT", "BEFORE_PRONOUN_ANTECEDENT", "COPY_SOURCE", "RARE_SOURCE", "predictive_relation_set",
           "split_relation", "copy_relation_set"]

BEFORE_VERB_SUBJECT = "before verb->subject"
BEFORE_PRONOUN_ANTECEDENT = "before pronoun->antecedent"


def _nearest_at_or_before(candidates: torch.Tensor) -> torch.Tensor:
    """For each position ``i``, the nearest ``j <= i`` with ``candidates[b, j]``, else -1."""
    nearest = torch.full(candidates.shape, -1, dtype=torch.long)
    nearest[:, :-1] = nearest_preceding(candidates)[:, 1:]  # nearest j < i + 1
    last = candidates.shape[1] - 1
    nearest[:, last] = torch.where(candidates[:, last], torch.tensor(last), nearest_preceding(candidates)[:, last])
    return nearest


def predictive_relation_set(docs: Sequence, tok) -> RelationSet:
    """The two predictive relations of synthetic-language documents (e.g. packed windows).

    ``tok``: the language's tokenizer. A query is only made where the target lies inside
    the same document (as for the evaluation items).
    """
    from deviating.data.language import PAD, agreement_items, encode, pronoun_items

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
    pronouns = torch.tensor([[tag == "PRON" for tag in d.pos_tag] for d in docs])
    relations = {BEFORE_VERB_SUBJECT: pointer_targets(subject),
                 BEFORE_PRONOUN_ANTECEDENT: pointer_targets(antecedent)}
    baselines = {  # the query pos predicts the word at pos + 1: "before" it means at or before pos
        BEFORE_VERB_SUBJECT: ("nearest noun or pronoun before the verb", _nearest_at_or_before(nouns | pronouns)),
        BEFORE_PRONOUN_ANTECEDENT: ("nearest noun before the pronoun", _nearest_at_or_before(nouns)),
    }
    pos = ids.shape[1]
    return RelationSet(ids, mask, relations, baselines,
                       source="synthetic language, queries at the predicting position",
                       offsets=tuple(range(-(pos - 1), 1)))


def split_relation(relation_set: RelationSet, name: str, items: Sequence,
                   by: str | Callable[[Any], Any]) -> RelationSet:
    """Relation ``name`` split into one relation per group of its items.

    ``items``: the evaluation items whose queries make up the relation (each with ``doc`` and
    ``pos``, e.g. ``agreement_items(docs)`` for ``"before verb->subject"``); ``by``: an item
    attribute (``"construction"``, ``"attractor"``) or a function ``item -> group``. Returns a
    :class:`RelationSet` on the same inputs holding only the relations ``f"{name} [{group}]"``,
    in sorted group order, each with ``name``'s baseline and the same offsets, so that
    :func:`headlab.analysis.detect.relation_scores` gives every group its own accuracies and baselines.
    Every annotated query of ``name`` must belong to exactly one item.
    """
    if name not in relation_set.relations:
        raise ValueError(f"no relation {name!r} in the set; it has {', '.join(relation_set.relations)}")
    gold = relation_set.relations[name]  # (batch, q_pos, k_pos)
    key = by if callable(by) else (lambda item: getattr(item, by))
    groups: dict[Any, torch.Tensor] = {}
    seen = torch.zeros(gold.shape[:2], dtype=torch.bool)
    for item in items:
        doc, pos = int(item.doc), int(item.pos)
        if not (0 <= doc < gold.shape[0] and 0 <= pos < gold.shape[1]) or not bool(gold[doc, pos].any()):
            raise ValueError(f"item at doc {doc}, pos {pos} is not an annotated query of {name!r}: "
                             "pass the items the relation set was built from")
        if bool(seen[doc, pos]):
            raise ValueError(f"two items share the query at doc {doc}, pos {pos}")
        seen[doc, pos] = True
        group = key(item)
        groups.setdefault(group, torch.zeros(gold.shape[:2], dtype=torch.bool))[doc, pos] = True
    missing = gold.any(-1) & ~seen
    if bool(missing.any()):
        doc, pos = (int(x) for x in torch.nonzero(missing)[0])
        raise ValueError(f"{int(missing.sum())} annotated queries of {name!r} have no item "
                         f"(the first at doc {doc}, pos {pos}): pass every item of the relation")
    relations, baselines = {}, {}
    for group in sorted(groups, key=str):
        split = f"{name} [{group}]"
        relations[split] = gold & groups[group][:, :, None]
        if name in relation_set.baselines:
            baselines[split] = relation_set.baselines[name]
    return RelationSet(relation_set.input_ids, relation_set.attention_mask, relations, baselines,
                       relation_set.source, relation_set.offsets)


COPY_SOURCE = "copy->source"
RARE_SOURCE = "rare->earlier occurrence"


def copy_relation_set(docs: Sequence, tok, lang=None) -> RelationSet:
    """Copying as a relation: where a head must look to predict a repeated token.

    * ``"copy->source"``: from each position ``pos`` inside a repeated sentence
      (``deviating.data.language.copy_items``) to ``source_pos``, the earlier occurrence of the token
      to predict, which is the token *after* the earlier occurrence of the current one: the
      target of an induction head, on the language's own text rather than on random tokens;
    * with ``lang`` (the documents' ``Language``), ``"rare->earlier occurrence"``: from the
      position before each repeated rare word (``deviating.data.language.rare_items``) to its latest
      earlier occurrence.

    Only the fixed-offset baseline applies (offsets up to 0, as for the predictive relations).
    """
    from deviating.data.language import PAD, copy_items, encode, rare_items

    docs = list(docs)
    if not docs:
        raise ValueError("no documents to build relations from")
    ids = encode(tok, docs)
    mask = torch.tensor([[t != PAD for t in d.tokens] for d in docs], dtype=torch.long)
    sources = {COPY_SOURCE: copy_items(docs)}
    if lang is not None:
        sources[RARE_SOURCE] = rare_items(docs, lang)
    relations = {}
    for name, items in sources.items():
        pointers = torch.full(ids.shape, -1, dtype=torch.long)
        for item in items:
            pointers[item.doc, item.pos] = item.source_pos
        relations[name] = pointer_targets(pointers)
    pos = ids.shape[1]
    return RelationSet(ids, mask, relations, {}, source="synthetic language, copies and rare words",
                       offsets=tuple(range(-(pos - 1), 1)))
