"""The checklist table at the top of every report: each check, whether it was measured, and what it found.

The checks are the checklist for a claim about heads (the book's chapter 9), in its order:
:data:`CHECKS`. :func:`checklist_table` writes one row per check from the numbers of the
report's sections; a check the report could not run on this model says so and why.
"""

from __future__ import annotations

from headlab.heads.head import format_head

__all__ = ["CHECKS", "checklist_table"]

CHECKS = (
    ("baselines", "Compare with a baseline: each head's effect has an interval over texts, against no effect"),
    ("selection", "Select on one split, measure on the other"),
    ("conditioning", "Condition on the input and the position: what an average hides"),
    ("own text", "Test detectors on the model's own kind of text, not only on random tokens"),
    ("seeds", "Repeat on other training seeds"),
    ("tasks", "Look at per-task margins"),
    ("modes", "Change the ablation mode and the metric"),
)


def _heads(rows, key: str = "head") -> str:
    return ", ".join(format_head(r[key]) for r in rows) or "none"


def _mean(selection: dict, key: str) -> float:
    rows = selection["top"]
    return sum(r[key] for r in rows) / len(rows)


def _row(name: str, measured: bool, finding: str) -> dict:
    title = dict(CHECKS)[name]
    return {"check": name, "what": title, "measured": measured, "finding": finding}


def checklist_table(report: dict) -> list[dict]:
    """One row per check of :data:`CHECKS`: ``check``, ``what``, ``measured`` and ``finding`` (a sentence
    written from the report's numbers)."""
    a, sel, pos, c = report["ablation"], report["selection"], report["position"], report["circuits"]
    seeds, tasks, modes = report["seeds"], report["tasks"], report["modes"]
    n = report["n_layers"] * report["n_heads"]
    rows = [_row("baselines", True,
                 f"{a['above_zero']} of {n} heads have a mean effect whose 95% interval lies above 0, "
                 f"{a['below_zero']} below it; pattern scores are read as lifts over uniform attention")]
    if sel["measured"]:
        rows.append(_row("selection", True,
                         f"the top {sel['top_k']} heads chosen on {sel['n_select']} texts: mean effect "
                         f"{_mean(sel, 'in_sample'):.3g} there, {_mean(sel, 'held_out'):.3g} on the other "
                         f"{sel['n_measure']}; the two halves pick {sel['top_k_agreement']} of the same {sel['top_k']}"))
    else:
        rows.append(_row("selection", False, sel["why"]))
    tail = f"{len(a['hidden_in_the_tail'])} heads hidden in the tail (small mean, large worst case)"
    if pos["measured"]:
        gap = pos["largest_gaps"][0]
        tail += (f"; early and late positions rank heads with a correlation of "
                 f"{pos['spearman_early_late']}, largest gap at {format_head(gap['head'])} "
                 f"({gap['early']:.3g} early, {gap['late']:.3g} late)")
    else:
        tail += f"; position: {pos['why']}"
    rows.append(_row("conditioning", True, tail))
    found = {k: [x for x in c["induction_candidates"] if k in x["found_on"]] for k in ("random tokens", "own text")}
    both = {k: ", ".join(format_head(h) for h in c["induction_heads"][k]) or "none" for k in found}
    own = (f"attention half of the induction role on random tokens: {_heads(found['random tokens'])}; on the "
           f"model's own text: {_heads(found['own text'])}; found on one kind only: "
           f"{_heads(c['found_on_one_kind_only'])}; ")
    if c["copying_tested"]:
        own += (f"induction heads (both halves) on random tokens: {both['random tokens']}; on the own text: "
                f"{both['own text']}; ")
    else:
        own += "the copying half cannot be tested (no unembedding); "
    own += f"verified previous-token -> induction circuits: {len(c['verified'])}"
    rows.append(_row("own text", True, own))
    if seeds["measured"]:
        text = "; ".join(f"{r['model']}: rank correlation {r['spearman_by_head']}, {r['top_k_shared']} of the top "
                         f"{seeds['top_k']} shared" for r in seeds["replicas"])
        rows.append(_row("seeds", True, text))
    else:
        rows.append(_row("seeds", False, seeds["why"]))
    if tasks["measured"]:
        best = "; ".join(f"{t}: {format_head(b['head'])} carries {b['share']:.0%}" for t, b in tasks["best"].items())
        spec = _heads(tasks["specialists"])
        rows.append(_row("tasks", True, f"largest share of each task's margin: {best}; task specialists with a "
                                        f"below-median mean effect: {spec}"))
    else:
        rows.append(_row("tasks", False, tasks["why"]))
    parts = [f"{name}: rank correlation {v['spearman_with_zero']} with zero ablation, first "
             f"{format_head(v['order'][0])}" for name, v in modes["conditions"].items()]
    rows.append(_row("modes", True, f"the top {len(modes['heads'])} heads re-measured; " + "; ".join(parts)))
    return rows
