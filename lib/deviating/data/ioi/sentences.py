"""Indirect-object sentences and other sentences with names, each with its ground truth.

An *indirect-object prompt* (Wang et al. 2022) introduces two people and then has one of them
give something to the other; the prompt stops before the recipient::

    When Mary and John went to the store, John gave a ring to   -> " Mary"

The recipient is the *indirect object* (IO, Mary); the giver is the *subject* (S, John). The
subject appears twice: ``S1`` in the opening clause and ``S2`` as the giver. ``END`` is the last
token of the prompt, where the model must predict the IO. In order **ABBA** the IO is named first
(``Mary and John ... John``), in order **BABA** the subject is (``John and Mary ... John``).

:data:`IOI_TEMPLATES` are composed from parts: a lead-in (:data:`LEAD_INS`, e.g. "When ... ,"
or "Then, ... ."), what the pair did (:data:`ACTIVITIES`), the giving clause (:data:`GIVINGS`)
and an optional adjective before the object (:data:`ADJECTIVES`). So the distance from S2 to END,
and from IO to S2, changes from template to template, and no fixed offset finds a name. The last
parts of the first three lists (:data:`HELDOUT_PARTS`) are held out: the first
:data:`N_TRAIN_TEMPLATES` templates use training parts only, the rest held-out parts only, so a
held-out template shares no lead-in, activity or giving clause with any training template. Each
template has the slots ``{A}`` and ``{B}`` (the opening pair), ``{S}`` (the giver), ``{PLACE}``
and (most) ``{OBJECT}``, and ends with the word before the IO. :data:`OTHER_TEMPLATES` are the
other uses of names (``{A}`` and ``{B}`` distinct), so that a name after "to" is not always the IO.

*Brown frames* (:func:`brown_frame_sentence`) are indirect-object sentences of the same shape whose
words come from the Brown Corpus instead of the part lists: a past-tense verb and a noun in the
giving clause ("Kenneth led his mind to John."), a verb, a preposition and a noun in what the pair
did, a subordinating conjunction or a time phrase as the lead-in. Most are not sensible English;
they vary the frame around the names far more than the part lists can, so a model that trains on
them cannot tie the task to a frame's words. They never use a word of a held-out part
(:func:`heldout_words`), so a held-out template stays unseen.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

__all__ = ["LEAD_INS", "ACTIVITIES", "GIVINGS", "ADJECTIVES", "HELDOUT_PARTS", "IOI_TEMPLATES", "N_TRAIN_TEMPLATES",
           "TEMPLATE_PARTS",
           "OTHER_TEMPLATES", "PLACES", "OBJECTS", "ORDERS", "FRAME_DETERMINERS", "FRAME_TIME_WORDS", "FRAME_FUNCTION_WORDS",
           "IoiSentence", "ioi_sentence", "other_sentence", "passage", "heldout_words", "BrownFrameWords",
           "brown_frame_words", "brown_frame_sentence", "brown_frame_other_sentence"]

# The templates are composed from parts, so that no fixed token distance identifies S2 or the
# answer slot: a lead-in (words before the pair and the joint after its clause), what the pair did,
# and the giving clause (its object with or without an adjective). The last part of each list is
# held out: a held-out template is made of held-out parts only, a training template of training
# parts only, so every held-out template differs from every training one in all three places.
# Every lead-in puts a word before the first name: a name that opens the text is another token
# ("Mary", not " Mary"), and a model that copies it writes the wrong one (run 6 of the recipe).
LEAD_INS: tuple[tuple[str, str], ...] = (
    ("When ", ", "), ("After ", ", "), ("While ", ", "), ("Since ", ", "), ("Because ", ", "),
    ("Before ", ", "), ("Then, ", ". "), ("Yesterday ", ". "), ("In the morning ", ". "), ("Today ", ". "),
    ("That day ", ", and then "), ("At first ", ". Afterwards, "), ("Soon after ", ", "), ("Just as ", ", "),
    ("The day ", ", "), ("Last week ", ". "), ("In the evening ", ". "), ("In the end ", ". Then "),
    ("On Monday ", ". After that, "), ("Happily, ", ", and soon "), ("Earlier, ", ". "), ("Every time ", ", "),
    ("Whenever ", ", "), ("Right after ", ", "),
    # held out
    ("Once ", ", "), ("As ", ", "), ("On Sunday ", ". "), ("At noon ", ". Later, "),
)
ACTIVITIES: tuple[str, ...] = (
    "went to the {PLACE}", "were at the {PLACE}", "arrived at the {PLACE}", "were working at the {PLACE}",
    "had lunch at the {PLACE}", "met at the {PLACE}", "sat in the {PLACE}", "stayed at the {PLACE}",
    "came back from the {PLACE}", "talked at the {PLACE}", "got home from the {PLACE}", "drove to the {PLACE}",
    "ran to the {PLACE}", "ate at the {PLACE}", "shopped at the {PLACE}", "went into the {PLACE}",
    "were inside the {PLACE}", "stopped at the {PLACE}", "looked around the {PLACE}", "arrived back at the {PLACE}",
    "spent the day at the {PLACE}", "cleaned the {PLACE}",
    # held out
    "walked to the {PLACE}", "left the {PLACE}", "reached the {PLACE}", "waited at the {PLACE}",
)
GIVINGS: tuple[str, ...] = (
    "gave a {OBJECT} to", "gave the {OBJECT} to", "handed a {OBJECT} to", "sent a {OBJECT} to",
    "passed the {OBJECT} to", "sold a {OBJECT} to", "lent the {OBJECT} to", "returned the {OBJECT} to",
    "decided to give a {OBJECT} to", "mailed a {OBJECT} to", "wrote a letter to", "said to",
    "tossed the {OBJECT} to", "delivered a {OBJECT} to", "carried the {OBJECT} to", "presented a {OBJECT} to",
    "promised a {OBJECT} to", "sold the {OBJECT} to", "handed the {OBJECT} back to", "sent the {OBJECT} to",
    "told a story to", "explained the {OBJECT} to", "described the {OBJECT} to", "kicked the {OBJECT} to",
    # held out
    "offered a {OBJECT} to", "brought the {OBJECT} to", "showed a {OBJECT} to", "threw the {OBJECT} to",
)
ADJECTIVES: tuple[str, ...] = ("", "small ", "new ", "big ", "nice ")  # before the object, shared by both sides
HELDOUT_PARTS = {"LEAD_INS": 4, "ACTIVITIES": 4, "GIVINGS": 4}  # the last so many of each list


def _compose(lead_ins, activities, givings) -> list[tuple[str, tuple]]:
    out = []
    for (before, joint) in lead_ins:
        for act in activities:
            for give in givings:
                for adj in (ADJECTIVES if "{OBJECT}" in give else ("",)):
                    clause = give.replace("{OBJECT}", adj + "{OBJECT}")
                    out.append((f"{before}{{A}} and {{B}} {act}{joint}{{S}} {clause}", ((before, joint), act, give)))
    return out


def _parts(held: bool):
    lists = (LEAD_INS, ACTIVITIES, GIVINGS)
    counts = (HELDOUT_PARTS["LEAD_INS"], HELDOUT_PARTS["ACTIVITIES"], HELDOUT_PARTS["GIVINGS"])
    return [xs[len(xs) - k:] if held else xs[:len(xs) - k] for xs, k in zip(lists, counts)]


_TRAIN = _compose(*_parts(False))
_ALL = _TRAIN + _compose(*_parts(True))
IOI_TEMPLATES: tuple[str, ...] = tuple(text for text, _ in _ALL)
N_TRAIN_TEMPLATES = len(_TRAIN)  # the first N_TRAIN_TEMPLATES are for training, the rest held out
# what each template is made of: (its lead-in pair of LEAD_INS, its activity, its giving clause of GIVINGS)
TEMPLATE_PARTS: tuple[tuple[tuple[str, str], str, str], ...] = tuple(parts for _, parts in _ALL)

OTHER_TEMPLATES: tuple[str, ...] = (
    "{A} went to the {PLACE}.",
    "{A} and {B} are old friends.",
    "{A} told {B} that the {OBJECT} was lost.",
    "{A} said that {A} would come back to the {PLACE} soon.",
    "{A} thanked {B} for the {OBJECT}.",
    "{A} looked at {B} and smiled.",
    "Later, {A} wrote a letter to {B}.",
    "{A} gave the {OBJECT} back to {A}'s brother.",
    "At the {PLACE}, {A} met {B}.",
    "{A} asked {B} about the {OBJECT}.",
    "{B} was waiting at the {PLACE} when {A} came in.",
    "{A} sold a {OBJECT} to {B}.",
    "{A} and {B} went home, and {A} slept.",
    "Nobody at the {PLACE} knew {A}.",
    "{A} called {B}, and {B} answered.",
    "{B} smiled at {A}.",
    "{A} and {B} talked about the {OBJECT} for a long time.",
    "It was {A} who found the {OBJECT}.",
)

PLACES: tuple[str, ...] = ("store", "garden", "restaurant", "school", "hospital", "office", "station", "house",
                           "church", "market", "park", "library", "river", "hotel", "farm", "theater")
OBJECTS: tuple[str, ...] = ("ring", "book", "letter", "drink", "bottle", "basket", "kiss", "bone", "necklace",
                            "snack", "box", "hat", "ticket", "key", "coat", "watch")
ORDERS = ("ABBA", "BABA")


@dataclass(frozen=True)
class IoiSentence:
    """One indirect-object prompt and its ground truth, in characters (token positions come later).

    ``text`` stops before the answer; ``io`` and ``s`` are the names; ``spans`` maps ``"S1"``,
    ``"S2"`` and ``"IO"`` to the ``(start, end)`` characters of that name in ``text`` (the name
    without its leading space); ``order`` is ``"ABBA"`` or ``"BABA"``; ``template`` indexes
    :data:`IOI_TEMPLATES`; ``place`` and ``obj`` fill their slots."""

    text: str
    io: str
    s: str
    order: str
    template: int
    place: str
    obj: str
    spans: dict[str, tuple[int, int]]


def _fill(template: str, values: dict[str, str]) -> tuple[str, list[tuple[str, int, int]]]:
    """``template`` with its ``{SLOT}`` s filled, and where each slot landed: ``(slot, start, end)``."""
    out, where, i = [], [], 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            out.append(template[i:])
            break
        k = template.index("}", j)
        out.append(template[i:j])
        slot, value = template[j + 1:k], values[template[j + 1:k]]
        start = sum(len(p) for p in out)
        where.append((slot, start, start + len(value)))
        out.append(value)
        i = k + 1
    return "".join(out), where


def ioi_sentence(template: int, io: str, s: str, order: str, place: str, obj: str) -> IoiSentence:
    """The prompt of ``IOI_TEMPLATES[template]`` with ``io`` and ``s`` in ``order`` (see the module docstring)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if io == s:
        raise ValueError(f"the indirect object and the subject must differ, got {io!r} twice")
    if not 0 <= template < len(IOI_TEMPLATES):
        raise ValueError(f"template must index IOI_TEMPLATES (0..{len(IOI_TEMPLATES) - 1}), got {template!r}")
    a, b = (io, s) if order == "ABBA" else (s, io)
    text, where = _fill(IOI_TEMPLATES[template], {"A": a, "B": b, "S": s, "PLACE": place, "OBJECT": obj})
    slot = {name: (start, end) for name, start, end in where}
    spans = {"S1": slot["A"] if order == "BABA" else slot["B"], "IO": slot["A"] if order == "ABBA" else slot["B"],
             "S2": slot["S"]}
    return IoiSentence(text, io, s, order, template, place, obj, spans)


