"""The fixed select/measure split of the hand-annotated English set.

Choose on the ``"select"`` items, report on the ``"measure"`` items. :func:`assign_splits` is
the rule behind each item's stored ``split``: within each construction, items in id order in
pairs; the first of a pair goes where a hash of its id says (:func:`hash_split`), the second
to the other side. Appending items never moves an old one.
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
