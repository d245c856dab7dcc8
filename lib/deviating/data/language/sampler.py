"""Sampling one document of the synthetic language: the grammar of :mod:`deviating.data.language`,
step by step (:class:`DocumentSampler`), writing tokens and annotations as it goes
(:class:`DocumentBuilder`). :meth:`deviating.data.language.grammar.Language.sample` drives it."""

from __future__ import annotations

import bisect
import random
from dataclasses import fields

from deviating.data.language.document import Document
from deviating.data.language.config import CONSTRUCTIONS, PRONOUN_CONSTRUCTIONS
from deviating.data.language.lexicon import (
    ADVERBS, COPULA, DETERMINERS, FRONT_PREPOSITIONS, NOUN_PREPOSITIONS, OBJECT_PRONOUNS,
    RELATIVE, SUBJECT_PRONOUNS, Lemma,
)

__all__ = ["DocumentBuilder", "DocumentSampler"]


class DocumentBuilder:
    """Accumulates one document's tokens and annotations."""

    def __init__(self, doc_id: int) -> None:
        self.doc_id = doc_id
        self.cols: dict[str, list] = {f.name: [] for f in fields(Document)}
        self.sentence = -1
        self.construction: str | None = None
        self.clause = "main"

    def __len__(self) -> int:
        return len(self.cols["tokens"])

    def emit(self, token: str, pos: str, number: str | None = None, gender: str | None = None,
             subject: int = -1, antecedent: int = -1, copy_source: int = -1,
             clause: str | None = None) -> int:
        c = self.cols
        c["tokens"].append(token)
        c["pos_tag"].append(pos)
        c["number"].append(number)
        c["gender"].append(gender)
        c["subject"].append(subject)
        c["antecedent"].append(antecedent)
        c["copy_source"].append(copy_source)
        c["is_punct"].append(pos == "PUNCT")
        c["is_sentence_end"].append(token == ".")
        c["construction"].append(self.construction)
        c["clause"].append(clause or self.clause)
        c["sentence"].append(self.sentence)
        c["doc_id"].append(self.doc_id)
        return len(c["tokens"]) - 1

    def document(self) -> Document:
        return Document(**self.cols)


