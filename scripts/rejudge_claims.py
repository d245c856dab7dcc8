"""Re-judge the stored claim rows by the current verdict rule (deviating.verdicts) and show what changed.

    PYTHONPATH=lib python scripts/rejudge_claims.py            # the before/after table only
    PYTHONPATH=lib python scripts/rejudge_claims.py --write    # also rewrite results/claims/*.json
                                                                # and the claims table each chapter shows

The stored rows carry every number the rule reads (per condition and seed: effect, interval, n), so
they are judged again without re-running a chapter. One repair is made from the stored numbers: an
accuracy-kind measurement that is an exact tie (effect 0, interval [0, 0], from a bootstrap of 0/1
outcomes that agree on every item) gets its exact bound, the Clopper-Pearson upper end for 0
discordant items of n (what headlab.stats.paired_difference now returns). Every other row that
cannot meet the rule (zero width, conditions on different seeds) is written with the verdict
*cannot be judged* and the refusal as its reason: those rows need their chapter re-run with the
new measurement, and this script lists them.

``--write`` also replaces the claims table stored in each chapter's output (the cell that calls
``deviating.ledger.report``) with the table the re-judged rows give: the same text the cell prints
when the chapter is next executed, so the files and the chapters stay in agreement. No cell is
executed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat
from scipy import stats as sps

from deviating.ledger import claims_dir, markdown_table
from deviating.verdicts import from_json, to_json, verdict

ROOT = Path(__file__).resolve().parents[1]
REPORT_CALL = "report(\""


def tie_bound(n: int, level: float) -> float:
    """Clopper-Pearson upper end for 0 discordant items of ``n``: the half-width of an exact tie's bound."""
    return float(sps.binomtest(0, n).proportion_ci(confidence_level=level, method="exact").high)


def repair(entry: dict) -> tuple[dict, list[str]]:
    """The stored row with exact ties of accuracy-kind measurements given their exact bound, and what was done."""
    row = from_json(entry)
    done = []

    def fix(m: dict) -> dict:
        if m["low"] == m["high"] == m["effect"] == 0 and m["n"] > 3:  # a tie over items, not over 3 seeds
            condition = m["condition"]
            unit = row.unit_for(condition if condition in row.conditions else row.conditions[0])
            if unit == "accuracy":
                u = tie_bound(m["n"], row.level)
                done.append(f"{condition!r}{'' if m.get('seed') is None else ', seed ' + str(m['seed'])}: "
                            f"exact tie [0, 0] -> [-{u:.4f}, {u:.4f}] (0 discordant of {m['n']})")
                return {**m, "low": -u, "high": u}
        return m

    fixed = {**entry, "measurements": [fix(m) for m in entry["measurements"]], "headline": fix(entry["headline"])}
    return fixed, done


def rejudge(folder: Path) -> tuple[dict[str, dict], list[dict]]:
    """Every claims file re-judged: ``({chapter: payload}, [changed verdicts], [rows that cannot be judged])``."""
    payloads, changes, refused = {}, [], []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = []
        for entry in data["rows"]:
            if entry.get("kind") != "measured":
                rows.append(entry)
                continue
            before = entry["verdict"]["kind"]
            body = {k: v for k, v in entry.items() if k not in ("kind", "verdict")}  # the rule gives it again
            body, repairs = repair(body)
            row = from_json(body)
            judgement = verdict(row)
            rows.append({"kind": "measured", **to_json(row)})
            if judgement.kind == "cannot be judged":
                refused.append({"chapter": data["chapter"], "claim": row.claim, "model": row.model,
                                "reason": judgement.reason})
            if judgement.kind != before or repairs:
                changes.append({"chapter": data["chapter"], "claim": row.claim, "model": row.model,
                                "before": before, "after": judgement.kind, "reason": judgement.reason,
                                "repairs": repairs})
        payloads[data["chapter"]] = {**data, "rows": rows}
    return payloads, changes, refused


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def changes_markdown(changes: list[dict]) -> str:
    """The before/after table: every verdict that changed, with the rule's reason."""
    lines = ["| chapter | claim | model | before | after | reason |", "|---|---|---|---|---|---|"]
    for c in changes:
        reason = c["reason"] + ("; repaired: " + "; ".join(c["repairs"]) if c["repairs"] else "")
        lines.append(f"| {c['chapter']} | {c['claim']} | {_cell(c['model'])} | {c['before']} | {c['after']} | "
                     f"{_cell(reason)} |")
    return "\n".join(lines)


def update_chapter_tables(payloads: dict[str, dict]) -> list[Path]:
    """Replace the stored claims table of each chapter's report cell with the re-judged rows' table."""
    changed = []
    for chapter, payload in payloads.items():
        number = chapter.removeprefix("ch")
        # a chapter may have sections (chapter 7 has two pages): the notebook whose cell reports it
        found = [p for p in (ROOT / "chapters").glob(f"{number}_*/*.ipynb") if not p.name.startswith(".")
                 and any(f'{REPORT_CALL}{chapter}"' in c.source for c in nbformat.read(p, as_version=4).cells)]
        if len(found) != 1:
            print(f"{chapter}: no single chapter notebook found; its table was not updated", file=sys.stderr)
            continue
        nb = nbformat.read(found[0], as_version=4)
        table = markdown_table(payload["rows"])
        touched = False
        for cell in nb.cells:
            if cell.cell_type != "code" or f'{REPORT_CALL}{chapter}"' not in cell.source:
                continue
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "text/markdown" in data and str(data["text/markdown"]).startswith("| claim | verdict |"):
                    data["text/markdown"] = table
                    if "text/plain" in data:
                        data["text/plain"] = "<IPython.core.display.Markdown object>"
                    touched = True
        if touched:
            nbformat.write(nb, found[0])
            changed.append(found[0])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the claims files and the chapters' tables")
    parser.add_argument("--folder", type=Path, default=None, help="claims folder (default: the package's)")
    args = parser.parse_args(argv)
    folder = args.folder or claims_dir()
    payloads, changes, refused = rejudge(folder)
    print(changes_markdown(changes))
    print(f"\n{len(changes)} verdicts changed. {len(refused)} rows cannot be judged until their chapter is re-run "
          "with a new measurement:")
    for c in refused:
        print(f"- {c['chapter']} {c['claim']} ({c['model']}): {c['reason']}")
    if args.write:
        for chapter, payload in payloads.items():
            (folder / f"{chapter}.json").write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n",
                                                    encoding="utf-8")
        for path in update_chapter_tables(payloads):
            print(f"updated the stored claims table of {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
