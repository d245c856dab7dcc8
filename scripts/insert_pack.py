#!/usr/bin/env python3
"""Insert an exercise's cells into its chapter: ``python scripts/insert_pack.py PACK.json [...]``.

A pack is ``{"label", "chapter", "after", "cells"}``, or ``{"label", "chapter", "groups": [{"after",
"cells"}, ...]}``: the cells go right after the one cell whose source contains ``after``. An anchor
that no cell or several cells contain is an error (the pack must be corrected, nothing is written).
A chapter that already holds the exercise's label is left as it is, so the script can run twice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def insert(pack: dict, root: Path = ROOT) -> bool:
    """Insert ``pack`` into its chapter; True when cells were written, False when already there."""
    import nbformat

    path = root / pack["chapter"]
    nb = nbformat.read(path, as_version=4)
    if any(f":label: {pack['label']}" in c.source for c in nb.cells):
        return False
    groups = pack.get("groups") or [{"after": pack["after"], "cells": pack["cells"]}]
    for group in groups:
        hits = [i for i, c in enumerate(nb.cells) if group["after"] in c.source]
        if len(hits) != 1:
            raise ValueError(f"{pack['label']}: the anchor {group['after']!r} is in {len(hits)} cells of "
                             f"{pack['chapter']} (it must be in exactly one)")
        new = [nbformat.from_dict(c) for c in group["cells"]]
        for c in new:
            c.pop("id", None)
            if c.cell_type == "code":
                c.outputs, c.execution_count = [], None
        nb.cells[hits[0] + 1:hits[0] + 1] = new
    nbformat.validator.normalize(nb)
    for c in nb.cells:  # nbformat 4.5 wants an id on every cell
        if "id" not in c:
            import uuid

            c["id"] = uuid.uuid4().hex[:8]
    nbformat.write(nb, path)
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    for name in argv:
        pack = json.loads(Path(name).read_text(encoding="utf-8"))
        done = insert(pack)
        print(f"insert_pack: {pack['label']} {'inserted into' if done else 'already in'} {pack['chapter']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
