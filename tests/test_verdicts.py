"""The verdict rule of deviating.verdicts (issues 27 and 38): seeds as the unit, Holm across the judged
conditions, one band table with declared kinds, clear-the-band, the primary endpoint, conditions beside the
row, equivalence tests, refusals; every kind, every edge case, the JSON form."""

from __future__ import annotations

import json

import pytest

import numpy as np
from scipy.stats import norm as stats_norm

from headlab.stats import Estimate, over_seeds, paired_difference
from deviating.bands import BANDS, UNITS, across_seeds, band
from deviating.verdicts import (
    KINDS,
    Refused,
    SCHEMA_VERSION,
    ClaimRow,
    Measurement,
    count_verdicts,
    from_json,
    judge,
    rule_text,
    to_json,
    verdict,
)


def row(*measurements, direction="greater", null=0.0, **kw) -> ClaimRow:
    ms = tuple(Measurement(*m) if isinstance(m, tuple) else m for m in measurements)
    kw.setdefault("unit", "accuracy")
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
    # significant, but the interval does not clear the band's edge (0.01): its own outcome
    assert judge(row(("all", 0.1, 1e-12, 0.2, 30))).kind == "significant but inside the band"
    assert judge(row(("all", 0.1, 0.0101, 0.2, 30))).kind == "holds"


def test_the_null_need_not_be_zero():
    # accuracy 0.62 against a chance rate of 0.5
    assert judge(row(("all", 0.62, 0.55, 0.69, 100), null=0.5)).kind == "holds"
    assert judge(row(("all", 0.62, 0.45, 0.69, 100), null=0.5)).kind == "inconclusive"


def test_no_effect_band_comes_from_the_one_table_for_the_declared_kind():
    assert set(BANDS) == set(UNITS) == {"nats", "accuracy", "auc", "share", "cosine", "rank", "count", "ratio"}
    w = BANDS["accuracy"]
    # inside the table's band and not significant: no effect
    tiny = row(("all", w / 4, -w / 4, 3 * w / 4, 100))
    assert tiny.no_effect == (-w, w) and judge(tiny).kind == "does not hold here"
    # significant but inside the band: reported as its own outcome, not as "no effect"
    small = row(("all", w / 2, w / 4, 3 * w / 4, 5000))
    assert judge(small).kind == "significant but inside the band"
    assert judge(small).small_under == ("all",)
    # an interval clearing the band's edge on the claimed side holds
    assert judge(row(("all", 0.06, 0.015, 0.11, 500))).kind == "holds"
    # the band a row may state is the table's, nothing else
    assert row(("all", 0.06, 0.005, 0.11, 500), no_effect=(-w, w)).no_effect == (-w, w)
    with pytest.raises(ValueError, match="band table"):
        row(("all", 0.0, -0.1, 0.1, 100), no_effect=(-0.05, 0.05))
    # every kind reads its band from the same table; the kind is declared, never read from the wording
    for kind in UNITS:
        r = ClaimRow("C8", "m", "Gini of mean effects", 0.5, "null", "greater",
                     (Measurement("all", 0.6, 0.55, 0.65, 90),), unit=kind)
        assert r.unit_for("all") == kind and r.no_effect == band(kind, 0.5)
    mixed = ClaimRow("C5", "m", "lift; loss", 0.0, "none", "greater",
                     (Measurement("lift", 0.3, 0.2, 0.4, 90), Measurement("loss", 0.3, 0.2, 0.4, 90)),
                     unit="share", units={"loss": "nats"})
    assert (mixed.unit_for("lift"), mixed.unit_for("loss")) == ("share", "nats")


def test_a_condition_with_no_declared_kind_is_refused():
    # the old rule guessed "nats" from the word "loss"; the new one asks
    r = ClaimRow("C8", "m", "validation loss (nats)", 0.0, "null", "greater", (Measurement("all", 0.6, 0.5, 0.7, 90),))
    with pytest.raises(Refused, match="declares no kind of quantity"):
        judge(r)
    assert verdict(r).kind == "cannot be judged"
    with pytest.raises(ValueError, match="unknown unit"):
        row(("all", 0.1, 0.0, 0.2, 90), unit="furlongs")


