"""Write ``deviating/results/ledger_audit.json``: the ledger before its second audit (issue 38).

    PYTHONPATH=lib python scripts/ledger_audit.py BEFORE_DIR

BEFORE_DIR holds the claims files as they were before the audit (``git show
1b8f029:lib/deviating/results/claims/chNN.json``). Every row of them is recorded with its
verdict then; the rows whose verdict changed carry why (written here, by the person who made
the change). Chapter 10 shows the changes (``deviating.ledger_page.audit_markdown``), with the
verdict now taken from the ledger, and a test checks that every changed verdict has its reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "1b8f029"
WHY = {
    ("ch03", "C6", 0): "The zero-ablation difference is significant after Holm but lies inside the 0.01 band. "
                       "The rule now reports that as its own outcome, not as no effect.",
    ("ch03", "C7", 0): "The retrieval loss is saturated (chapter 6: even the largest head barely moves it). "
                       "A failed instrument is shown beside the row, not counted against it.",
    ("ch04", "C4", 2): "The nearest word of the key's class made the gold labels (accuracy 1.000): refused as the "
                       "answer key. Against the best fixed offset, the primary endpoint (noun to determiner) is "
                       "about 0.",
    ("ch04", "C4", 3): "The nearest word of the key's class is refused as the answer key. Against the best fixed "
                       "offset, noun to determiner leads on every seed, but across 3 seeds it misses Holm's bar "
                       "over the four relations.",
    ("ch04", "C20", 0): "The primary endpoint is open. The per-seed intervals are percentile bootstraps over 12 "
                        "windows, under the rule's 20-item guard, so no seed's interval counts alone.",
    ("ch04", "C14", 0): "The row now asks whether each role recurs, at 3 seeds (each seed's own head), not "
                        "whether seed 0's head index plays it at 2 seeds. Heads in a layer are interchangeable "
                        "at initialisation.",
    ("ch06", "C9", 0): "The primary endpoint (agreement, zero ablation, loss) is open. The per-seed intervals "
                       "are percentile bootstraps over few windows, under the 20-item guard.",
    ("ch06", "C11", 0): "Three conditions are significant but their intervals do not clear the 0.01-nat band.",
    ("ch06", "C8", 0): "One observed Gini is one draw: the null is now the 97.5% point of the Gini of 32 "
                       "exponential draws, not their mean. Against it, the resample conditions hold on each seed "
                       "only.",
    ("ch06", "C8", 2): "One observed Gini is one draw: the null is now the 97.5% point of the Gini of 16 "
                       "exponential draws, not their mean. Against it, the Gini holds on each seed, not across 3 "
                       "seeds after Holm.",
    ("ch07", "C10", 0): "The tail was redefined after the run, and the row weighed nats against accuracy points. "
                        "Like for like, agreement with an attractor fails 2 heads before all agreement on each of "
                        "3 seeds: one measurement, sign-test p = 0.125.",
    ("ch07", "C19", 0): "The three random orders are controls, shown beside the row, not conditions.",
    ("ch08", "C15", 0): "Removed: any basis of the 128 dimensions has more directions than 8 heads, so the claim "
                        "is trivially true; and the three SAE seeds' counts are not independent.",
    ("ch08", "C16", 0): "The primary endpoint is the first narrow width, 16, not the most extreme (2); it is open. "
                        "Heads of 4 are significant but inside the band.",
}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Write deviating/results/ledger_audit.json from the claims "
                                                 f"files as they were before the audit (git show {BEFORE}:...).")
    parser.add_argument("before_dir", help="the folder of the claims files before the audit (chNN.json)")
    before_dir = Path(parser.parse_args(argv).before_dir)
    found = sorted(before_dir.glob("ch*.json")) if before_dir.is_dir() else []
    if not found:  # nothing to record: never overwrite the shipped audit with an empty one
        parser.error(f"{before_dir} holds no chNN.json claims files; write them with "
                     f"git show {BEFORE}:lib/deviating/results/claims/chNN.json > DIR/chNN.json")
    rows = []
    for path in found:
        data = json.loads(path.read_text())
        seen: dict[str, int] = {}
        for r in data["rows"]:
            k = seen[r["claim"]] = seen.get(r["claim"], -1) + 1
            rows.append({"chapter": data["chapter"], "claim": r["claim"], "k": k, "model": r["model"],
                         "before": r["verdict"]["kind"], "why": WHY.get((data["chapter"], r["claim"], k), "")})
    out = ROOT / "lib" / "deviating" / "results" / "ledger_audit.json"
    out.write_text(json.dumps({"before": BEFORE, "issue": 38, "rows": rows}, indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    print(f"{len(rows)} rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
