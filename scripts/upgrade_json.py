"""Upgrade the JSON files shipped in the repository to the forms headlab 0.2 writes, in place.

    python scripts/upgrade_json.py            # rewrite what needs it, print what changed
    python scripts/upgrade_json.py --check    # change nothing; exit 1 if a file needs upgrading

* the atlases in ``lib/deviating/results/atlases/``: ``"schema": "headlab.atlas/1"`` first, and each
  head written ``"head": [layer, head]`` instead of separate ``"layer"`` and ``"head"`` numbers;
* the claims files in ``lib/deviating/results/claims/``: ``"schema": "headlab.claims/1"`` first;
* the training metrics recorded with the checkpoints (``lib/headlab/checkpoints/*/``) and in the
  stored results (``distillation.json``, ``width_depth.json``): the previous-token score under
  one name, ``previous_token`` (also ``previous_token_best`` and ``previous_token_best_head``),
  as the detectors and the atlas call it, instead of ``prev_token``.

Numbers are never touched: each file is parsed, its keys rearranged, and written back with the
indentation, character escaping and final newline it had. Running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))

from headlab.schema import schema_of  # noqa: E402


def _layout(text: str) -> tuple[bool, str]:
    """``(ensure_ascii, final newline)`` with which ``json.dumps(..., indent=1)`` gives back ``text``."""
    data = json.loads(text)
    for ascii_only in (False, True):
        for end in ("", "\n"):
            if json.dumps(data, indent=1, ensure_ascii=ascii_only) + end == text:
                return ascii_only, end
    raise ValueError("not written by json.dumps(..., indent=1): refusing to rewrite it")


def upgrade_atlas(data: dict) -> dict:
    """An atlas with its schema first and every head as ``"head": [layer, head]``."""
    heads = []
    for entry in data["heads"]:
        if "layer" in entry:
            rest = {k: v for k, v in entry.items() if k not in ("layer", "head")}
            entry = {"head": [entry["layer"], entry["head"]], **rest}
        heads.append(entry)
    body = {k: (heads if k == "heads" else v) for k, v in data.items() if k != "schema"}
    return {"schema": schema_of("atlas"), **body}


def upgrade_claims(data: dict) -> dict:
    """A claims file with its schema first."""
    return {"schema": schema_of("claims"), **{k: v for k, v in data.items() if k != "schema"}}


def rename_previous_token(data):
    """``data`` with every key ``prev_token...`` renamed ``previous_token...``, at any depth, order kept."""
    if isinstance(data, dict):
        return {("previous_token" + k[len("prev_token"):] if k.startswith("prev_token") else k):
                rename_previous_token(v) for k, v in data.items()}
    if isinstance(data, list):
        return [rename_previous_token(v) for v in data]
    return data


UPGRADES = [
    ("lib/deviating/results/atlases/*.json", upgrade_atlas),
    ("lib/deviating/results/claims/*.json", upgrade_claims),
    ("lib/headlab/checkpoints/*/provenance.json", rename_previous_token),
    ("lib/headlab/checkpoints/*/loss_curve.json", rename_previous_token),
    ("lib/deviating/results/distillation.json", rename_previous_token),
    ("lib/deviating/results/width_depth.json", rename_previous_token),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file needs upgrading")
    args = parser.parse_args(argv)
    stale = []
    for pattern, upgrade in UPGRADES:
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text(encoding="utf-8")
            ascii_only, end = _layout(text)
            new = json.dumps(upgrade(json.loads(text)), indent=1, ensure_ascii=ascii_only) + end
            if new != text:
                stale.append(path.relative_to(ROOT))
                if not args.check:
                    path.write_text(new, encoding="utf-8")
    verb = "need upgrading" if args.check else "upgraded"
    print(f"{len(stale)} files {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
