"""The verdict rule of deviating.verdicts: every kind, every edge case, the JSON form."""

from __future__ import annotations

import json

import pytest

from headlab.stats import Estimate, over_seeds
from deviating.verdicts import (
    KINDS,
    SCHEMA_VERSION,
    ClaimRow,
    Measurement,
    count_verdicts,
    from_json,
    judge,
    rule_text,
    to_json,
)


def row(*measurements, direction="greater", null=0.0, **kw) -> ClaimRow:
    ms = tuple(Measurement(*m) if isinstance(m, tuple) else m for m in measurements)
    return ClaimRow("C4", "MiniLM", "accuracy lead over the nearest mention", null, "nearest-mention baseline",
                    direction, ms, **kw)


def test_the_four_kinds():
    assert judge(row(("all items", 0.12, 0.05, 0.2, 82))).kind == "holds"
    assert judge(row(("all items", 0.12, -0.01, 0.24, 82))).kind == "inconclusive"
    assert judge(row(("all items", -0.12, -0.2, -0.05, 82))).kind == "does not hold here"
    mixed = judge(row(("noun subjects", 0.3, 0.2, 0.4, 40), ("pronoun subjects", 0.0, -0.1, 0.1, 40)))
    assert mixed.kind == "holds with conditions"
    assert mixed.holds_under == ("noun subjects",) and mixed.open_under == ("pronoun subjects",)
    assert "noun subjects" in mixed.reason and "pronoun subjects" in mixed.reason


def test_direction_less():
    assert judge(row(("all", -0.3, -0.5, -0.1, 30), direction="less")).kind == "holds"
    assert judge(row(("all", 0.3, 0.1, 0.5, 30), direction="less")).kind == "does not hold here"


def test_an_interval_touching_the_null_does_not_exclude_it():
    assert judge(row(("all", 0.1, 0.0, 0.2, 30))).kind == "inconclusive"
    assert judge(row(("all", 0.1, 1e-12, 0.2, 30))).kind == "holds"


def test_the_null_need_not_be_zero():
    # accuracy 0.62 against a chance rate of 0.5
    assert judge(row(("all", 0.62, 0.55, 0.69, 100), null=0.5)).kind == "holds"
    assert judge(row(("all", 0.62, 0.45, 0.69, 100), null=0.5)).kind == "inconclusive"


def test_no_effect_band():
    band = (-0.05, 0.05)
    # inside the band: no effect, even though the interval excludes 0 (the band is read first)
    tiny = row(("all", 0.02, 0.01, 0.03, 5000), no_effect=band)
    assert judge(tiny).kind == "does not hold here"
    assert judge(row(("all", 0.02, 0.01, 0.03, 5000))).kind == "holds"  # without a band it holds
    # an interval leaving the band on the claimed side supports the claim
    assert judge(row(("all", 0.06, 0.01, 0.11, 500), no_effect=band)).kind == "holds"
    # spanning the band edge and the null: open
    assert judge(row(("all", 0.0, -0.06, 0.04, 500), no_effect=band)).kind == "inconclusive"
    with pytest.raises(ValueError, match="band"):
        row(("all", 0.0, -0.1, 0.1, 10), no_effect=(0.1, 0.2))


def test_every_seed_must_support_it():
    three = [("all", 0.5, 0.3, 0.7, 200, s) for s in (0, 1, 2)]
    head = Measurement.from_estimate(over_seeds([0.5, 0.5, 0.5 + 1e-9]), "pooled over seeds")
    assert judge(row(*three, headline=head)).kind == "holds"
    one_open = three[:2] + [("all", 0.1, -0.1, 0.3, 200, 2)]
    j = judge(row(*one_open, headline=head))
    assert j.kind == "inconclusive" and "seeds differ" in j.reason and "2 support" in j.reason
    # with another condition holding on every seed, the seed-dependent one becomes a condition
    other = [("copy task", 0.5, 0.3, 0.7, 200, s) for s in (0, 1, 2)]
    j = judge(row(*one_open, *other, headline=head))
    assert j.kind == "holds with conditions" and j.holds_under == ("copy task",) and j.open_under == ("all",)


def test_a_required_condition_decides():
    # C10 as issue 16 describes it: the order the claim is about fails; other orders show it
    ms = [("mean order", -0.1, -0.2, -0.02, 98), ("worst-case order", 0.3, 0.1, 0.5, 98),
          ("iterative order", 0.2, 0.05, 0.4, 98)]
    assert judge(row(*ms)).kind == "holds with conditions"  # what the old ledger said
    j = judge(row(*ms, required=("mean order",)))
    assert j.kind == "does not hold here"
    assert "mean order" in j.reason and "worst-case order" in j.reason
    spans = [("mean order", 0.0, -0.2, 0.2, 98)] + ms[1:]
    assert judge(row(*spans, required=("mean order",))).kind == "inconclusive"
    holds = [("mean order", 0.2, 0.1, 0.3, 98)] + ms[1:]
    assert judge(row(*holds, required=("mean order",))).kind == "holds"
    with pytest.raises(ValueError, match="was not measured"):
        row(*ms, required=("median order",))