class DocumentSampler:
    """Generates one document (the grammar of `deviating.data.language`, step by step).

    ``lang`` is the :class:`~deviating.data.language.grammar.Language` that drives it (this
    module sits below the grammar and reads only its ``config``, ``lexicon``, ``cumulative``
    and construction weights).
    """

    def __init__(self, lang, rng: random.Random, doc_id: int) -> None:
        self.lang, self.cfg, self.rng = lang, lang.config, rng
        self.b = DocumentBuilder(doc_id)
        self.cast = [self._zipf("noun") for _ in range(self.cfg.cast_size)]

    # -- small draws
    def _zipf(self, cls: str) -> Lemma:
        cum = self.lang.cumulative[cls]
        i = bisect.bisect_right(cum, self.rng.random() * cum[-1])
        return self.lang.lexicon.classes[cls][min(i, len(cum) - 1)]

    def _number(self) -> str:
        return "pl" if self.rng.random() < self.cfg.p_plural else "sg"

    def _mismatched(self, number: str) -> str:
        """The other number with probability p_mismatch, else the same one."""
        if self.rng.random() < self.cfg.p_mismatch:
            return "sg" if number == "pl" else "pl"
        return number

    def _noun(self) -> Lemma:
        if self.rng.random() < self.cfg.p_cast:
            return self.rng.choice(self.cast)
        return self._zipf("noun")

    # -- phrases
    def np(self, number: str) -> int:
        """DET ADJ{0,1,2} NOUN; returns the index of the noun."""
        cfg, rng = self.cfg, self.rng
        r = rng.random()
        n_adj = 2 if r < cfg.p_two_adj else 1 if r < cfg.p_two_adj + cfg.p_one_adj else 0
        adjs: list[str] = []
        while len(adjs) < n_adj:
            a = self._zipf("adj").forms["base"]
            if a not in adjs:
                adjs.append(a)
        noun = self._noun()
        r = rng.random()
        if r < cfg.p_det_the:
            det = "the"
        elif r < cfg.p_det_the + cfg.p_det_indefinite:
            det = "some" if number == "pl" else ("an" if (adjs or [noun.forms["sg"]])[0][0] in "aeiou" else "a")
        else:
            det = "these" if number == "pl" else "this"
        self.b.emit(det, "DET", number=DETERMINERS[det])
        for a in adjs:
            self.b.emit(a, "ADJ")
        return self.b.emit(noun.forms[number], "NOUN", number=number, gender=noun.gender)

    def verb(self, cls: str, subject: int, number: str, present: bool = True) -> int:
        lem = self._zipf(cls)
        form = lem.forms[number] if present else lem.forms["past"]
        return self.b.emit(form, "VERB", number=number if present else None, subject=subject)

    def copula(self, subject: int, number: str, present: bool = True) -> int:
        form = COPULA[number] if present else COPULA["past_" + number]
        return self.b.emit(form, "VERB", number=number, subject=subject)

    def object_np(self) -> None:
        self.np(self._number())
        if self.rng.random() < self.cfg.p_obj_pp:
            self.b.emit(self.rng.choice(NOUN_PREPOSITIONS), "PREP")
            self.np(self._number())

    def vp(self, subject: int, number: str, present: bool = True) -> None:
        """V_intr | V_tr NP_obj | COP ADJ, agreeing with `subject` when present."""
        r = self.rng.random()
        if r < self.cfg.p_vp_intrans:
            self.verb("intrans", subject, number, present)
        elif r < self.cfg.p_vp_intrans + self.cfg.p_vp_trans:
            self.verb("trans", subject, number, present)
            self.object_np()
        else:
            self.copula(subject, number, present)
            self.b.emit(self._zipf("adj").forms["base"], "ADJ")

    def front(self) -> None:
        self.b.clause = "front"
        if self.rng.random() < self.cfg.p_front_adverb:
            self.b.emit(self.rng.choice(ADVERBS), "ADV")
        else:
            self.b.emit(self.rng.choice(FRONT_PREPOSITIONS), "PREP")
            self.np(self._number())
        self.b.emit(",", "PUNCT")
        self.b.clause = "main"

    def pronoun(self, referent: int, case: str) -> int:
        number, gender = self.b.cols["number"][referent], self.b.cols["gender"][referent]
        table = SUBJECT_PRONOUNS if case == "subj" else OBJECT_PRONOUNS
        word = table["pl"] if number == "pl" else table[("sg", gender)]
        return self.b.emit(word, "PRON", number=number, gender=None if number == "pl" else gender,
                           antecedent=referent)

    # -- sentences
    def sentence(self, construction: str, referent: int) -> int:
        """One fresh sentence; returns the index of its main subject (noun or pronoun)."""
        rng, cfg = self.rng, self.cfg
        if rng.random() < cfg.p_front:
            self.front()
        if construction == "pron_subj":
            number = self.b.cols["number"][referent]
            subj = self.pronoun(referent, "subj")
            self.vp(subj, number)
        elif construction == "pron_obj":
            number = self._mismatched(self.b.cols["number"][referent])
            subj = self.np(number)
            self.verb("trans", subj, number)
            self.pronoun(referent, "obj")
        else:
            number = self._number()
            subj = self.np(number)
            if construction == "pp":
                self.b.emit(rng.choice(NOUN_PREPOSITIONS), "PREP")
                self.np(self._mismatched(number))
            elif construction == "subj_rel":
                self.b.clause = "rel"
                self.b.emit(RELATIVE, "REL")
                present = rng.random() < cfg.p_rel_present
                if rng.random() < cfg.p_subj_rel_transitive:
                    self.verb("trans", subj, number, present)
                    self.np(self._mismatched(number))
                elif rng.random() < 0.5:
                    self.verb("intrans", subj, number, present)
                else:
                    self.copula(subj, number, present)
                    self.b.emit(self._zipf("adj").forms["base"], "ADJ")
            elif construction == "obj_rel":
                self.b.clause = "rel"
                self.b.emit(RELATIVE, "REL")
                inner_number = self._mismatched(number)
                inner = self.np(inner_number)
                self.verb("trans", inner, inner_number, rng.random() < cfg.p_rel_present)
            self.b.clause = "main"
            self.vp(subj, number)
        self.b.emit(".", "PUNCT")
        return subj

    def copy(self, start: int, stop: int) -> None:
        """Repeat tokens ``start:stop`` verbatim, annotations shifted, copy_source set."""
        c, shift = self.b.cols, len(self.b) - start
        for j in range(start, stop):
            self.b.emit(c["tokens"][j], c["pos_tag"][j], number=c["number"][j], gender=c["gender"][j],
                        subject=c["subject"][j] + shift if c["subject"][j] >= 0 else -1,
                        copy_source=j, clause=c["clause"][j])

    def run(self) -> Document:
        rng, cfg, b = self.rng, self.cfg, self.b
        n_sentences = rng.randint(cfg.min_sentences, cfg.max_sentences)
        copyable: list[tuple[int, int, int, str]] = []  # (start, stop, subject, construction)
        referent = -1  # the noun a pronoun in the next sentence refers to
        for k in range(n_sentences):
            b.sentence = k
            start = len(b)
            if k > 0 and rng.random() < cfg.p_copy:
                src_start, src_stop, src_subj, b.construction = rng.choice(copyable)
                self.copy(src_start, src_stop)
                subj = src_subj + (start - src_start)
            else:
                weights = self.lang.first_sentence_weights if k == 0 else self.lang.construction_weights
                b.construction = rng.choices(CONSTRUCTIONS, weights=weights)[0]
                subj = self.sentence(b.construction, referent)
                if b.construction not in PRONOUN_CONSTRUCTIONS:
                    copyable.append((start, len(b), subj, b.construction))
            # The next sentence's pronouns refer to this sentence's subject (through a pronoun
            # subject, to that pronoun's antecedent).
            referent = b.cols["antecedent"][subj] if b.cols["pos_tag"][subj] == "PRON" else subj
        return b.document()
