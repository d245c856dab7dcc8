"""What every experiment's results file shares: numbers rounded so that the stored files stay
readable and stable across machines, and a JSON layout that keeps long lists of numbers on one
line (a results file with per-window values stays a few thousand lines long)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["rounded", "dumps"]


def rounded(x: Any, digits: int = 4) -> Any:
    """``x`` with every float (inside dicts, lists and tuples too; tuples become lists) rounded to ``digits``."""
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v, digits) for v in x]
    return x


def _flat(x: Any) -> bool:
    return isinstance(x, list) and all(not isinstance(v, (dict, list)) for v in x)


def dumps(x: Any, indent: int = 1, _level: int = 0) -> str:
    """``x`` as JSON, indented like ``json.dumps(x, indent=indent)`` except that a list holding
    no dict or list is written on one line. ``json.loads(dumps(x)) == x``."""
    pad, inner = " " * (indent * _level), " " * (indent * (_level + 1))
    if isinstance(x, dict):
        if not x:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {dumps(v, indent, _level + 1)}" for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(x, list):
        if _flat(x):
            return json.dumps(x)
        return "[\n" + ",\n".join(inner + dumps(v, indent, _level + 1) for v in x) + "\n" + pad + "]"
    return json.dumps(x)