def test_all_conditions_failing_or_mixed_failure():
    assert judge(row(("a", -1, -2, -0.5, 10), ("b", -1, -2, -0.5, 10))).kind == "does not hold here"
    # one contradicts, one spans, none supports: inconclusive, not "does not hold"
    j = judge(row(("a", -1, -2, -0.5, 10), ("b", 0, -1, 1, 10)))
    assert j.kind == "inconclusive" and j.fails_under == ("a",) and j.open_under == ("b",)
    # one supports, one contradicts: holds with conditions, the other named
    j = judge(row(("a", 1, 0.5, 2, 10), ("b", -1, -2, -0.5, 10)))
    assert j.kind == "holds with conditions" and "b (contradicted)" in j.reason


def test_headline_defaults_and_summary_fields():
    r = row(("all", 0.3, 0.1, 0.5, 82), ("long sentences", 0.2, 0.05, 0.4, 30))
    assert r.headline.condition == "all" and r.n == 82 and r.seeds == ()
    assert r.conditions == ("all", "long sentences")
    with pytest.raises(ValueError, match="headline"):
        row(("all", 0.3, 0.1, 0.5, 82, 0), ("all", 0.3, 0.1, 0.5, 82, 1))
    seeded = row(("all", 0.3, 0.1, 0.5, 82, 2), ("all", 0.3, 0.1, 0.5, 82, 0),
                 headline=Measurement("pooled", 0.3, 0.2, 0.4, 164))
    assert seeded.seeds == (0, 2)


def test_bad_rows_are_refused_with_the_value_named():
    with pytest.raises(ValueError, match="'X4'"):
        ClaimRow("X4", "m", "q", 0.0, "null", "greater", (Measurement("all", 1, 0, 2, 3),))
    with pytest.raises(ValueError, match="'up'"):
        row(("all", 1, 0.5, 2, 3), direction="up")
    with pytest.raises(ValueError, match="at least one measurement"):
        row()
    with pytest.raises(ValueError, match="twice"):
        row(("all", 1, 0.5, 2, 3, 0), ("all", 1, 0.5, 2, 3, 0), headline=Measurement("p", 1, 0, 2, 6))
    with pytest.raises(ValueError, match="mixes"):
        row(("all", 1, 0.5, 2, 3), ("all", 1, 0.5, 2, 3, 0))
    with pytest.raises(ValueError, match="NaN"):
        Measurement("all", 1.0, float("nan"), 2.0, 3)
    with pytest.raises(ValueError, match="reversed"):
        Measurement("all", 1.0, 2.0, 0.0, 3)
    with pytest.raises(ValueError, match="n must be"):
        Measurement("all", 1.0, 0.0, 2.0, 0)


def test_one_sided_intervals_are_allowed():
    r = row(("all", 0.3, 0.1, float("inf"), 50))
    assert judge(r).kind == "holds"
    back = from_json(json.loads(json.dumps(to_json(r))))
    assert back.measurements[0].high == float("inf")


def test_json_round_trip_schema_and_hand_edits():
    r = row(("noun subjects", 0.3, 0.2, 0.4, 40), ("pronoun subjects", 0.0, -0.1, 0.1, 40),
            no_effect=(-0.02, 0.02), note="English set only")
    data = to_json(r)
    assert data["schema_version"] == SCHEMA_VERSION and data["schema"] == "headlab.claim-row"
    assert data["verdict"]["kind"] == "holds with conditions"
    assert data["verdict"]["holds_under"] == ["noun subjects"]
    text = json.dumps(data)
    assert from_json(text) == r
    edited = json.loads(text)
    edited["verdict"]["kind"] = "holds"
    with pytest.raises(ValueError, match="never edited by hand"):
        from_json(edited)
    newer = json.loads(text)
    newer["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="version"):
        from_json(newer)
    with pytest.raises(ValueError, match="not a claim row"):
        from_json({"schema": "something else"})


def test_count_verdicts_and_rule_text():
    rows = [row(("all", 1, 0.5, 2, 3)), row(("all", 1, -0.5, 2, 3)), row(("all", 1, 0.5, 2, 3))]
    assert count_verdicts(rows) == {"holds": 2, "holds with conditions": 0, "inconclusive": 1,
                                    "does not hold here": 0}
    text = rule_text()
    for kind in KINDS:
        assert f"*{kind}*" in text
    assert "every seed" in text and "no-effect band" in text and ".. rubric" not in text


def test_measurement_from_estimate():
    m = Measurement.from_estimate(Estimate(0.1, 0.05, 0.2, 40), "held out", seed=1)
    assert (m.effect, m.low, m.high, m.n, m.seed, m.condition) == (0.1, 0.05, 0.2, 40, 1, "held out")
