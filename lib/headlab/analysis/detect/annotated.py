"""Relation sets from annotated text, and every head's relation accuracy on them.

A :class:`RelationSet` is token ids with gold relations; any annotated corpus can build one.
:func:`english_relation_set` builds one from the hand-annotated English set
(:mod:`headlab.english`): the query is the verb's (pronoun's, subject's) **first sub-token**,
**every sub-token** of the target word is a target, and the coreference baseline is the
*nearest preceding mention* (the set has no part-of-speech tags).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.english import load_english
from headlab.analysis.detect.relations import (
    PRONOUN_ANTECEDENT, SUBJECT_VERB, VERB_SUBJECT, OffsetBaseline, nearest_preceding, offset_baseline,
    prediction_accuracy, relation_hits, visible_targets,
)

# Third-person (and other personal) pronouns: never a "mention" for the English baseline.
_PRONOUNS = frozenset("i me my you your he him his she her hers it its we us our they them their theirs "
                      "who whom that which".split())


@dataclass
class RelationSet:
    """Token ids and gold relations to score heads on.

    Attributes:
        input_ids, attention_mask: ``(batch, pos)``.
        relations: name -> gold matrix ``(batch, pos, pos)`` bool.
        baselines: name -> ``(baseline name, pointers (batch, pos))``: a fixed prediction per query.
        offsets: the offsets the fixed-offset baseline tries; None: every non-zero offset.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    relations: dict[str, torch.Tensor]
    baselines: dict[str, tuple[str, torch.Tensor]] = field(default_factory=dict)
    source: str = ""
    offsets: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def subset(self, indices) -> RelationSet:
        """The inputs at ``indices``."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        return RelationSet(self.input_ids[idx], self.attention_mask[idx],
                           {n: g[idx] for n, g in self.relations.items()},
                           {n: (label, p[idx]) for n, (label, p) in self.baselines.items()}, self.source,
                           self.offsets)


def english_relation_set(tok, items: Sequence | None = None) -> RelationSet:
    """Relations of the hand-annotated English set for a fast Hugging Face tokenizer.

    Each item is tokenized as ``tok(words, is_split_into_words=True)`` (special tokens
    included), so positions line up with :func:`headlab.english.align_words`.
    """
    if not getattr(tok, "is_fast", False):
        raise TypeError("english_relation_set needs a fast tokenizer (with word_ids())")
    items = load_english() if items is None else list(items)
    if not items:
        raise ValueError("no English items to build relations from")
    encodings = [tok(list(s.words), is_split_into_words=True) for s in items]
    pos = max(len(e["input_ids"]) for e in encodings)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch = len(items)
    ids = torch.full((batch, pos), pad, dtype=torch.long)
    mask = torch.zeros(batch, pos, dtype=torch.long)
    gold = {name: torch.zeros(batch, pos, pos, dtype=torch.bool)
            for name in (VERB_SUBJECT, SUBJECT_VERB, PRONOUN_ANTECEDENT)}
    mentions = torch.zeros(batch, pos, dtype=torch.bool)
    for b, (item, enc) in enumerate(zip(items, encodings)):
        n = len(enc["input_ids"])
        ids[b, :n] = torch.tensor(enc["input_ids"])
        mask[b, :n] = 1
        spans: dict[int, list[int]] = {}
        for p, w in enumerate(enc.word_ids()):
            if w is not None:
                spans.setdefault(w, []).append(p)
        missing = [i for i in range(len(item.words)) if i not in spans]
        if missing:
            raise ValueError(f"{item.text!r}: words {missing} produced no token (cut by the maximum length?)")
        for verb, subj in item.verbs:
            gold[VERB_SUBJECT][b, spans[verb][0], spans[subj]] = True
            gold[SUBJECT_VERB][b, spans[subj][0], spans[verb]] = True
            if item.words[subj].lower() not in _PRONOUNS:
                mentions[b, spans[subj][0]] = True
        for pron, ante in item.pronouns:
            gold[PRONOUN_ANTECEDENT][b, spans[pron][0], spans[ante]] = True
            mentions[b, spans[ante][0]] = True
    baselines = {PRONOUN_ANTECEDENT: ("nearest preceding mention", nearest_preceding(mentions))}
    return RelationSet(ids, mask, gold, baselines, source="hand-annotated English set (headlab/english/english.jsonl)")


@dataclass
class RelationResult:
    """Every head's pooled accuracy on one relation, beside its baselines.

    ``accuracy``: ``(n_layers, n_heads)``; ``offset``: the best fixed offset on the same
    items; ``baseline``: ``(name, accuracy)`` of the relation's named baseline, if any.
    """

    name: str
    n_items: int
    accuracy: torch.Tensor
    offset: OffsetBaseline
    baseline: tuple[str, float] | None = None

    @property
    def best_head(self) -> tuple[int, int]:
        flat = int(self.accuracy.flatten().argmax())
        return divmod(flat, self.accuracy.shape[1])

    def to_dict(self) -> dict:
        layer, head = self.best_head
        out = {"relation": self.name, "n_items": self.n_items,
               "best_head": [layer, head], "best_accuracy": round(float(self.accuracy[layer, head]), 4),
               "best_offset": self.offset.offset, "offset_accuracy": round(self.offset.accuracy, 4),
               "accuracy": [[round(float(x), 4) for x in row] for row in self.accuracy]}
        if self.baseline is not None:
            out["baseline"] = {"name": self.baseline[0], "accuracy": round(self.baseline[1], 4)}
        return out


def relation_scores(hm, relation_set: RelationSet, batch_size: int = 64,
                    ignore_special: bool = False) -> dict[str, RelationResult]:
    """Run ``hm`` over ``relation_set`` and score every head on every relation.

    For a causal model, targets after their query are dropped (a relation left with no item
    is omitted). ``ignore_special``: leave special tokens out of each head's argmax
    (:func:`~headlab.analysis.detect.relation_hits`); baselines are unchanged.
    """
    n = len(relation_set)
    ignore = None
    if ignore_special:
        if hm.tokenizer is None:
            raise ValueError(f"ignore_special needs a tokenizer to know the special tokens; {hm.name} has none")
        special = torch.tensor(sorted(set(hm.tokenizer.all_special_ids)), dtype=torch.long)
        ignore = torch.isin(relation_set.input_ids, special)
    gold = {name: visible_targets(g, hm.causal) for name, g in relation_set.relations.items()}
    hits = {name: torch.zeros(hm.n_layers, hm.n_heads, dtype=torch.long) for name in gold}
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        batch = {"input_ids": relation_set.input_ids[start:stop],
                 "attention_mask": relation_set.attention_mask[start:stop]}
        _, cache = hm.run_with_cache(batch, names=("pattern",))
        mask = cache.attention_mask.cpu()
        for layer in range(hm.n_layers):
            pattern = cache.pattern(layer).float().cpu()  # (batch, head, q_pos, k_pos)
            for name, g in gold.items():
                h, _ = relation_hits(pattern, g[start:stop], mask,
                                     None if ignore is None else ignore[start:stop])
                hits[name][layer] += h.sum(0)
    results = {}
    mask = relation_set.attention_mask
    for name, g in gold.items():
        items = int((g & mask.bool()[:, :, None] & mask.bool()[:, None, :]).any(-1).sum())
        if items == 0:
            continue
        baseline = None
        if name in relation_set.baselines:
            label, predicted = relation_set.baselines[name]
            baseline = (label, prediction_accuracy(g, predicted, mask))
        results[name] = RelationResult(name, items, hits[name].to(torch.float64) / items,
                                       offset_baseline(g, mask, relation_set.offsets), baseline)
    return results


def held_out_relation_scores(hm, relation_set: RelationSet, batch_size: int = 64,
                             ignore_special: bool = False) -> dict[str, dict]:
    """The best head of each relation, chosen on half the inputs and scored on the other half.

    Chosen on the even-numbered inputs, reported on the odd ones beside the best fixed offset
    and the named baseline on those same inputs.
    """
    if len(relation_set) < 2:
        raise ValueError("a held-out comparison needs at least two inputs")
    choose = relation_scores(hm, relation_set.subset(range(0, len(relation_set), 2)), batch_size, ignore_special)
    test = relation_scores(hm, relation_set.subset(range(1, len(relation_set), 2)), batch_size, ignore_special)
    out = {}
    for name in choose.keys() & test.keys():
        layer, head = choose[name].best_head
        t = test[name]
        out[name] = {"head": [layer, head], "choice_accuracy": round(float(choose[name].accuracy[layer, head]), 4),
                     "accuracy": round(float(t.accuracy[layer, head]), 4), "n_items": t.n_items,
                     "best_offset": t.offset.offset, "offset_accuracy": round(t.offset.accuracy, 4)}
        if t.baseline is not None:
            out[name]["baseline"] = {"name": t.baseline[0], "accuracy": round(t.baseline[1], 4)}
    return out
