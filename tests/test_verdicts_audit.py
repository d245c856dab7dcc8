"""The second audit of the ledger (issue 38): each fix has a test that fails on the old behaviour.

- a baseline that is the answer key (the gold rule) is refused;
- a row over 5 seeds without seed numbers gets a t p-value, not a normal one;
- a blind inspector can pass an equivalence test of "unseen";
- a negative control, reported beside the row, does not dilute Holm's correction;
- "holds" needs the interval to clear the band; a claim about training needs 3 seeds;
- the ledger-wide Benjamini-Hochberg column is scipy's.
"""

from __future__ import annotations

import json
from importlib.resources import files

import numpy as np
import pytest
from scipy import stats as sps

from headlab.stats import Estimate, over_seeds
from deviating.bands import equivalence_pvalue, interval_pvalue
from deviating.evidence import refuse_answer_key, weigh
from deviating.experiments.syntactic_rows import BROWN_LABELLING_RULES, OFFSET, c4_row, c14_row
from deviating.experiments.what_breaks_rows import c12_students_row
from deviating.verdicts import ClaimRow, Measurement, Refused, judge, verdict


def est(value, low, high, n=100):
    return Estimate(value, low, high, n)


def test_a_baseline_that_is_the_answer_key_is_refused():
    with pytest.raises(Refused, match="'nearest determiner' scores 1.000 on the gold labels"):
        refuse_answer_key("nearest determiner", 1.0)
    with pytest.raises(Refused, match="is the rule that made the gold labels"):
        refuse_answer_key("nearest determiner", 0.93, labelling_rule=True)
    refuse_answer_key("nearest noun", 0.62)  # an ordinary baseline passes
    # Brown, as stored before: the nearest word of the key's class scores 1.000, so every lead over it
    # is negative; the old row judged against it ("does not hold here"). Now it is refused, and the
    # row is judged against the best fixed offset, the contrast the claim names.
    cells = {("noun->determiner", s): {"nearest determiner": (est(1.0, 1.0, 1.0), est(-0.7, -0.8, -0.6)),
                                       OFFSET: (est(0.4, 0.35, 0.45), est(0.29 + 0.01 * s, 0.2, 0.38))}
             for s in (0, 1, 2)}
    r = c4_row("brown-gpt, 3 training seeds", cells, labelling_rules=BROWN_LABELLING_RULES)
    assert r.conditions == ("noun->determiner",) and "refused baselines: the nearest determiner" in r.note
    assert judge(r).kind == "holds"
    # the best fixed offset itself being the answer key refuses the row
    bad = {k: {OFFSET: (est(1.0, 1.0, 1.0), v[OFFSET][1])} for k, v in cells.items()}
    with pytest.raises(Refused, match="'best fixed offset' scores 1.000"):
        c4_row("m", bad)
    # an admissible content baseline is shown beside the row, not counted
    mini = {("pronoun->antecedent (1.3)", None): {"nearest preceding mention": (est(0.7, 0.6, 0.8),
                                                                                est(-0.04, -0.13, 0.05)),
                                                 OFFSET: (est(0.2, 0.1, 0.3), est(0.48, 0.39, 0.56))}}
    r = c4_row("MiniLM, English set, measure sentences", mini)
    j = judge(r)
    assert j.kind == "holds" and j.tested == 1
    assert list(r.beside) == ["pronoun->antecedent (1.3), lead over the nearest preceding mention"]


def test_c14_asks_whether_the_role_recurs_at_three_seeds():
    cells = {(role, s): {OFFSET: (est(0.3, 0.25, 0.35), est(0.4 + 0.02 * s, 0.3, 0.5)),
                         "nearest noun": (est(0.5, 0.45, 0.55), est(0.2 + 0.01 * s, 0.1, 0.3))}
             for role in ("subject", "copy") for s in (0, 1, 2)}
    r = c14_row("organism, 3 seeds", cells)
    assert r.required == ("subject role", "copy role")
    # the lead over the strongest baseline (the nearest noun here), not the weaker one
    assert [m.effect for m in r.by_condition["subject role"]] == pytest.approx([0.2, 0.21, 0.22])
    assert judge(r).kind == "holds"
    two = {k: v for k, v in cells.items() if k[1] != 0}
    assert verdict(c14_row("organism, 2 seeds", two)).kind == "cannot be judged"
    assert "at least 3 training seeds" in verdict(c14_row("organism, 2 seeds", two)).reason


