"""The JSON files the library writes: their schema versions, and the check every reader makes.

Each file's top-level ``"schema"`` is ``"headlab.<kind>/<version>"``, e.g. ``"headlab.atlas/1"``;
readers call :func:`check_schema` first. A head is written ``[layer, head]``.

====== ======================================================== ====================
kind   written by                                               schema
====== ======================================================== ====================
atlas  ``headlab.analysis.atlas.compute_atlas`` (``atlas`` CLI) ``headlab.atlas/1``
sweep  :meth:`headlab.analysis.sweep.SweepResult.to_json`       ``headlab.sweep/1``
report ``headlab.report.checklist`` (``report`` CLI)              ``headlab.report/3``
claims ``deviating.ledger.report`` (``results/claims/*.json``)    ``headlab.claims/2``
====== ======================================================== ====================

Files of headlab 0.1 have no ``"schema"``: version 0, upgraded in memory where possible.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SCHEMAS", "SchemaError", "schema_of", "check_schema"]

SCHEMAS: dict[str, int] = {"atlas": 1, "sweep": 1, "report": 3, "claims": 2}

_PATTERN = re.compile(r"^headlab\.([a-z_]+)/(\d+)$")


class SchemaError(ValueError):
    """A JSON file is not of the kind or of a version this headlab can read."""


def schema_of(kind: str) -> str:
    """The ``"schema"`` value this headlab writes for files of ``kind`` (e.g. ``"headlab.atlas/1"``)."""
    if kind not in SCHEMAS:
        raise ValueError(f"unknown kind of file {kind!r}: headlab writes {', '.join(SCHEMAS)}")
    return f"headlab.{kind}/{SCHEMAS[kind]}"


def check_schema(data: Any, kind: str, source: str = "the data") -> int:
    """The schema version of ``data``, a dict read from a JSON file of ``kind``.

    Args:
        data: the parsed file.
        kind: what the reader expects (a key of ``SCHEMAS``).
        source: where the data came from (e.g. the file's path), for the messages.

    Returns:
        int: the version, ``0`` for a file without ``"schema"`` (written by headlab 0.1), else the
        version number, at most the one this headlab writes.

    Raises:
        SchemaError: not a dict, another kind of file, a malformed schema, or a version newer
            than this headlab knows.
    """
    expected = schema_of(kind)
    if not isinstance(data, dict):
        raise SchemaError(f"{source} is not a headlab {kind} file: expected a JSON object, got "
                          f"{type(data).__name__}")
    if "schema" not in data:
        return 0
    value = data["schema"]
    match = _PATTERN.match(value) if isinstance(value, str) else None
    if match is None:
        raise SchemaError(f"{source} has schema {value!r}, which is not of the form 'headlab.<kind>/<version>' "
                          f"(this headlab writes {expected!r})")
    found, version = match.group(1), int(match.group(2))
    if found != kind:
        raise SchemaError(f"{source} is a headlab {found} file ({value!r}), not a {kind} file")
    if version > SCHEMAS[kind]:
        raise SchemaError(f"{source} has schema {value!r}, newer than this headlab reads ({expected!r}): "
                          "upgrade headlab, or regenerate the file with this version")
    return version
