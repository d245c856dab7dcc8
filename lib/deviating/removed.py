"""The rows taken out of the claims ledger, and why (:mod:`deviating.ledger` refuses them).

A row that cannot measure its claim -- an identity, a count too small to settle the claim, a
quantity that measures another claim -- is removed rather than kept with a verdict. Each entry
names the claim, the chapter, the quantity the row measured (its ``ClaimRow.quantity``) and why.
"""

from __future__ import annotations

__all__ = ["REMOVED", "removed_entry", "removed_markdown"]


#: Rows taken out of the ledger because they could not measure their claim: the claim, the chapter,
#: the quantity the row measured (as its ``ClaimRow.quantity`` read) and why. :func:`deviating.ledger.report` refuses
#: such a row, and the ledger page lists them. A chapter may still show the number, unjudged.
REMOVED: tuple[dict[str, str], ...] = (
    {"claim": "C17", "chapter": "ch02",
     "quantity": "largest rank of a head's d_model x d_model circuit, over every head",
     "why": "an identity, not a test: W_Q W_K^T and W_V W_O are products of d_head-wide factors, so their rank "
            "is at most d_head by construction, and the code that counts it raises an error if it were ever "
            "more; the row could not fail. C17 is judged on the two-relations task instead."},
    {"claim": "C19", "chapter": "ch06", "quantity": "share of heads below 1% of the loss",
     "why": "a share of single-head removals says nothing about removing many heads together, which is what "
            "C19 claims; chapter 7 removes heads together, in order, until the model fails."},
    {"claim": "C19", "chapter": "ch06", "quantity": "share of heads below 1%",
     "why": "as on the organism: single removals, not removal together (chapter 7 measures that on MiniLM)."},
    {"claim": "C15", "chapter": "ch08", "quantity": "share of the 8 heads that are polysemantic",
     "why": "eight heads cannot settle \"most\": the exact bound at 7 of 8 is 0.473, so only 8 of 8 could "
            "exclude one half, and a head with no labelled feature counted as not polysemantic. Chapter 8 "
            "still shows the counts per SAE seed."},
    {"claim": "C15", "chapter": "ch08", "quantity": "live features that every other SAE seed finds again",
     "why": "trivially true for any dictionary: the 8 heads write into 128 dimensions, and any basis of those has "
            "128 directions, 16 times as many as the heads, so \"more features than heads\" could not fail; "
            "against the 128 dimensions instead the row tested another claim. And each SAE seed's count is "
            "matched against the other two seeds, so the three counts are not independent and no t test over "
            "them is valid. Chapter 8 still shows the counts."},
)


def removed_entry(claim: str, chapter: str, quantity: str) -> dict[str, str] | None:
    """The entry of :data:`REMOVED` for this claim, chapter and quantity, or None."""
    return next((r for r in REMOVED if (r["claim"], r["chapter"], r["quantity"]) == (claim, chapter, quantity)),
                None)


def removed_markdown() -> str:
    """The rows taken out of the ledger (:data:`REMOVED`) as a Markdown table: claim, chapter, what
    the row measured, and why it could not measure its claim."""
    lines = ["| claim | chapter | what the row measured | why it was removed |", "|---|---|---|---|"]
    if any("|" in r["quantity"] + r["why"] for r in REMOVED):
        raise ValueError("a removed row's quantity or reason holds '|', which would break the table")
    for r in REMOVED:
        lines.append(f"| [{r['claim']}](claim-{r['claim'].lower()}) | {r['chapter']} | {r['quantity']} | "
                     f"{r['why']} |")
    return "\n".join(lines)