def other_sentence(rng: random.Random, names: Sequence[str]) -> str:
    """One of :data:`OTHER_TEMPLATES` with two distinct names of ``names``, a place and an object."""
    a, b = rng.sample(list(names), 2)
    return _fill(rng.choice(OTHER_TEMPLATES), {"A": a, "B": b, "PLACE": rng.choice(PLACES),
                                              "OBJECT": rng.choice(OBJECTS)})[0]


def passage(rng: random.Random, names: Sequence[str], templates: Sequence[int], n_sentences: int,
            ioi_fraction: float = 0.5, cast_names: Sequence[str] | None = None, cast_size: int = 3,
            frame_words: "BrownFrameWords | None" = None, frame_share: float = 0.0,
            other_frame_share: float = 0.0, cast_heldout_share: float | None = None) -> str:
    """``n_sentences`` sentences joined by spaces: each, with probability ``ioi_fraction``, an
    indirect-object sentence (a template of ``templates``, either order, two names of ``names``, its
    answer and a full stop), otherwise one of :data:`OTHER_TEMPLATES`.

    The other sentences take their names from the passage's *cast*: ``cast_size`` names drawn once
    per passage from ``cast_names`` (default ``names``). So the same few names recur from sentence
    to sentence, and a later mention can be predicted by copying an earlier one: this trains a copy
    of names that works for every name of ``cast_names``, also those never used in an
    indirect-object sentence.

    With ``frame_share`` > 0, each indirect-object sentence is, with that probability, a Brown
    frame of ``frame_words`` (:func:`brown_frame_sentence`) instead of a template. With
    ``other_frame_share`` > 0, each other sentence is, with that probability, a Brown frame that
    is not an indirect-object sentence (:func:`brown_frame_other_sentence`), with the cast's names:
    so held-out names meet the frames' words too, without ever being the answer of an
    indirect-object sentence.

    By default the cast is drawn uniformly from ``cast_names``. With ``cast_heldout_share`` set,
    each member of the cast is, with that probability, a name of ``cast_names`` that is not in
    ``names`` (a held-out name), otherwise one of ``names``: a held-out name, never met in an
    indirect-object sentence, can so be met as often as a training name in the other sentences."""
    if len(names) < 2:
        raise ValueError(f"a passage needs at least 2 names, got {len(names)}")
    cast_names = names if cast_names is None else cast_names
    if not isinstance(cast_size, int) or not 2 <= cast_size <= len(set(cast_names)):
        raise ValueError(f"cast_size must be an int from 2 to the {len(set(cast_names))} cast names, got {cast_size!r}")
    for label, share in (("frame_share", frame_share), ("other_frame_share", other_frame_share)):
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"{label} must be a number in [0, 1], got {share!r}")
        if share > 0 and frame_words is None:
            raise ValueError(f"{label} > 0 needs frame_words (brown_frame_words(texts)) to draw the frames from")
    if cast_heldout_share is None:  # no extra draws: the text of earlier runs is unchanged
        cast = rng.sample(list(dict.fromkeys(cast_names)), cast_size)
    else:
        cast = _mixed_cast(rng, names, cast_names, cast_size, cast_heldout_share)
    names, templates, out = list(names), list(templates), []
    for _ in range(n_sentences):
        if rng.random() < ioi_fraction:
            if frame_share > 0 and rng.random() < frame_share:  # no draw at 0: the template-only text is unchanged
                out.append(brown_frame_sentence(rng, names, frame_words))
                continue
            io, s = rng.sample(names, 2)
            x = ioi_sentence(rng.choice(templates), io, s, rng.choice(ORDERS), rng.choice(PLACES),
                             rng.choice(OBJECTS))
            out.append(f"{x.text} {io}.")
        elif other_frame_share > 0 and rng.random() < other_frame_share:  # no draw at 0, as above
            out.append(brown_frame_other_sentence(rng, cast, frame_words))
        else:
            out.append(other_sentence(rng, cast))
    return " ".join(out)


