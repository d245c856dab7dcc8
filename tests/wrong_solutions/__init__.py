"""Plausible wrong solutions, one module per chapter (``chNN.py``, each with its ``CATALOGUE``:
exercise label -> wrong functions). :func:`catalogue` gathers them for ``tests/test_wrong_solutions.py``
and ``tests/test_grading.py``; a new chapter's module is found by its name alone."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


# modules whose chapter is not in the book yet, with where their catalogue is tested meanwhile
PENDING: dict[str, str] = {}


def catalogue() -> dict[str, list]:
    """Every chapter module's CATALOGUE, merged (a label defined twice is an error)."""
    merged: dict[str, list] = {}
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if not info.name.startswith("ch") or info.name in PENDING:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        twice = set(merged) & set(module.CATALOGUE)
        assert not twice, f"labels in two catalogues: {sorted(twice)}"
        merged.update(module.CATALOGUE)
    return merged
