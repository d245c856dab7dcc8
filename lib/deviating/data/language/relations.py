"""Relation sets and token frequencies of the synthetic language, for headlab's detectors.

headlab scores heads on any :class:`~headlab.analysis.detect.RelationSet` and any
``(d_vocab,)`` token-frequency tensor; the synthetic language knows its ground truth, so the
book builds both here from its documents (``Document.subject``, ``Document.antecedent``,
the part-of-speech tags, the evaluation items) and from ``Language.frequency``:

* :func:`synthetic_relation_set`: verb -> subject (and, reversed, subject -> verb) and
  pronoun -> antecedent at the word itself, beside the *nearest preceding noun* baseline
  (exact: the tags say which words are nouns). One word is one token.
* :func:`predictive_relation_set`: the same relations from the position that predicts the
  verb or pronoun (``headlab.analysis.detect.predictive`` explains why a causal model needs them);
* :func:`copy_relation_set`: copying as a relation (repeated sentences, repeated rare words);
* :func:`subject_or_antecedent_set`: the predictive subject relation with a pronoun subject's
  antecedent as a second target;
* :func:`synthetic_token_frequency`: the ``rare_token`` score's frequencies.
"""

from __future__ import annotations

from typing import Sequence

import torch

from headlab.analysis.detect import (
    PRONOUN_ANTECEDENT, SUBJECT_VERB, VERB_SUBJECT, RelationSet, nearest_preceding, pointer_targets,
)
from headlab.analysis.detect.predictive import (
    BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT, COPY_SOURCE, RARE_SOURCE,
)
from deviating.data.language.document import PAD
from deviating.data.language.grammar import Language
from deviating.data.language.items import agreement_items, copy_items, pronoun_items, rare_items
from deviating.data.language.tokenize import encode

__all__ = ["SUBJECT_OR_ANTECEDENT", "synthetic_relation_set", "predictive_relation_set", "copy_relation_set",
           "subject_or_antecedent_set", "nearest_at_or_before", "synthetic_token_frequency"]

SUBJECT_OR_ANTECEDENT = "before verb->subject or its antecedent"


def synthetic_relation_set(docs: Sequence, tok) -> RelationSet:
    """Relations of synthetic-language documents (e.g. packed windows of equal length).

    ``tok``: the language's tokenizer (:func:`tokenizer` of the language).
    """
    ids = encode(tok, docs)  # (batch, pos); one word, one id
    mask = torch.tensor([[t != PAD for t in d.tokens] for d in docs], dtype=torch.long)
    subject = torch.tensor([d.subject for d in docs], dtype=torch.long)
    antecedent = torch.tensor([d.antecedent for d in docs], dtype=torch.long)
    nouns = torch.tensor([[tag == "NOUN" for tag in d.pos_tag] for d in docs])
    relations = {
        VERB_SUBJECT: pointer_targets(subject),
        SUBJECT_VERB: pointer_targets(subject, reverse=True),
        PRONOUN_ANTECEDENT: pointer_targets(antecedent),
    }
    baselines = {PRONOUN_ANTECEDENT: ("nearest preceding noun", nearest_preceding(nouns))}
    return RelationSet(ids, mask, relations, baselines, source="synthetic language (Document annotations)")


def nearest_at_or_before(candidates: torch.Tensor) -> torch.Tensor:
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
        BEFORE_VERB_SUBJECT: ("nearest noun or pronoun before the verb", nearest_at_or_before(nouns | pronouns)),
        BEFORE_PRONOUN_ANTECEDENT: ("nearest noun before the pronoun", nearest_at_or_before(nouns)),
    }
    pos = ids.shape[1]
    return RelationSet(ids, mask, relations, baselines,
                       source="synthetic language, queries at the predicting position",
                       offsets=tuple(range(-(pos - 1), 1)))


def copy_relation_set(docs: Sequence, tok, lang=None) -> RelationSet:
    """Copying as a relation: where a head must look to predict a repeated token.

    * ``"copy->source"``: from each position ``pos`` inside a repeated sentence
      (:func:`copy_items`) to ``source_pos``, the earlier occurrence of the token
      to predict, which is the token *after* the earlier occurrence of the current one: the
      target of an induction head, on the language's own text rather than on random tokens;
    * with ``lang`` (the documents' ``Language``), ``"rare->earlier occurrence"``: from the
      position before each repeated rare word (:func:`rare_items`) to its latest
      earlier occurrence.

    Only the fixed-offset baseline applies (offsets up to 0, as for the predictive relations).
    """
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


def subject_or_antecedent_set(relation_set: RelationSet, docs) -> RelationSet:
    """The predictive subject relation of ``relation_set`` (built by
    :func:`predictive_relation_set` from the synthetic-language
    documents ``docs``) with one more target per pronoun subject: the noun the pronoun refers
    to (``Document.antecedent``), when it lies in the same document.

    The one relation of the set returned, ``SUBJECT_OR_ANTECEDENT``, has the same queries
    in the same order as ``BEFORE_VERB_SUBJECT``, no named baseline and the same offsets; a
    head points at a target when its largest weight is on the subject or on that antecedent.
    """
    if BEFORE_VERB_SUBJECT not in relation_set.relations:
        raise ValueError(f"the set has no {BEFORE_VERB_SUBJECT!r} relation (it has "
                         f"{', '.join(relation_set.relations)}); build it with predictive_relation_set")
    docs = list(docs)
    gold = relation_set.relations[BEFORE_VERB_SUBJECT].clone()
    if len(docs) != gold.shape[0]:
        raise ValueError(f"{len(docs)} documents for a set of {gold.shape[0]} inputs: pass the documents "
                         "the set was built from")
    for item in agreement_items(docs):
        if not bool(gold[item.doc, item.pos, item.subject_pos]):
            raise ValueError(f"agreement item at doc {item.doc}, pos {item.pos} is not a query of the set: "
                             "pass the documents the set was built from")
        antecedent = docs[item.doc].antecedent[item.subject_pos]
        if antecedent >= 0:
            gold[item.doc, item.pos, antecedent] = True
    return RelationSet(relation_set.input_ids, relation_set.attention_mask, {SUBJECT_OR_ANTECEDENT: gold}, {},
                       relation_set.source, relation_set.offsets)


def synthetic_token_frequency(lang, tok) -> torch.Tensor:
    """``(len(tok),)``: ``lang.frequency(word)`` for each id of the language's tokenizer;
    ``inf`` for special tokens (never rare)."""
    if not isinstance(lang, Language):
        raise TypeError(f"lang must be a deviating.data.language.Language (Language() or "
                        f"Language.from_description(...)), got {type(lang).__name__}")
    special, words = set(tok.all_special_ids), set(lang.vocab)
    freq = torch.full((len(tok),), float("inf"), dtype=torch.float64)
    for i in range(len(tok)):
        word = tok.convert_ids_to_tokens(i)
        if i not in special and word in words:
            freq[i] = lang.frequency(word)
    return freq
