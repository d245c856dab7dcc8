"""The short "Claims measured here" table that closes each chapter.

One line per claim row: the claim (linked to its entry on the claims page), the model, the verdict
badge, the rule's reason in one line, and a link to the ledger where the row's whole reasoning is
shown. The verdict comes from :func:`deviating.verdicts.verdict`, never from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

from deviating.ledger import CLAIMS, badge
from deviating.verdicts import ClaimRow, Judgement, named_condition_failing, verdict

__all__ = ["claims_here", "one_line_reason"]

LEDGER = "{doc}`ledger </chapters/10_ledger/10_ledger>`"


def one_line_reason(row: ClaimRow, j: Judgement) -> str:
    """The rule's reason in a few words: a refusal's cause, or how many conditions hold (across
    seeds, or on the items of a model the book did not train), and the named condition that
    decided the verdict, if one did."""
    if j.kind == "cannot be judged":  # the refusal, without its advice
        return "refused: " + j.reason.split(f"{row.model}: ", 1)[-1].split(";")[0]
    unit = "across seeds" if row.seeds else f"on {row.headline.n} {row.items}"  # a pretrained model: its items
    text = f"{j.held} of {j.tested} conditions hold {unit}"
    named = named_condition_failing(j)
    if named:
        who = "the primary endpoint" if j.reason.startswith("the primary endpoint") else "the condition the claim names"
        text = f"decided by {who}, {named.split(' (')[0]}; {text}"
    if 0 < j.held < j.tested and j.held <= 2:
        text += ": " + "; ".join(j.holds_under)
    if j.small_under:
        text += f"; {len(j.small_under)} significant but inside the band"
    if j.each_under:
        text += f"; {len(j.each_under)} on each seed only"
    return text


def claims_here(rows: Sequence[ClaimRow]) -> str:
    """The Markdown table of ``rows`` (show it with ``display(Markdown(...))``)."""
    if not rows:
        raise ValueError("give the chapter's claim rows (deviating.verdicts.ClaimRow); got none")
    lines = ["| claim | model | verdict | why | recorded |", "|---|---|---|---|---|"]
    for row in rows:
        if not isinstance(row, ClaimRow):
            raise TypeError(f"claims_here takes ClaimRow values, got {type(row).__name__}")
        j = verdict(row)
        model = row.model.split(",")[0].split(" (")[0]
        why = one_line_reason(row, j).replace("|", "/")
        lines.append(f"| [{row.claim}](claim-{row.claim.lower()}) {CLAIMS[row.claim]} | {model} | "
                     f"{badge(j.kind)} | {why} | {LEDGER} |")
    return "\n".join(lines)
