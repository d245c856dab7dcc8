"""The fixed select/measure split of the hand-annotated English set.

A head chosen as the best of many on some items scores optimistically on those same items,
so the English set carries a fixed split, decided before any result was looked at: choose
heads, thresholds or variants on the ``"select"`` items and report numbers on the
``"measure"`` items. Each item stores its split (the ``split`` field of
``headlab/english/english.jsonl``); :func:`assign_splits` is the rule that produced it, and a
test checks that the stored field still equals the rule.

The rule: within each construction, take the items in id order in consecutive pairs; the
first item of a pair goes to the split picked by a hash of its id (:func:`hash_split`), the
second item to the other one. So every construction is split evenly (at most one item
apart), the choice depends on nothing an experimenter can tune, and an item's split depends
only on the items before it: appending items never moves an old one.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

SPLITS = ("select", "measure")


def hash_split(item_id: str) -> str:
    """``"select"`` or ``"measure"``, from the parity of the SHA-256 of ``item_id``."""
    digest = hashlib.sha256(f"headlab-english-split:{item_id}".encode()).digest()
    return SPLITS[digest[0] & 1]


def assign_splits(items: Iterable[tuple[str, str]]) -> list[str]:
    """The split of each ``(id, construction)`` pair, in the given (id) order.

    Raises ValueError on a repeated id: the rule needs every item to be named once.
    """
    out: list[str] = []
    pending: dict[str, str] = {}  # construction -> split of its unpaired item
    seen: set[str] = set()
    for item_id, construction in items:
        if item_id in seen:
            raise ValueError(f"id {item_id!r} occurs twice; every item needs its own id")
        seen.add(item_id)
        if construction in pending:
            first = pending.pop(construction)
            out.append(SPLITS[1 - SPLITS.index(first)])
        else:
            split = hash_split(item_id)
            pending[construction] = split
            out.append(split)
    return out
