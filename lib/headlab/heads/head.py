"""One head: its type, how it is written, and its JSON form.

A head is ``Head(layer, head)``, a named pair that compares equal to the plain tuple
``(layer, head)``, so code that writes ``(5, 1)`` keeps working. In prose and on figures it
is written ``L.H`` (``"5.1"``); in every JSON file the library writes it is ``[layer, head]``.
"""

from __future__ import annotations

import operator
import re
from typing import Any, Iterable, NamedTuple

__all__ = ["Head", "format_head", "format_heads", "parse_head"]

_DOTTED = re.compile(r"^\s*(\d+)\s*\.\s*(\d+)\s*$")


class Head(NamedTuple):
    """Head ``head`` of layer ``layer`` (both counted from 0)."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"{self.layer}.{self.head}"

    def to_json(self) -> list[int]:
        """``[layer, head]``: the one JSON form of a head."""
        return [self.layer, self.head]


def _index(value: Any, what: str, given: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got the bool {value!r} in {given!r}")
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {value!r} ({type(value).__name__}) in {given!r}; "
                        "write a head as (layer, head) with ints, or as the string 'layer.head'") from None
    if out < 0:
        raise ValueError(f"{what} must be >= 0, got {out} in {given!r}")
    return out


def parse_head(value: Any) -> Head:
    """A head from any of its written forms: ``Head``, ``(layer, head)``, ``[layer, head]``,
    ``"layer.head"`` or ``{"layer": l, "head": h}``. Indices must be ints (no floats, no bools)."""
    if isinstance(value, Head):
        return value
    if isinstance(value, str):
        m = _DOTTED.match(value)
        if not m:
            raise ValueError(f"cannot read a head from {value!r}: write it as 'layer.head', e.g. '5.1'")
        return Head(int(m.group(1)), int(m.group(2)))
    if isinstance(value, dict):
        if set(value) != {"layer", "head"}:
            raise ValueError(f"a head dict needs exactly the keys 'layer' and 'head', got {sorted(value)}")
        value = (value["layer"], value["head"])
    try:
        layer, head = value
    except (TypeError, ValueError):
        raise TypeError(f"a head is a (layer, head) pair, got {value!r}") from None
    return Head(_index(layer, "layer", value), _index(head, "head", value))


def format_head(value: Any) -> str:
    """``"L.H"`` for any written form of a head."""
    return str(parse_head(value))


def format_heads(values: Iterable[Any], empty: str = "none") -> str:
    """``"5.1, 5.5"``; ``empty`` when there is none."""
    names = [format_head(v) for v in values]
    return ", ".join(names) if names else empty
