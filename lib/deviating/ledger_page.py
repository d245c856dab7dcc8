"""The claims ledger's page (chapter 10): the counts of verdicts, the one table of every claim
and row, each row's reasoning condition by condition, and the ledger-wide Benjamini-Hochberg
sensitivity column. The rows and their verdicts come from the ledger (``deviating.ledger``)."""

from __future__ import annotations

import html
import re

from headlab.stats import benjamini_hochberg
from deviating.ledger import CLAIMS, VERDICTS, badge, number_text, summary

__all__ = ["STATUS_WORDS", "verdict_counts", "counts_markdown", "ledger_markdown", "ledger_bh", "reasoning_markdown",
           "chapter_link", "audit_changes", "audit_markdown"]

#: What each condition status of :mod:`deviating.evidence` reads as on the page.
STATUS_WORDS = {"holds": "holds", "small": "significant but inside the band", "each": "on each seed only",
                "fails": "fails", "open": "open", "beside": "beside the row"}


def verdict_counts(ledger: dict[str, list[dict]]) -> dict[str, int]:
    """How many rows of the ledger (``deviating.ledger.load_all``) carry each verdict, in the order of
    ``deviating.ledger.VERDICTS``."""
    counts = {kind: 0 for kind in VERDICTS}
    for rows in ledger.values():
        for row in rows:
            counts[summary(row)["verdict"]] += 1
    return counts


def counts_markdown(ledger: dict[str, list[dict]]) -> str:
    """The ledger's headline: rows, claims measured, and one badge per verdict with its count."""
    counts = verdict_counts(ledger)
    measured = sum(1 for rows in ledger.values() if rows)
    parts = " ".join(f"{badge(kind)} {n}" for kind, n in counts.items())
    return (f"**{sum(counts.values())} verdicts on {measured} of {len(CLAIMS)} claims:** {parts}")


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def ledger_markdown(ledger: dict[str, list[dict]], where=None) -> str:  # noqa: ANN001 (a callable)
    """The ledger as one three-column Markdown table that fits a book's column: the claim (linked to
    its entry on the claims page, with the models and the chapter on a second line), the verdict as
    a badge with the rule's conditions, and the number with its interval, n, seeds and null.

    ``where(chapter_id)`` turns ``"ch04"`` into what the second line shows (e.g. a link to the
    chapter's page); by default the id itself. A claim with no row reads "not measured yet".
    """
    where = where or (lambda chapter: chapter)
    lines = ["| claim | verdict | measured |", "|---|---|---|"]
    for claim, statement in CLAIMS.items():
        head = f"**[{claim}](claim-{claim.lower()})** {_cell(statement)}"
        if not ledger.get(claim):
            lines.append(f"| {head} | not measured yet | — |")
        for entry in ledger.get(claim, []):
            s = summary(entry)
            note = f"<br>{_cell(s['note'])}" if s["note"] else ""
            lines.append(f"| {head}<br><small>{_cell(s['models'])} · {where(entry.get('chapter') or '')}</small> "
                         f"| {badge(s['verdict'], s['typed'])}{note} | {_cell(s['measured'])} |")
    return "\n".join(lines)


def _p(x: float) -> str:
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def ledger_bh(ledger: dict[str, list[dict]]) -> dict[tuple[str, str, str, str], float]:
    """The ledger-wide sensitivity column: every judged condition of every measured row (those
    beside a row left out), its raw one-sided p-value adjusted by Benjamini-Hochberg over the whole
    ledger (:func:`headlab.stats.benjamini_hochberg`, which calls
    :func:`scipy.stats.false_discovery_control`), keyed by ``(claim, chapter, model, condition)``.
    Holm's correction within a row decides the verdicts; this column shows how the ledger reads
    when the false-discovery rate over all its conditions is controlled instead."""
    keys, ps = [], []
    for claim, rows in ledger.items():
        for entry in rows:
            s = summary(entry)
            if s["typed"]:
                continue
            for c in s["judgement"].conditions:
                if c["status"] != "beside":
                    keys.append((claim, entry.get("chapter") or "", s["models"], c["condition"]))
                    ps.append(c["p"])
    return dict(zip(keys, map(float, benjamini_hochberg(ps)))) if ps else {}


