"""What every experiment's results file shares: numbers rounded so that the stored files stay
readable and stable across machines."""

from __future__ import annotations

from typing import Any

__all__ = ["rounded"]


def rounded(x: Any, digits: int = 4) -> Any:
    """``x`` with every float (inside dicts, lists and tuples too; tuples become lists) rounded to ``digits``."""
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v, digits) for v in x]
    return x
