"""The synthetic language as a corpus for headlab's atlas (:class:`headlab.analysis.atlas.Corpus`).

headlab's atlas knows English and random tokens; a model of the synthetic language gets its
texts, its token frequencies (``rare_token``) and its relations from the language itself:

    >>> corpus = corpus_for(hm)            # None for a model that does not read the language
    >>> atlas = compute_atlas(hm, corpus=corpus, relations=True)

:func:`synthetic_language` tells which ``Language`` a model reads: the description stored in
a trained organism's provenance, else (``seed_vocab`` 0) a tokenizer holding every word of
``Language()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headlab.analysis.detect import RelationSet
from deviating.data.language.document import pack
from deviating.data.language.grammar import Language
from deviating.data.language.relations import synthetic_relation_set, synthetic_token_frequency

__all__ = ["SyntheticCorpus", "synthetic_language", "corpus_for", "ATLAS_DOCUMENTS", "RELATION_DOCUMENTS"]

ATLAS_DOCUMENTS = 40  # documents sampled for the atlas's default windows
RELATION_DOCUMENTS = 200  # documents sampled for the relation set


def _language_description(obj) -> dict | None:
    """The first ``Language.describe()`` dict (it has a ``language_version``) nested in ``obj``."""
    if isinstance(obj, dict):
        if "language_version" in obj and "seed_vocab" in obj:
            return obj
        obj = list(obj.values())
    if isinstance(obj, list):
        for value in obj:
            found = _language_description(value)
            if found is not None:
                return found
    return None


def synthetic_language(hm) -> Language | None:
    """The synthetic ``Language`` the model reads, or None: from the language description in
    its provenance (trained organisms), else by vocabulary (a tokenizer that holds every word of
    ``Language()``, seed_vocab 0)."""
    description = _language_description(getattr(hm, "provenance", None))
    if description is not None:
        return Language.from_description(description)
    if hm.tokenizer is None:
        return None
    lang = Language()
    return lang if set(lang.vocab) <= set(hm.tokenizer.get_vocab()) else None


@dataclass(frozen=True)
class SyntheticCorpus:
    """One ``Language`` as a :class:`headlab.analysis.atlas.Corpus`.

    Texts: up to 64 windows of ``min(64, the model's maximum length)`` tokens packed from
    ``lang.sample(ATLAS_DOCUMENTS, seed=seed)``; relations: :func:`synthetic_relation_set` of the
    windows of ``lang.sample(RELATION_DOCUMENTS, seed=seed)``; frequencies:
    :func:`synthetic_token_frequency`.
    """

    lang: Language

    def __post_init__(self) -> None:
        if not isinstance(self.lang, Language):
            raise TypeError(f"SyntheticCorpus takes a deviating.data.language.Language, got {type(self.lang).__name__}")

    def _windows(self, hm, n_docs: int, seed: int) -> list:
        return pack(self.lang.sample(n_docs, seed=seed), n_ctx=min(64, hm.max_positions or 64), drop_last=True)

    def texts(self, hm, seed: int) -> tuple[list[str], str]:
        windows = self._windows(hm, ATLAS_DOCUMENTS, seed)[:64]
        n_ctx = min(64, hm.max_positions or 64)
        return [w.text for w in windows], (f"{len(windows)} windows of {n_ctx} tokens of the synthetic "
                                           f"language (Language.sample({ATLAS_DOCUMENTS}, seed={seed}), packed)")

    def token_frequency(self, tokenizer) -> torch.Tensor:
        return synthetic_token_frequency(self.lang, tokenizer)

    def relation_set(self, hm, seed: int) -> RelationSet:
        return synthetic_relation_set(self._windows(hm, RELATION_DOCUMENTS, seed), hm.tokenizer)


def corpus_for(hm) -> SyntheticCorpus | None:
    """The :class:`SyntheticCorpus` of the language ``hm`` reads, or None (:func:`synthetic_language`)."""
    lang = synthetic_language(hm)
    return None if lang is None else SyntheticCorpus(lang)
