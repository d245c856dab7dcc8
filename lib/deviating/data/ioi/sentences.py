"""Indirect-object sentences and other sentences with names, each with its ground truth.

An *indirect-object prompt* (Wang et al. 2022) introduces two people and then has one of them
give something to the other; the prompt stops before the recipient::

    When Mary and John went to the store, John gave a ring to   -> " Mary"

The recipient is the *indirect object* (IO, Mary); the giver is the *subject* (S, John). The
subject appears twice: ``S1`` in the opening clause and ``S2`` as the giver. ``END`` is the last
token of the prompt, where the model must predict the IO. In order **ABBA** the IO is named first
(``Mary and John ... John``), in order **BABA** the subject is (``John and Mary ... John``).

:data:`IOI_TEMPLATES` has :data:`N_TRAIN_TEMPLATES` training templates and the rest held out for
evaluation; each has the slots ``{A}`` and ``{B}`` (the opening pair), ``{S}`` (the giver),
``{PLACE}`` and ``{OBJECT}``, and ends with the word before the IO. :data:`OTHER_TEMPLATES` are the
other uses of names (``{A}`` and ``{B}`` distinct), so that a name after "to" is not always the IO.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

__all__ = ["IOI_TEMPLATES", "N_TRAIN_TEMPLATES", "OTHER_TEMPLATES", "PLACES", "OBJECTS", "ORDERS",
           "IoiSentence", "ioi_sentence", "other_sentence", "passage"]

IOI_TEMPLATES: tuple[str, ...] = (
    # training templates
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "When {A} and {B} got a {OBJECT} at the {PLACE}, {S} decided to give it to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S} gave it to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} had a long talk at the {PLACE}. Afterwards, {S} said to",
    "When {A} and {B} arrived at the {PLACE}, {S} sent a {OBJECT} to",
    "The {PLACE} was quiet when {A} and {B} came in. {S} handed a {OBJECT} to",
    "After the meeting, {A} and {B} went to the {PLACE}. {S} passed the {OBJECT} to",
    "{A} and {B} had lunch at the {PLACE}, and then {S} gave a {OBJECT} to",
    "Since {A} and {B} were at the {PLACE}, {S} wrote a letter to",
    # held-out templates (never in training text)
    "Later, {A} and {B} walked to the {PLACE}, where {S} offered a {OBJECT} to",
    "On Sunday {A} and {B} were at the {PLACE}, and {S} brought a {OBJECT} to",
    "Once {A} and {B} reached the {PLACE}, {S} showed the {OBJECT} to",
    "As {A} and {B} left the {PLACE}, {S} threw a {OBJECT} to",
)
N_TRAIN_TEMPLATES = 12

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
            ioi_fraction: float = 0.5) -> str:
    """``n_sentences`` sentences joined by spaces: each, with probability ``ioi_fraction``, an
    indirect-object sentence (a template of ``templates``, either order, its answer and a full stop),
    otherwise one of :data:`OTHER_TEMPLATES`. Names are drawn from ``names`` only."""
    if len(names) < 2:
        raise ValueError(f"a passage needs at least 2 names, got {len(names)}")
    out = []
    for _ in range(n_sentences):
        if rng.random() < ioi_fraction:
            io, s = rng.sample(list(names), 2)
            x = ioi_sentence(rng.choice(list(templates)), io, s, rng.choice(ORDERS), rng.choice(PLACES),
                             rng.choice(OBJECTS))
            out.append(f"{x.text} {io}.")
        else:
            out.append(other_sentence(rng, names))
    return " ".join(out)