def test_a_five_seed_row_without_seed_numbers_gets_a_t_p_value():
    distillation = json.loads((files("deviating") / "results" / "distillation.json").read_text())
    r = c12_students_row(distillation)
    loss = r.measurements[0]
    assert loss.n == 5 and loss.df == 4
    p = judge(r).conditions[0]["p"]
    # the one-sided t(4) test over the five seeds' differences, computed by scipy
    runs = distillation["runs"]
    diffs = [next(q["metrics"]["val_loss"] for q in runs if q["target"] == "mean" and q["seed"] == s)
             - next(q["metrics"]["val_loss"] for q in runs if q["target"] == "per_head" and q["seed"] == s)
             for s in range(5)]
    assert p == pytest.approx(sps.ttest_1samp(diffs, 0.0, alternative="greater").pvalue, rel=1e-6)
    assert p > 1e-7  # the old normal reading gave 4.9e-194
    z = interval_pvalue(loss.effect, loss.low, loss.high, 0.0, "greater")
    assert z < 1e-100
    # without its degrees of freedom, a five-item interval is refused, not read with the normal
    bare = ClaimRow("C12", "students", "loss", 0.0, "equal", "greater",
                    (Measurement(loss.condition, loss.effect, loss.low, loss.high, 5),), unit="nats")
    with pytest.raises(Refused, match="no degrees of freedom"):
        judge(bare)


def test_a_blind_inspector_can_pass_an_equivalence_test():
    # the layer mean's AUC minus 0.5, per seed: a blind inspector sits at chance with a narrow interval
    blind = [Measurement("unseen: AUC minus 0.5", e, e - 0.02, e + 0.02, 256, s)
             for s, e in zip((0, 1, 2), (0.002, -0.003, 0.001))]
    r = ClaimRow("C13", "organism", "the layer mean's AUC minus chance", 0.0, "chance", "greater", tuple(blind),
                 unit="auc", equivalence=("unseen: AUC minus 0.5",))
    j = judge(r)
    assert j.kind == "holds", j.reason
    # the two one-sided t tests against the band's edges, by scipy
    x = [0.002, -0.003, 0.001]
    tost = max(sps.ttest_1samp(x, -0.05, alternative="greater").pvalue,
               sps.ttest_1samp(x, 0.05, alternative="less").pvalue)
    assert j.conditions[0]["p"] == pytest.approx(tost)
    # the old coding, 0.51 - AUC > 0 one-sided with a +-0.01 band, could never hold for this inspector
    old = ClaimRow("C13", "organism", "0.51 minus AUC", 0.0, "edge", "greater",
                   tuple(Measurement("unseen", 0.01 - m.effect, 0.01 - m.high, 0.01 - m.low, 256, m.seed)
                         for m in blind), unit="accuracy")
    assert judge(old).kind != "holds"
    # an inspector that sees the trigger (AUC 0.7) fails the equivalence: outside the band
    seen = [Measurement("unseen: AUC minus 0.5", e, e - 0.05, e + 0.05, 256, s)
            for s, e in zip((0, 1, 2), (0.2, 0.22, 0.19))]
    r2 = ClaimRow("C13", "organism", "AUC minus chance", 0.0, "chance", "greater", tuple(seen), unit="auc",
                  equivalence=("unseen: AUC minus 0.5",))
    assert judge(r2).kind == "does not hold here" and "outside the band" in judge(r2).reason
    # from one interval: inside the edges exactly when p < 0.025
    assert equivalence_pvalue((-0.05, 0.05), interval=(0.0, -0.04, 0.04)) < 0.025
    assert equivalence_pvalue((-0.05, 0.05), interval=(0.0, -0.06, 0.06)) > 0.025


def test_a_negative_control_does_not_dilute_holm():
    # one condition at p = 0.02, alone it holds
    z = sps.norm.isf(0.02)
    lead = ("cosine", 0.5, 0.5 - 0.5 * 1.96 / z, 0.5 + 0.5 * 1.96 / z, 64)
    control = ("retrieval (saturated)", 1e-4, 5e-5, 4e-4, 64)
    counted = ClaimRow("C7", "MiniLM", "effect", 0.0, "mean head", "greater",
                       tuple(Measurement(*m) for m in (lead, control)), unit="cosine", units={control[0]: "nats"})
    beside = ClaimRow("C7", "MiniLM", "effect", 0.0, "mean head", "greater",
                      tuple(Measurement(*m) for m in (lead, control)), unit="cosine", units={control[0]: "nats"},
                      beside={control[0]: "a saturated metric"})
    old, new = judge(counted), judge(beside)
    assert old.kind == "holds with conditions" and old.tested == 2  # the saturated metric counted against it
    assert new.kind == "holds" and new.tested == 1 and new.held == 1
    c = {e["condition"]: e for e in new.conditions}
    assert c[control[0]]["status"] == "beside" and c[control[0]]["p_holm"] is None
    assert c["cosine"]["p_holm"] == pytest.approx(0.02, rel=1e-3)  # Holm over one condition: unchanged
    with pytest.raises(ValueError, match="cannot also be reported beside"):
        ClaimRow("C7", "m", "e", 0.0, "n", "greater", (Measurement(*lead), Measurement(*control)), unit="cosine",
                 primary="cosine", beside={"cosine": "control"})
    with pytest.raises(ValueError, match="every condition is reported beside"):
        ClaimRow("C7", "m", "e", 0.0, "n", "greater", (Measurement(*lead),), unit="cosine",
                 beside={"cosine": "control"})