def test_an_across_seed_interval_that_spans_the_null_cannot_hold():
    # chapter 9's C5: three seeds each far above 0 on their items, but 0.51, 0.21, 0.23 over seeds
    seeds = [("zero ablation", e, e - 0.02, e + 0.02, 128, s) for s, e in zip((0, 1, 2), (0.51, 0.21, 0.23))]
    head = Measurement.from_estimate(over_seeds([0.51, 0.21, 0.23]), "over seeds")
    r = row(*seeds, headline=head)
    assert head.low < 0 and judge(r).kind == "held in each network trained"
    assert "holds in 0 of 1 conditions" in judge(r).reason
    # the same three seeds, close together: the t test over seeds excludes the null
    close = [("zero ablation", e, e - 0.02, e + 0.02, 128, s) for s, e in zip((0, 1, 2), (0.50, 0.52, 0.51))]
    assert judge(row(*close, headline=head)).kind == "holds"
    # identical seeds are one measurement: the exact sign test gives p = 0.125, not "holds"
    same = [("all", 0.3, 0.2, 0.4, 64, s) for s in (0, 1, 2)]
    assert judge(row(*same, headline=Measurement("pooled", 0.3, 0.25, 0.35, 3))).kind == \
        "held in each network trained"
    _, test = across_seeds([0.3, 0.3, 0.3], 0.0, "greater")
    assert test.pvalue == pytest.approx(0.125) and "sign test" in test.method
    # one seed that spans the null: not held in each network either
    one_open = close[:2] + [("zero ablation", 0.1, -0.1, 0.3, 128, 2)]
    assert judge(row(*one_open, headline=head)).kind in ("holds", "inconclusive")
    assert judge(row(*seeds[:2], ("zero ablation", 0.1, -0.1, 0.3, 128, 2), headline=head)).kind == "inconclusive"


def test_an_across_seed_interval_on_the_wrong_side_of_the_null_fails():
    # C10 with the pooled tail: gaps of -2, -4, -4 heads, each seed's interval touching 0
    seeds = [("mean order", e, e - 4, 0.0 if e < -2 else 2.0, 96, s) for s, e in zip((0, 1, 2), (-2.0, -4.0, -4.0))]
    r = ClaimRow("C10", "organism", "heads removed by which the pooled tail fails before the mean loss", 0.0,
                 "tail and loss fail together", "greater", tuple(Measurement(*m) for m in seeds), unit="count",
                 headline=Measurement.from_estimate(over_seeds([-2.0, -4.0, -4.0]), "over seeds"))
    assert not all(m.status(0.0, "greater") == "contradicts" for m in r.measurements)  # no seed alone says so
    j = judge(r)
    assert r.headline.high < 0 and j.kind == "does not hold here"
    assert "contradicted across seeds" in j.reason
    # the same spread straddling the null stays open
    mixed = [("mean order", e, e - 4, e + 4, 96, s) for s, e in zip((0, 1, 2), (-2.0, 2.0, 0.0))]
    assert judge(row(*mixed, headline=Measurement("over seeds", 0.0, -5.0, 5.0, 3))).kind == "inconclusive"


def test_a_condition_that_survives_only_without_the_correction_does_not_count():
    # p = 0.02 on one condition: below 0.025 alone, not after Holm over ten conditions
    z = stats_norm.isf(0.02)
    lone = ("ablation A", 1.0, 1.0 - 1.96 / z, 1.0 + 1.96 / z, 100)
    others = [(f"ablation {k}", 0.0, -0.5, 0.5, 100) for k in "BCDEFGHIJ"]
    assert judge(row(lone)).kind == "holds"  # on its own it holds
    j = judge(row(lone, *others))
    assert j.kind == "inconclusive" and j.held == 0 and j.tested == 10
    assert "holds in 0 of 10 conditions" in j.reason
    strong = ("ablation A", 1.0, 0.5, 1.5, 100)  # p about 4e-5: survives the correction
    j = judge(row(strong, *others))
    assert j.kind == "holds with conditions" and j.held == 1 and "holds in 1 of 10 conditions" in j.reason


