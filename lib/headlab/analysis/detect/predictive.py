"""Relations as a causal language model needs them: from the position that *predicts* a word.

A causal LM predicts a verb's (pronoun's) form at the position before it, so these relations
put the query at the predicting position; a corpus that knows its items builds them:

* ``BEFORE_VERB_SUBJECT``: from the token before each agreeing verb to the verb's subject;
* ``BEFORE_PRONOUN_ANTECEDENT``: from the token before each pronoun to its antecedent;
* ``COPY_SOURCE``: from a position inside a repeated sentence to the earlier occurrence of
  the token to predict (an induction head's target, on real text);
* ``RARE_SOURCE``: from the position before a repeated rare word to its latest earlier occurrence.

The query can be its own target, so the offset baseline tries 0 too (``RelationSet.offsets``).
:func:`split_relation` splits a relation by a property of its items (construction, distance).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from headlab.analysis.detect.annotated import RelationSet

__all__ = ["BEFORE_VERB_SUBJECT", "BEFORE_PRONOUN_ANTECEDENT", "COPY_SOURCE", "RARE_SOURCE", "split_relation"]

BEFORE_VERB_SUBJECT = "before verb->subject"
BEFORE_PRONOUN_ANTECEDENT = "before pronoun->antecedent"
COPY_SOURCE = "copy->source"
RARE_SOURCE = "rare->earlier occurrence"


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