def reasoning_markdown(ledger: dict[str, list[dict]]) -> str:
    """Each measured row's reasoning, one collapsed block per row: per condition its role (the
    primary endpoint, required, judged, or beside the row and why), the effect and its interval,
    the unit and n ("3 seeds", "216 sentences"), the no-effect band, the test, the p-value after
    Holm's correction, the ledger-wide Benjamini-Hochberg p-value (:func:`ledger_bh`, a sensitivity
    column) and what the condition counts as; then the verdict with its reason."""
    bh = ledger_bh(ledger)
    out = []
    for claim, rows in ledger.items():
        for entry in rows:
            s = summary(entry)
            if s["typed"]:
                continue
            j = s["judgement"]
            out += [f"<details><summary><b>{claim}</b> · {html.escape(entry.get('chapter') or '')} · "
                    f"{html.escape(s['models'])}: {html.escape(j.kind)}</summary>", ""]
            if j.conditions:
                out += ["| condition | role | effect [95% interval] | unit, n | band | test | p (Holm) | "
                        "p (BH, ledger) | counts as |", "|---|---|---|---|---|---|---|---|---|"]
                for c in j.conditions:
                    lo, hi = c["band"]
                    key = (claim, entry.get("chapter") or "", s["models"], c["condition"])
                    holm_p = "beside: raw " + _p(c["p"]) if c["p_holm"] is None else _p(c["p_holm"])
                    out.append(f"| {_cell(c['condition'])} | {_cell(c['role'])} | {number_text(c['effect'])} "
                               f"[{number_text(c['low'])}, {number_text(c['high'])}] | {c['unit']}, "
                               f"{_cell(c['per'])} | ±{(hi - lo) / 2:g} | {_cell(c['test'])} | {holm_p} | "
                               f"{_p(bh[key]) if key in bh else '—'} | {STATUS_WORDS[c['status']]} |")
                out.append("")
            out += [f"{_cell(j.reason)}", "", "</details>", ""]
    return "\n".join(out).strip()


def chapter_link(chapter: str, toc: str = "") -> str:
    """``"ch04"`` as the ledger shows it: a link to the chapter's page (``{doc}`` role, titled by the
    page) when ``toc`` (the text of ``_toc.yml``) lists it, else "chapter 4" (Colab, an installed
    package, or a chapter that is not in the book)."""
    number = chapter.removeprefix("ch")
    if not number.isdigit():
        raise ValueError(f"a chapter id looks like 'ch04', got {chapter!r}")
    found = re.search(rf"file:\s*(chapters/{number}_\S+)", toc)
    return f"{{doc}}`/{found.group(1)}`" if found else f"chapter {int(number)}"


def audit_changes(ledger: dict[str, list[dict]], audit: dict) -> list[dict]:
    """The rows whose verdict changed since an audit's snapshot: ``audit["rows"]`` lists every row of
    the snapshot (``chapter``, ``claim``, ``k`` (its place among that chapter's rows of the claim),
    ``model``, ``before`` and ``why``); a row is matched to the ledger by chapter, claim and place.
    Each change has ``chapter``, ``claim``, ``model``, ``before``, ``now`` (``"removed"`` for a row
    gone from the ledger) and ``why``."""
    now: dict[tuple[str, str, int], str] = {}
    for claim, rows in ledger.items():
        seen: dict[str, int] = {}
        for entry in rows:
            chapter = entry.get("chapter") or ""
            k = seen[chapter] = seen.get(chapter, -1) + 1
            now[chapter, claim, k] = summary(entry)["verdict"]
    out = []
    for r in audit["rows"]:
        after = now.get((r["chapter"], r["claim"], r["k"]), "removed")
        if after != r["before"]:
            out.append({**{k: r[k] for k in ("chapter", "claim", "model", "before", "why")}, "now": after})
    return out


def audit_markdown(ledger: dict[str, list[dict]], audit: dict) -> str:
    """:func:`audit_changes` as a Markdown table: chapter, claim and model, the verdict before and now,
    and why it changed."""
    lines = ["| chapter | claim, model | before | now | why |", "|---|---|---|---|---|"]
    for c in audit_changes(ledger, audit):
        lines.append(f"| {c['chapter']} | **{c['claim']}** {_cell(c['model'])} | {c['before']} | "
                     f"{badge(c['now']) if c['now'] in VERDICTS else c['now']} | {_cell(c['why'])} |")
    return "\n".join(lines)