def test_a_zero_width_interval_is_refused():
    with pytest.raises(Refused, match="zero-width"):
        judge(row(("all", 0.0, 0.0, 0.0, 216)))
    j = verdict(row(("all", 0.0, 0.0, 0.0, 216)))
    assert j.kind == "cannot be judged" and "zero-width" in j.reason
    # an exact tie of 0/1 outcomes gets its exact bound instead, and can then be judged
    tie = paired_difference(np.ones(216), np.ones(216))
    assert tie.low == pytest.approx(-(1 - 0.025 ** (1 / 216))) and tie.high == -tie.low
    # 0 +- 0.017 is wider than the +-0.01 band: 216 sentences cannot tell "no lead" from a small one
    assert judge(row(Measurement.from_estimate(tie, "all"))).kind == "inconclusive"
    big = paired_difference(np.ones(2048), np.ones(2048))  # +- 0.0018: inside the band
    assert judge(row(Measurement.from_estimate(big, "all"))).kind == "does not hold here"
    # a row with a refused condition still loads from JSON (the ledger shows the refusal)
    back = from_json(json.dumps(to_json(row(("all", 0.0, 0.0, 0.0, 216)))))
    assert verdict(back).kind == "cannot be judged"


def test_a_condition_on_fewer_seeds_than_the_others_is_refused():
    three = [("all windows", 0.5, 0.3, 0.7, 96, s) for s in (0, 1, 2)]
    seed0 = [("mean ablation", 0.5, 0.3, 0.7, 96, 0)]
    head = Measurement("pooled", 0.5, 0.4, 0.6, 3)
    with pytest.raises(Refused, match="'mean ablation' was measured on seed 0, other conditions on seeds 0, 1, 2"):
        judge(row(*three, *seed0, headline=head))
    assert verdict(row(*three, *seed0, headline=head)).kind == "cannot be judged"


def test_a_required_condition_decides():
    # C10 as issue 16 describes it: the order the claim is about fails; other orders show it
    ms = [("mean order", -0.1, -0.2, -0.02, 98), ("worst-case order", 0.3, 0.1, 0.5, 98),
          ("iterative order", 0.2, 0.05, 0.4, 98)]
    # what the old ledger said, and what a row whose primary endpoint is another order says
    assert judge(row(*ms, primary="worst-case order")).kind == "holds with conditions"
    assert judge(row(*ms)).kind == "does not hold here"  # the first condition is the primary endpoint
    j = judge(row(*ms, required=("mean order",)))
    assert j.kind == "does not hold here"
    assert "mean order" in j.reason and "holds in 2 of 3 conditions" in j.reason
    assert judge(row(*ms, required=("mean order",))).kind == "does not hold here"
    spans = [("mean order", 0.0, -0.2, 0.2, 98)] + ms[1:]
    assert judge(row(*spans, required=("mean order",))).kind == "inconclusive"
    holds = [("mean order", 0.2, 0.1, 0.3, 98)] + ms[1:]
    assert judge(row(*holds, required=("mean order",))).kind == "holds"
    with pytest.raises(ValueError, match="was not measured"):
        row(*ms, required=("median order",))


def test_a_contradicted_required_condition_speaks_before_an_open_one():
    # C13: "hijacks" is open, "unseen by the mean" is contradicted; the claim as worded does not hold
    ms = [("hijack", 0.05, -0.02, 0.12, 256), ("unseen", -0.2, -0.25, -0.15, 256), ("other", 0.3, 0.1, 0.5, 256)]
    j = judge(row(*ms, required=("hijack", "unseen")))
    assert j.kind == "does not hold here" and "unseen" in j.reason
    assert judge(row(*ms, required=("hijack",))).kind == "inconclusive"  # the open one alone: open


