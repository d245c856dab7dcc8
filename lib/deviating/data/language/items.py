"""Evaluation items: next-token tests of one phenomenon each, read off the annotations.

Every item names a document (its index in the list given) and a position ``pos``: the
model, reading tokens ``0..pos``, predicts token ``pos + 1``. Pass the packed windows
(`pack`) to get positions that index the tokenizer's ids for those windows directly; an item
is only made when the evidence it needs (subject, antecedent, earlier copy) is inside
the same window.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from deviating.data.language.document import Document
from deviating.data.language.grammar import Language
from deviating.data.language.lexicon import COPULA, OBJECT_PRONOUNS, SUBJECT_PRONOUNS, build_lexicon


@dataclass(frozen=True)
class AgreementItem:
    """Predict an agreeing verb: compare ``logit(correct)`` with ``logit(wrong)`` at `pos`.

    `verb_pos = pos + 1`; `correct` is the verb form in the text, `wrong` the same verb in
    the other number (sleeps/sleep, is/are, was/were). `distance = verb_pos - subject_pos`.
    `attractor`: a noun of the other number lies strictly between subject and verb.
    `role`: "main" for the main verb of its sentence, "relative" for a relative-clause verb.
    `in_copy`: the verb is inside a repeated sentence (so copying alone can predict it).
    """

    doc: int
    pos: int
    verb_pos: int
    subject_pos: int
    correct: str
    wrong: str
    number: str
    construction: str
    distance: int
    attractor: bool
    role: str
    in_copy: bool


@dataclass(frozen=True)
class PronounItem:
    """Predict a pronoun's form: `correct` against `alternatives` (the other forms of its case).

    `distance = pronoun_pos - antecedent_pos`. `nearest_noun_pos`: the closest noun before
    the pronoun. `distractor`: some noun strictly between antecedent and pronoun would
    call for a different pronoun form (other number, or other gender).
    """

    doc: int
    pos: int
    pronoun_pos: int
    antecedent_pos: int
    correct: str
    alternatives: tuple[str, ...]
    case: str
    construction: str
    distance: int
    nearest_noun_pos: int
    distractor: bool


@dataclass(frozen=True)
class CopyItem:
    """Predict the next token of a repeated sentence by copying.

    At `pos` (inside the repeat, and so is ``pos + 1``), the target ``tokens[pos + 1]`` equals
    ``tokens[source_pos]``, the token after the earlier occurrence of ``tokens[pos]``.
    `offset` counts how many tokens of the repeat have been read (1 = only its first).
    """

    doc: int
    pos: int
    target: str
    source_pos: int
    offset: int
    target_is_rare: bool


@dataclass(frozen=True)
class RareItem:
    """Predict a rare word that already occurred earlier in the same window.

    `target = tokens[pos + 1]` is rare (`Language.is_rare`); `source_pos` is its latest
    earlier occurrence. `in_copy`: the target is inside a repeated sentence (fully
    predictable by copying); otherwise the repeat is the document's cast recurring.
    """

    doc: int
    pos: int
    target: str
    source_pos: int
    frequency: float
    in_copy: bool


@lru_cache(maxsize=1)
def _other_number() -> dict[str, str]:
    """Verb form -> the same verb in the other number (forms do not depend on seed_vocab)."""
    swap = {COPULA["sg"]: COPULA["pl"], COPULA["pl"]: COPULA["sg"],
            COPULA["past_sg"]: COPULA["past_pl"], COPULA["past_pl"]: COPULA["past_sg"]}
    lex = build_lexicon(0)
    for cls in ("intrans", "trans"):
        for lem in lex.classes[cls]:
            swap[lem.forms["sg"]] = lem.forms["pl"]
            swap[lem.forms["pl"]] = lem.forms["sg"]
    return swap


def _pronoun_key(number: str | None, gender: str | None):
    return "pl" if number == "pl" else ("sg", gender)


def agreement_items(docs: Sequence[Document]) -> list[AgreementItem]:
    """One item per agreeing (present-tense) verb whose subject is in the same document and
    that is not the first token (there must be a position to predict it from)."""
    swap = _other_number()
    items = []
    for d_i, d in enumerate(docs):
        for v, tok in enumerate(d.tokens):
            s = d.subject[v]
            if d.pos_tag[v] != "VERB" or d.number[v] is None or s < 0 or v == 0:
                continue
            attractor = any(d.pos_tag[k] == "NOUN" and d.number[k] != d.number[s] for k in range(s + 1, v))
            items.append(AgreementItem(
                doc=d_i, pos=v - 1, verb_pos=v, subject_pos=s, correct=tok, wrong=swap[tok],
                number=d.number[v], construction=d.construction[v], distance=v - s,
                attractor=attractor, role="relative" if d.clause[v] == "rel" else "main", in_copy=d.copy_source[v] >= 0))
    return items


def pronoun_items(docs: Sequence[Document]) -> list[PronounItem]:
    """One item per pronoun whose antecedent is in the same document."""
    items = []
    for d_i, d in enumerate(docs):
        for p, tok in enumerate(d.tokens):
            a = d.antecedent[p]
            if d.pos_tag[p] != "PRON" or a < 0 or p == 0:
                continue
            # Pronouns occur only as the subject of "pron_subj" and the object of "pron_obj".
            case = "subj" if d.construction[p] == "pron_subj" else "obj"
            table = SUBJECT_PRONOUNS if case == "subj" else OBJECT_PRONOUNS
            key = _pronoun_key(d.number[a], d.gender[a])
            nearest = max(k for k in range(p) if d.pos_tag[k] == "NOUN")
            distractor = any(d.pos_tag[k] == "NOUN" and _pronoun_key(d.number[k], d.gender[k]) != key
                             for k in range(a + 1, p))
            items.append(PronounItem(
                doc=d_i, pos=p - 1, pronoun_pos=p, antecedent_pos=a, correct=tok,
                alternatives=tuple(w for w in dict.fromkeys(table.values()) if w != tok), case=case,
                construction=d.construction[p], distance=p - a, nearest_noun_pos=nearest,
                distractor=distractor))
    return items


def copy_items(docs: Sequence[Document], lang: Language | None = None) -> list[CopyItem]:
    """One item per position `pos` where tokens ``pos`` and ``pos + 1`` are consecutive tokens
    of a repeated sentence whose earlier occurrence is in the same document. `lang` (a
    `Language`) is needed only to fill `target_is_rare`; without it the field is False."""
    if lang is not None and not isinstance(lang, Language):
        raise TypeError(f"lang must be a Language or None, got {type(lang).__name__}")
    items = []
    for d_i, d in enumerate(docs):
        cs = d.copy_source
        for p in range(len(d) - 1):
            if cs[p] < 0 or cs[p + 1] != cs[p] + 1:
                continue
            offset = 1
            while p - offset >= 0 and cs[p - offset] >= 0 and cs[p - offset] == cs[p] - offset:
                offset += 1
            target = d.tokens[p + 1]
            items.append(CopyItem(doc=d_i, pos=p, target=target, source_pos=cs[p + 1], offset=offset,
                                  target_is_rare=bool(lang is not None and lang.is_rare(target))))
    return items


def rare_items(docs: Sequence[Document], lang: Language) -> list[RareItem]:
    """One item per occurrence of a rare word (`lang.is_rare`) that also occurred earlier in
    the same document (window)."""
    if not isinstance(lang, Language):
        raise TypeError(f"rare_items needs the Language the documents came from, got {type(lang).__name__}")
    items = []
    for d_i, d in enumerate(docs):
        last_seen: dict[str, int] = {}
        for i, tok in enumerate(d.tokens):
            if i > 0 and tok in last_seen and lang.is_rare(tok):
                items.append(RareItem(doc=d_i, pos=i - 1, target=tok, source_pos=last_seen[tok],
                                      frequency=lang.frequency(tok), in_copy=d.copy_source[i] >= 0))
            if d.pos_tag[i] != "SPECIAL":
                last_seen[tok] = i
    return items
