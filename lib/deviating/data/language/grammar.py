"""The generator: `LanguageConfig`, `Language` (sampling, vocabulary, word frequencies).

The grammar itself, with every probability, is written out in the docstring of
`deviating.data.language`; the names there are the fields of `LanguageConfig`.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, fields
from functools import cached_property
from typing import Any

from deviating.data.language.config import CONSTRUCTIONS, PRONOUN_CONSTRUCTIONS, LanguageConfig
from deviating.data.language.document import Document
from deviating.data.language.lexicon import (
    ADVERBS, COPULA, DETERMINERS, FRONT_PREPOSITIONS, NOUN_PREPOSITIONS, OBJECT_PRONOUNS,
    OPEN_CLASSES, PUNCTUATION, RELATIVE, SPECIAL_TOKENS, SUBJECT_PRONOUNS, Lemma, build_lexicon,
)
from deviating.data.language.sampler import DocumentSampler

__all__ = ["LANGUAGE_VERSION", "CONSTRUCTIONS", "PRONOUN_CONSTRUCTIONS", "LanguageConfig", "Language"]

# Bump whenever the output of `Language.sample` (or the vocabulary) changes for any seed.
LANGUAGE_VERSION = 1

# How many documents `Language.frequency` measures closed-class and slot rates on.
CALIBRATION_DOCS = 3000
CALIBRATION_SEED = 987_654_321


class Language:
    """The book's synthetic language: a probabilistic grammar with ground-truth annotations.

    ``Language(seed_vocab=0, **config)``: `seed_vocab` fixes the lexicon (which lemma has
    which Zipf rank, the gender of gender-open nouns); `config` overrides fields of
    `LanguageConfig`. Both are recorded by `describe()`.
    """

    def __init__(self, seed_vocab: int = 0, **config: Any) -> None:
        if not isinstance(seed_vocab, int):
            raise TypeError(f"seed_vocab must be an int, got {type(seed_vocab).__name__}")
        known = {f.name for f in fields(LanguageConfig)}
        unknown = sorted(set(config) - known)
        if unknown:
            raise TypeError(f"unknown Language option(s) {unknown}; valid options: {sorted(known)}")
        self.seed_vocab = seed_vocab
        self.config = LanguageConfig(**config)
        self.lexicon = build_lexicon(seed_vocab, self.config.zipf_alpha)
        # what the sampler draws from: cumulative Zipf weights per open class, and the
        # construction weights (a document's first sentence has no pronoun to resolve)
        self.cumulative = {cls: self.lexicon.cumulative(cls) for cls in OPEN_CLASSES}
        cfg = self.config
        self.construction_weights = [getattr(cfg, f"w_{c}") for c in CONSTRUCTIONS]
        self.first_sentence_weights = [0.0 if c in PRONOUN_CONSTRUCTIONS else w
                                       for c, w in zip(CONSTRUCTIONS, self.construction_weights)]
        if sum(self.construction_weights) <= 0:
            raise ValueError("all construction weights are zero")

    # ------------------------------------------------------------------ vocabulary

    @cached_property
    def vocab(self) -> list[str]:
        """Every token: special tokens (``<pad>`` first, id 0), closed-class words, then the
        open-class forms by class and Zipf rank."""
        closed = list(DETERMINERS) + list(dict.fromkeys([*SUBJECT_PRONOUNS.values(),
                                                          *OBJECT_PRONOUNS.values()]))
        closed += list(COPULA.values()) + [RELATIVE]
        closed += list(dict.fromkeys([*NOUN_PREPOSITIONS, *FRONT_PREPOSITIONS])) + list(ADVERBS)
        closed += list(PUNCTUATION)
        open_ = [w for cls in OPEN_CLASSES for lem in self.lexicon.classes[cls] for w in lem.forms.values()]
        return list(SPECIAL_TOKENS) + closed + open_

    def lemma(self, word: str) -> Lemma | None:
        """The open-class lemma a word form belongs to (None for closed-class words)."""
        entry = self.lexicon.form_of.get(word)
        return entry[0] if entry else None

    def rank(self, word: str) -> int | None:
        """Zipf rank (1 = most frequent) of the word's lemma within its class; None if closed-class."""
        lem = self.lemma(word)
        return lem.rank if lem else None

    def _require_word(self, word: str) -> None:
        if word not in self._vocab_set:
            raise ValueError(f"{word!r} is not a word of this language (vocabulary of {len(self.vocab)} tokens)")

    @cached_property
    def _vocab_set(self) -> frozenset[str]:
        return frozenset(self.vocab)

    # ------------------------------------------------------------------ frequencies

    @cached_property
    def _frequencies(self) -> dict[str, float]:
        """Expected unigram probability of every word (see `frequency`)."""
        docs = self.sample(CALIBRATION_DOCS, seed=CALIBRATION_SEED)
        n_tokens = sum(len(d) for d in docs)
        counts: Counter[str] = Counter()
        slots: Counter[tuple[str, str]] = Counter()  # (class, form name) -> number of tokens
        for d in docs:
            for w in d.tokens:
                entry = self.lexicon.form_of.get(w)
                if entry is None:
                    counts[w] += 1
                else:
                    slots[(entry[0].word_class, entry[1])] += 1
        freq = {w: 0.0 for w in self.vocab}
        for w, c in counts.items():
            freq[w] = c / n_tokens
        for cls in OPEN_CLASSES:
            for lem in self.lexicon.classes[cls]:
                for form_name, w in lem.forms.items():
                    freq[w] = slots[(cls, form_name)] / n_tokens * lem.prob
        return freq

    def frequency(self, word: str) -> float:
        """Expected unigram probability of `word` in generated text (tokens of documents,
        special tokens excluded).

        For an open-class form this is ``rate(class, form) * prob(lemma)``: the Zipf
        probability of its lemma (exact: every slot of a class draws its lemma from the
        class's Zipf distribution, directly or through the document's cast) times the
        share of tokens that are slots of that class and form (e.g. plural nouns),
        measured once on `CALIBRATION_DOCS` documents. A closed-class word's frequency is
        its share of tokens in the same sample. Both shares are accurate to about 1%.
        """
        self._require_word(word)
        return self._frequencies[word]

    def lemma_frequency(self, word: str) -> float:
        """The summed expected frequency of all forms of the word's lemma (the word itself if closed-class)."""
        lem = self.lemma(word)
        if lem is None:
            return self.frequency(word)
        return sum(self.frequency(w) for w in lem.forms.values())

    def is_rare(self, word: str) -> bool:
        """A word is rare when its expected frequency is below ``config.rare_threshold``
        (default 1e-4: fewer than one occurrence in 10,000 tokens). Only open-class forms
        can be rare; special tokens never are."""
        self._require_word(word)
        return word in self.lexicon.form_of and self.frequency(word) < self.config.rare_threshold

    # ------------------------------------------------------------------ description

    def describe(self) -> dict[str, Any]:
        """What a checkpoint records: version, seed_vocab, full config, vocabulary size."""
        return {"language_version": LANGUAGE_VERSION, "seed_vocab": self.seed_vocab,
                "config": asdict(self.config), "d_vocab": len(self.vocab)}

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> Language:
        """Rebuild the language a checkpoint was trained on; refuses another LANGUAGE_VERSION."""
        version = description.get("language_version")
        if version != LANGUAGE_VERSION:
            raise ValueError(f"the description is for language version {version!r}, but this code "
                             f"generates version {LANGUAGE_VERSION}; retrain, or check out the "
                             "headlab version that produced it")
        return cls(description["seed_vocab"], **description["config"])

    def __repr__(self) -> str:
        changed = {f.name: getattr(self.config, f.name) for f in fields(LanguageConfig)
                   if getattr(self.config, f.name) != f.default}
        extra = "".join(f", {k}={v!r}" for k, v in changed.items())
        return f"Language(seed_vocab={self.seed_vocab}{extra})"

    # ------------------------------------------------------------------ sampling

    def sample(self, n_docs: int, seed: int) -> list[Document]:
        """`n_docs` documents, a deterministic function of (`seed_vocab`, config, `seed`).

        Document ``i`` gets ``doc_id = i``. The documents are generated one after another
        from one random stream, so ``sample(n, s)`` is a prefix of ``sample(m, s)`` for m > n.
        """
        if not isinstance(n_docs, int) or n_docs < 0:
            raise ValueError(f"n_docs must be a non-negative integer, got {n_docs!r}")
        if not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        # the string is a frozen seed key (the module's name before 0.2): changing it changes every document
        rng = random.Random(f"headlab.language.sample:{self.seed_vocab}:{seed}")
        return [DocumentSampler(self, rng, i).run() for i in range(n_docs)]