def _mixed_cast(rng: random.Random, names: Sequence[str], cast_names: Sequence[str], cast_size: int,
                share: float) -> list[str]:
    """``cast_size`` distinct names, each a held-out one (of ``cast_names``, not of ``names``) with
    probability ``share``, else a training one."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ValueError(f"cast_heldout_share must be a number in [0, 1] or None, got {share!r}")
    train = list(dict.fromkeys(names))
    held = [n for n in dict.fromkeys(cast_names) if n not in set(train)]
    if share > 0 and len(held) < cast_size:
        raise ValueError(f"cast_heldout_share={share!r} needs at least cast_size={cast_size} names in "
                         f"cast_names that are not in names, got {len(held)}")
    if share < 1 and len(train) < cast_size:
        raise ValueError(f"cast_heldout_share={share!r} needs at least cast_size={cast_size} names, got {len(train)}")
    cast: list[str] = []
    while len(cast) < cast_size:
        pool = held if rng.random() < share else train
        name = rng.choice(pool)
        if name not in cast:
            cast.append(name)
    return cast


# ---------------------------------------------------------------- Brown frames

FRAME_DETERMINERS = ("the ", "a ", "the ", "a ", "his ", "her ", "the old ", "a new ")  # before the given noun
FRAME_TIME_WORDS = ("In", "On", "At", "After", "During")  # "During the war Ann and Sam ..."


FRAME_FUNCTION_WORDS = frozenset({"the", "a", "to", "at", "on"})  # articles and prepositions every template uses


def heldout_words() -> frozenset[str]:
    """Every word (lower case) of the held-out parts but the articles and prepositions that all
    templates use (:data:`FRAME_FUNCTION_WORDS`): "offered", "left", "noon", "once", "as"... A Brown
    frame never contains one, so no held-out part appears in training text. ("as" is in a training
    lead-in too, "Just as", but alone it is the held-out lead-in "As".)"""
    text = " ".join(" ".join(p) if isinstance(p, tuple) else p for part in _parts(True) for p in part)
    return frozenset(w.lower() for w in re.findall(r"[A-Za-z]+", re.sub(r"\{[A-Z]+\}", " ", text))) - FRAME_FUNCTION_WORDS


@dataclass(frozen=True)
class BrownFrameWords:
    """The words a Brown frame is drawn from, most frequent first: past-tense verbs (tag ``vbd``),
    singular nouns (``nn``), prepositions (``in``) and subordinating conjunctions (``cs``)."""

    verbs: tuple[str, ...]
    nouns: tuple[str, ...]
    prepositions: tuple[str, ...]
    conjunctions: tuple[str, ...]


def brown_frame_words(texts, n_verbs: int = 300, n_nouns: int = 300, n_prepositions: int = 20,
                      n_conjunctions: int = 12) -> BrownFrameWords:
    """The most frequent lower-case words of each class in ``texts`` (Brown texts, the training
    split), without the :func:`heldout_words`."""
    from deviating.data.brown_tags import base_tag

    held = heldout_words()
    counts = {tag: Counter() for tag in ("vbd", "nn", "in", "cs")}
    for text in texts:
        for sentence in text.sentences:
            for word, tag in sentence:
                b = base_tag(tag)
                if b in counts and word.isalpha() and word.islower() and word not in held:
                    counts[b][word] += 1
    sizes = {"vbd": n_verbs, "nn": n_nouns, "in": n_prepositions, "cs": n_conjunctions}
    top = {tag: tuple(w for w, _ in c.most_common(sizes[tag])) for tag, c in counts.items()}
    if any(len(v) < 2 for v in top.values()):
        raise ValueError(f"too few words of some class in the texts given: {({k: len(v) for k, v in top.items()})}")
    return BrownFrameWords(top["vbd"], top["nn"], top["in"], top["cs"])


def _frame_opening(rng: random.Random, words: BrownFrameWords) -> tuple[str, str, str]:
    """A frame's lead-in, the joint after the pair's clause, and what was done ("VERB PREP the
    NOUN"): the lead-in is half the time a conjunction, three tenths "In/On/At/After/During the
    NOUN", else a training lead-in. (Drawn in this order: the shipped text depends on it.)"""
    r = rng.random()
    if r < 0.5:
        lead, joint = rng.choice(words.conjunctions).capitalize() + " ", ", "
    elif r < 0.8:
        lead, joint = f"{rng.choice(FRAME_TIME_WORDS)} the {rng.choice(words.nouns)} ", ". "
    else:
        train_leads = _parts(False)[0]
        lead, joint = train_leads[rng.randrange(len(train_leads))]
    return lead, joint, f"{rng.choice(words.verbs)} {rng.choice(words.prepositions)} the {rng.choice(words.nouns)}"


def brown_frame_sentence(rng: random.Random, names: Sequence[str], words: BrownFrameWords) -> str:
    """One indirect-object sentence in a Brown frame, with its answer and a full stop: two names
    of ``names`` in either order, a lead-in (half the time a conjunction, three tenths "In/On/At/
    After/During the NOUN", else a training lead-in), what the pair did ("VERB PREP the NOUN") and the
    giving clause ("VERB DET NOUN to"), e.g. "Because Maria and Lois created into the process, Lois
    gained her list to Maria."."""
    io, s = rng.sample(list(names), 2)
    a, b = (io, s) if rng.random() < 0.5 else (s, io)
    lead, joint, did = _frame_opening(rng, words)
    det = rng.choice(FRAME_DETERMINERS)
    give = f"{rng.choice(words.verbs)} {det}{rng.choice(words.nouns)} to"
    return f"{lead}{a} and {b} {did}{joint}{s} {give} {io}."


def brown_frame_other_sentence(rng: random.Random, names: Sequence[str], words: BrownFrameWords) -> str:
    """A Brown frame that is *not* an indirect-object sentence, with a full stop: the lead-in and
    what was done as in :func:`brown_frame_sentence`, then a clause that ends in a noun, never in
    a name. Half the time a pair of ``names`` opens it and one of the two acts again ("Because
    Maria and Lois created into the process, Lois gained her list of the war."); otherwise one name
    does both ("After Maria looked at the house, Maria kept a note in the room."). A name is
    repeated, as in an indirect-object sentence, but nothing is given to anyone by name."""
    a, b = rng.sample(list(names), 2)
    lead, joint, did = _frame_opening(rng, words)
    det = rng.choice(FRAME_DETERMINERS)
    then = f"{rng.choice(words.verbs)} {det}{rng.choice(words.nouns)} {rng.choice(words.prepositions)} the {rng.choice(words.nouns)}"
    if rng.random() < 0.5:
        return f"{lead}{a} and {b} {did}{joint}{rng.choice((a, b))} {then}."
    return f"{lead}{a} {did}{joint}{a} {then}."