def test_all_conditions_failing_or_mixed_failure():
    assert judge(row(("a", -1, -2, -0.5, 30), ("b", -1, -2, -0.5, 30))).kind == "does not hold here"
    # one contradicts, one spans, none supports: the primary endpoint decides
    j = judge(row(("a", -1, -2, -0.5, 30), ("b", 0, -1, 1, 30), primary="b"))
    assert j.kind == "inconclusive" and j.fails_under == ("a",) and j.open_under == ("b",)
    assert judge(row(("a", -1, -2, -0.5, 30), ("b", 0, -1, 1, 30))).kind == "does not hold here"
    # one supports, one contradicts: holds with conditions, the other named
    j = judge(row(("a", 1, 0.5, 2, 30), ("b", -1, -2, -0.5, 30)))
    assert j.kind == "holds with conditions" and "b (contradicted)" in j.reason


def test_headline_defaults_and_summary_fields():
    r = row(("all", 0.3, 0.1, 0.5, 82), ("long sentences", 0.2, 0.05, 0.4, 30))
    assert r.headline.condition == "all" and r.n == 82 and r.seeds == ()
    assert r.conditions == ("all", "long sentences")
    # over seeds, the headline is the primary endpoint's mean with its t interval (df = seeds - 1)
    over = row(("all", 0.3, 0.1, 0.5, 82, 0), ("all", 0.5, 0.3, 0.7, 82, 1), ("all", 0.4, 0.2, 0.6, 82, 2)).headline
    t = over_seeds([0.3, 0.5, 0.4])
    assert (over.effect, over.low, over.high, over.df) == (pytest.approx(0.4), t.low, t.high, 2)
    with pytest.raises(ValueError, match="primary endpoint 'median'"):
        row(("all", 0.3, 0.1, 0.5, 82), primary="median")
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
            note="English set only")
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
    rows = [row(("all", 1, 0.5, 2, 30)), row(("all", 1, -0.5, 2, 30)), row(("all", 1, 0.5, 2, 30)),
            row(("all", 1, 0.5, 2, 3))]
    assert count_verdicts(rows) == {"holds": 2, "holds with conditions": 0, "held in each network trained": 0,
                                    "significant but inside the band": 0, "inconclusive": 1,
                                    "does not hold here": 0, "cannot be judged": 1}
    text = rule_text()
    for kind in KINDS:
        assert f"*{kind}*" in text
    assert "Holm" in text and "no-effect band" in text and "Worked example" in text and ".. rubric" not in text


def test_measurement_from_estimate():
    m = Measurement.from_estimate(Estimate(0.1, 0.05, 0.2, 40), "held out", seed=1)
    assert (m.effect, m.low, m.high, m.n, m.seed, m.condition) == (0.1, 0.05, 0.2, 40, 1, "held out")


def test_the_worked_example_is_the_stored_row():
    """The rule's worked example (chapter 7's C10 on the organism, like for like) quotes the stored row."""
    from importlib.resources import files

    rows = json.loads((files("deviating") / "results" / "claims" / "ch07.json").read_text())["rows"]
    stored = next(r for r in rows if r["claim"] == "C10" and r["model"].startswith("organism"))
    r = from_json(stored)
    assert r.primary == "agreement, attractor vs all agreement, mean order, zero ablation, tolerance 0.05"
    named = r.by_condition[r.primary]
    assert [m.effect for m in named] == [2, 2, 2] and all(m.low <= 0 for m in named)
    _, test = across_seeds([m.effect for m in named], 0.0, "greater")
    assert test.pvalue == pytest.approx(0.125) and "sign test" in test.method
    j = judge(r)
    assert j.kind == "inconclusive" and j.reason.startswith("the primary endpoint does not hold")
    text = rule_text()
    assert "p = 0.125" in text and "*inconclusive*" in text
