"""Held-out Brown Corpus text with its grammar marked: the tag-grounded relations as a
:class:`~headlab.analysis.detect.RelationSet`, for the book's relation-head definition
(:mod:`headlab.roles.syntactic`).

Each input is a passage of one text of the **test** split (:func:`deviating.data.brown.split`):
whole sentences, in order, up to ``n_ctx`` tokens, after the ``<|endoftext|>`` the models
read first. A relation pair of :func:`deviating.data.brown_tags.relations` (query word, key
word) marks, at the query word's **last** token (a causal model has read the whole word
there), every token of the key word as a target. The named baseline is the *nearest
candidate*: the first token of the nearest earlier word of the key's class (the nearest
determiner for ``noun->determiner``, and so on). The fixed-offset baseline is the
relation-head definition's own.

:func:`file_split` splits the passages by text file, so that the head chosen on one half is
measured on texts it was not chosen on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from deviating.data import brown
from deviating.data.brown_tags import RELATIONS, relations, token_tags, word_class
from headlab.analysis.detect import RelationSet
from headlab.analysis.detect.relations import nearest_preceding
from headlab.stats import Split, split_items

__all__ = ["KEY_CLASS", "BrownRelations", "brown_relation_set", "file_split"]

# the class of each relation's key word: the nearest earlier word of it is the named baseline
KEY_CLASS = {"noun->determiner": "determiner", "noun->adjective": "adjective",
             "object->preposition": "preposition", "verb->auxiliary": "auxiliary"}


@dataclass(frozen=True)
class BrownRelations:
    """The relation set and, per input, the text file it comes from."""

    relation_set: RelationSet
    file_ids: tuple[str, ...]
    n_pairs: dict[str, int]  # relation -> annotated pairs whose query fits in its passage


def _passages(texts: list[brown.Text], tok, n_ctx: int, max_inputs: int):
    """``(file id, words, tags)`` of passages of whole sentences of at most ``n_ctx`` tokens."""
    out = []
    for text in texts:
        words: list[str] = []
        tags: list[str] = []
        for sentence in text.sentences:
            w = [x for x, _ in sentence]
            t = [y for _, y in sentence]
            if words and len(tok(brown.detokenize(words + w)[0])["input_ids"]) > n_ctx:
                out.append((text.file_id, words, tags))
                words, tags = [], []
            if len(tok(brown.detokenize(w)[0])["input_ids"]) <= n_ctx:
                words, tags = words + w, tags + t
        if words:
            out.append((text.file_id, words, tags))
    # every file contributes, in turn, until max_inputs: no genre is crowded out
    by_file: dict[str, list] = {}
    for p in out:
        by_file.setdefault(p[0], []).append(p)
    picked, round_ = [], 0
    while len(picked) < max_inputs and any(len(v) > round_ for v in by_file.values()):
        picked += [v[round_] for v in by_file.values() if len(v) > round_][:max_inputs - len(picked)]
        round_ += 1
    return picked


def brown_relation_set(tokenizer, texts: list[brown.Text] | None = None, *, n_ctx: int = 128,
                       max_inputs: int = 256) -> BrownRelations:
    """The relations of :data:`~deviating.data.brown_tags.RELATIONS` on passages of ``texts``
    (default: the test split of the cached corpus) as a ``RelationSet`` for ``tokenizer`` (a
    Brown model's: it must put ``<|endoftext|>`` first and give character offsets)."""
    if texts is None:
        texts = brown.split(brown.load())["test"]
    if not texts:
        raise ValueError("no texts to build relations from")
    if n_ctx < 8:
        raise ValueError(f"n_ctx must be at least 8 tokens, got {n_ctx}")
    passages = _passages(list(texts), tokenizer, n_ctx, max_inputs)
    if not passages:
        raise ValueError(f"no sentence of the texts fits in n_ctx = {n_ctx} tokens")
    encodings = []
    for _, words, _ in passages:
        text, spans = brown.detokenize(words)
        enc = tokenizer(text, return_offsets_mapping=True)
        encodings.append((enc["input_ids"], token_tags(enc["offset_mapping"], spans)))
    batch, pos = len(passages), max(len(ids) for ids, _ in encodings)
    pad = tokenizer.pad_token_id or 0
    ids_t = torch.full((batch, pos), pad, dtype=torch.long)
    mask = torch.zeros(batch, pos, dtype=torch.long)
    gold = {r: torch.zeros(batch, pos, pos, dtype=torch.bool) for r in RELATIONS}
    candidates = {r: torch.zeros(batch, pos, dtype=torch.bool) for r in RELATIONS}
    n_pairs = dict.fromkeys(RELATIONS, 0)
    for b, ((_, words, tags), (ids, word_of)) in enumerate(zip(passages, encodings)):
        ids_t[b, :len(ids)] = torch.tensor(ids)
        mask[b, :len(ids)] = 1
        tokens_of: dict[int, list[int]] = {}
        for p, w in enumerate(word_of):
            if w >= 0:
                tokens_of.setdefault(w, []).append(p)
        for w, where in tokens_of.items():
            for r, cls in KEY_CLASS.items():
                if word_class(tags[w]) == cls:
                    candidates[r][b, where[0]] = True
        for r, pairs in relations(tags).items():
            for query, key in pairs:
                if query in tokens_of and key in tokens_of:
                    gold[r][b, tokens_of[query][-1], tokens_of[key]] = True
                    n_pairs[r] += 1
    baselines = {r: ("nearest " + KEY_CLASS[r], nearest_preceding(candidates[r])) for r in RELATIONS}
    source = f"Brown Corpus, {len({p[0] for p in passages})} test-split texts, passages of at most {n_ctx} tokens"
    return BrownRelations(RelationSet(ids_t, mask, gold, baselines, source=source),
                          tuple(p[0] for p in passages), n_pairs)


def file_split(file_ids, seed: int = 0) -> Split:
    """A selection half and a measurement half of the inputs, by text file: no file on both sides."""
    files = sorted(set(file_ids))
    by_file = split_items(files, seed=seed)
    chosen = {files[i] for i in by_file.select}
    select = np.array([i for i, f in enumerate(file_ids) if f in chosen])
    measure = np.array([i for i, f in enumerate(file_ids) if f not in chosen])
    return Split(select, measure, seed)
