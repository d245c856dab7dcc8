"""The short claims table each chapter ends with (deviating.claims_here)."""

from __future__ import annotations

import pytest

from deviating.claims_here import claims_here
from deviating.verdicts import ClaimRow, Measurement, verdict


def _row(effects, claim="C8", model="organism, 3 seeds", conditions=("zero",)):
    ms = tuple(Measurement(condition=c, effect=e, low=e - 0.05, high=e + 0.05, n=64, seed=s)
               for c in conditions for s, e in enumerate(effects))
    return ClaimRow(claim, model, "Gini of mean effects", null=0.3, null_label="exponential reference",
                    direction="greater", measurements=ms, headline=ms[0], unit="share")


def test_the_table_shows_the_rules_verdict_and_links_claim_and_ledger():
    holds = _row([0.70, 0.72, 0.69, 0.71, 0.70])
    spans = _row([0.70, 0.10, 0.72], claim="C9")
    table = claims_here([holds, spans]).splitlines()
    assert table[0] == "| claim | model | verdict | why | recorded |" and len(table) == 4
    assert table[2].startswith("| [C8](claim-c8) ") and "| organism |" in table[2]
    assert verdict(holds).kind in table[2] and verdict(spans).kind in table[3]
    assert verdict(holds).kind != verdict(spans).kind  # the table is not the same for every row
    assert "1 of 1 conditions hold across seeds" in table[2]
    assert table[2].endswith("| {doc}`ledger </chapters/10_ledger/10_ledger>` |")


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="got none"):
        claims_here([])
    with pytest.raises(TypeError, match="ClaimRow"):
        claims_here([{"claim": "C8"}])
