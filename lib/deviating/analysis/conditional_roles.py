"""A head's role as a statement about a distribution: "the subject head", construction by construction.

Chapter 7 asks whether the organism's subject head points at the subject in every construction.
Every rule here is the book's one definition (:mod:`deviating.roles.syntactic`): the
pointing rule, the selection split (heads and the best fixed offset chosen on the selection
windows, everything reported on the others) and the strongest baseline (the best fixed offset or
the nearest noun or pronoun, whichever is more accurate on the selection windows). What this
module adds is chapter 7's condition and its table:

* the subject head is chosen on the constructions where words can stand between a noun subject
  and its verb (:data:`SEPARATED`), since where the subject is the token before the verb
  (:data:`ADJACENT`) any head that attends to its own position "finds" it;
* that one head is then measured on each construction (``"+attr"`` when an attractor
  intervenes) with :meth:`~deviating.roles.syntactic.RelationOutcomes.measure_chosen`,
  the offset and the strongest baseline chosen per construction on the selection windows;
* and again with a pronoun subject's antecedent counted as a hit
  (:func:`~deviating.data.language.subject_or_antecedent_set`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deviating.roles.syntactic import RelationHead, relation_outcomes
from headlab.stats import Split

__all__ = ["SEPARATED", "ADJACENT", "ConstructionRoles", "construction_of", "subject_head_by_construction"]

SEPARATED = ("pp", "subj_rel", "obj_rel")  # words can stand between a noun subject and its verb
ADJACENT = ("simple", "pron_subj", "pron_obj")  # the subject is the token right before the verb


def construction_of(item) -> str:
    """An agreement item's construction, ``"+attr"`` added when a noun of the other number intervenes."""
    return item.construction + ("+attr" if item.attractor else "")


@dataclass(frozen=True)
class ConstructionRoles:
    """The subject head chosen on :data:`SEPARATED` and measured construction by construction.

    Attributes:
        head: the subject head, chosen on the selection windows of the separated constructions
            and measured, pooled, on their other windows.
        pooled: the head the one definition chooses on every construction pooled (chapter 4's
            condition), measured pooled on the other windows, for comparison.
        by_construction: construction -> the same head on that construction's measured verbs.
        either: construction -> the same head with a pronoun subject's antecedent counted too
            (equal to ``by_construction`` where the subject is a noun).
        left_out: construction -> measured verbs, for constructions with fewer than
            ``min_items`` of them (not in the two tables).
    """

    head: RelationHead
    pooled: RelationHead
    by_construction: dict[str, RelationHead]
    either: dict[str, RelationHead]
    left_out: dict[str, int]


def subject_head_by_construction(hm, docs, split: Split, *, constructions=SEPARATED, min_items: int = 10,
                                 n_resamples: int = 2999, seed: int = 0) -> ConstructionRoles:
    """Chapter 7's subject head of ``hm`` on the synthetic-language documents ``docs`` (e.g. the
    evaluation windows), by construction.

    Args:
        hm: a :class:`~headlab.heads.model.HeadModel` of the synthetic language.
        docs: the documents (windows) to read; their agreement items are the queries.
        split: which documents select (``split.select``) and which measure (``split.measure``),
            as positions into ``docs`` (e.g. ``headlab.stats.split_items(len(docs))``).
        constructions: the base constructions the head is chosen on.
        min_items: constructions with fewer measured verbs are left out of the tables (and
            listed in ``left_out``).
        n_resamples, seed: of the bootstrap intervals (over documents).
    """
    from headlab.analysis.detect.predictive import BEFORE_VERB_SUBJECT
    from deviating.data.language import (
        SUBJECT_OR_ANTECEDENT, agreement_items, predictive_relation_set, subject_or_antecedent_set,
    )

    docs = list(docs)
    if min_items < 2:
        raise ValueError(f"min_items must be at least 2 (a bootstrap needs two verbs); got {min_items}")
    relation_set = predictive_relation_set(docs, hm.tokenizer)
    subject = relation_outcomes(hm, relation_set, BEFORE_VERB_SUBJECT)
    wide = relation_outcomes(hm, subject_or_antecedent_set(relation_set, docs), SUBJECT_OR_ANTECEDENT)
    if not (np.array_equal(subject.text, wide.text) and np.array_equal(subject.query, wide.query)):
        raise RuntimeError("the subject relation and its widened form have different queries")
    kind_at = {(i.doc, i.pos): construction_of(i) for i in agreement_items(docs)}
    kind = np.array([kind_at[int(d), int(p)] for d, p in zip(subject.text, subject.query)])
    base = np.array([k.split("+")[0] for k in kind])
    unknown = sorted(set(constructions) - set(base.tolist()))
    if unknown:
        raise ValueError(f"no verbs of construction(s) {unknown}; these documents have {sorted(set(base.tolist()))}")
    kw = dict(n_resamples=n_resamples, seed=seed)
    head = subject.choose_and_measure(split, np.isin(base, constructions), **kw)
    pooled = subject.choose_and_measure(split, **kw)
    measured = np.isin(subject.text, np.asarray(split.measure))
    by, either, left_out = {}, {}, {}
    for k in sorted(set(kind.tolist()), key=_order):
        n = int((measured & (kind == k)).sum())
        if n < min_items:
            left_out[k] = n
            continue
        by[k] = subject.measure_chosen(head.head, split, kind == k, **kw)
        either[k] = wide.measure_chosen(head.head, split, kind == k, **kw)
    return ConstructionRoles(head, pooled, by, either, left_out)


def _order(kind: str) -> tuple[int, str]:
    """Adjacent constructions first, then separated, each without and with an attractor."""
    names = ("simple", *SEPARATED, "pron_subj", "pron_obj")
    base = kind.split("+")[0]
    return (names.index(base) if base in names else len(names), kind)