def test_holds_needs_the_interval_to_clear_the_band_and_three_seeds():
    # C16's d_head 4: +0.012 [0.0067, 0.0169] nats over 5 seeds, significant, not clear of the 0.01 band
    seeds = (0.010, 0.0135, 0.012, 0.0105, 0.013)
    r = ClaimRow("C16", "GPTs", "loss", 0.0, "widest", "greater",
                 tuple(Measurement("d_head 4", e, e - 0.004, e + 0.004, 64, s) for s, e in enumerate(seeds)),
                 unit="nats")
    t = over_seeds(seeds)
    assert t.low < 0.01 < t.high and sps.ttest_1samp(seeds, 0, alternative="greater").pvalue < 0.025
    assert judge(r).kind == "significant but inside the band"
    two = ClaimRow("C14", "organism", "lead", 0.0, "baseline", "greater",
                   tuple(Measurement("role", e, e - 0.1, e + 0.1, 60, s) for s, e in ((1, 0.5), (2, 0.6))),
                   unit="accuracy")
    assert "at least 3 training seeds" in verdict(two).reason


def test_the_ledger_wide_benjamini_hochberg_column_is_scipys():
    from deviating.ledger import load_all, summary
    from deviating.ledger_page import ledger_bh, reasoning_markdown

    ledger = load_all()
    bh = ledger_bh(ledger)
    raw = [c["p"] for rows in ledger.values() for entry in rows for c in summary(entry)["judgement"].conditions
           if c["status"] != "beside"]
    assert len(bh) == len(raw) > 100
    assert list(bh.values()) == pytest.approx(list(sps.false_discovery_control(raw, method="bh")))
    assert "p (BH, ledger)" in reasoning_markdown(ledger)


def test_weigh_reports_every_condition_with_its_role_and_test():
    r = ClaimRow("C5", "m", "lift", 0.0, "none", "greater",
                 tuple(Measurement(c, e, e - 0.1, e + 0.1, 64, s) for c in ("a", "b", "control")
                       for s, e in zip((0, 1, 2), (0.4, 0.5, 0.45))),
                 unit="share", primary="b", required=("a",), beside={"control": "negative control"})
    ev = {e["condition"]: e for e in weigh(r)}
    assert (ev["a"]["role"], ev["b"]["role"], ev["control"]["role"]) == ("required", "primary",
                                                                         "beside: negative control")
    assert ev["b"]["test"] == "t test over 3 seeds" and ev["b"]["df"] == 2
    assert ev["b"]["p"] == pytest.approx(sps.ttest_1samp([0.4, 0.5, 0.45], 0, alternative="greater").pvalue)
    assert np.isclose(ev["a"]["p_holm"], min(1.0, 2 * ev["a"]["p"]))


def test_every_verdict_the_audit_changed_says_why():
    from deviating.ledger import load_all
    from deviating.ledger_page import audit_changes, audit_markdown

    ledger = load_all()
    audit = json.loads((files("deviating") / "results" / "ledger_audit.json").read_text())
    changed = audit_changes(ledger, audit)
    assert changed, "the audit changed verdicts; the table must list them"
    for c in changed:
        assert c["why"], f"{c['chapter']} {c['claim']} {c['model']}: {c['before']} -> {c['now']} without a reason"
    reasons = {(r["chapter"], r["claim"], r["model"]) for r in audit["rows"] if r["why"]}
    assert reasons == {(c["chapter"], c["claim"], c["model"]) for c in changed}, "a reason for an unchanged verdict"
    assert any(c["now"] == "removed" for c in changed)  # C15's feature count left the ledger
    table = audit_markdown(ledger, audit)
    assert table.count("\n") == len(changed) + 1


def test_a_clopper_pearson_tie_bound_is_read_only_for_0_1_outcomes():
    # C20's structural zeros: a head compared with itself gives 0 with the exact bound for 0 of n;
    # that bound is for 0/1 outcomes (kind "accuracy"), not for shares of a margin
    u = float(sps.beta.ppf(0.975, 1, 2048))  # Clopper-Pearson upper end, 0 events of 2048
    ms = (Measurement("own vs other head", 0.0, -u, u, 2048, 0), Measurement("own vs other head", 0.0, -u, u, 2048, 1),
          Measurement("own vs other head", -0.5, -0.6, -0.4, 64, 2))

    def kind_of(unit):
        return judge(ClaimRow("C20", "organism", "difference", 0.0, "another task's head", "greater", ms,
                              unit=unit)).kind

    assert kind_of("accuracy") == "does not hold here"  # every seed's interval contradicts the claim
    assert kind_of("share") == "inconclusive"  # the two tie bounds are not read: no seed-by-seed verdict
