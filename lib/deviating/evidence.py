"""What the verdict rule weighs, condition by condition (:mod:`deviating.verdicts` states the rule).

:func:`check` refuses a row the rule cannot judge; :func:`weigh` gives each condition its
p-value, its interval, its Holm-adjusted p-value (over the judged conditions only) and its status:

- ``"holds"``: significant after Holm's correction, and the interval clears the edge of the
  no-effect band on the side the claim predicts (for an equivalence condition: the two one-sided
  tests put the effect inside the band);
- ``"small"``: significant after Holm's correction, but the interval does not clear the band's
  edge: *significant but inside the band*;
- ``"fails"``: not significant, and the interval lies inside the band (no effect), or on the
  other side of the null, or every seed's valid interval contradicts the claim (an equivalence
  condition fails when its interval lies wholly outside the band);
- ``"each"``: held in each network trained, not across seeds (only intervals over at least 20
  items or with degrees of freedom are read seed by seed, and a Clopper-Pearson bound only for
  0/1 outcomes, a quantity of the kind ``"accuracy"``);
- ``"open"``: none of these;
- ``"beside"``: a negative control or a saturated metric, reported beside the row with its own
  unadjusted p-value, never counted.

:func:`refuse_answer_key` refuses a baseline that is the labelling rule itself.
"""

from __future__ import annotations

import math

from scipy import stats as sps

from headlab.stats import holm
from deviating.bands import BANDS, MIN_ITEMS, MIN_SEEDS, across_seeds, equivalence_pvalue, interval_pvalue
from deviating.claim_rows import ClaimRow, Refused

__all__ = ["STATUSES", "check", "weigh", "refuse_answer_key"]

#: What a condition can count as, in the order a deciding condition speaks (worst first).
STATUSES = ("fails", "small", "each", "open", "holds", "beside")


def refuse_answer_key(name: str, accuracy: float, *, labelling_rule: bool = False, claim: str = "",
                      model: str = "") -> None:
    """Refuse a baseline that is the answer key.

    A baseline whose accuracy on the gold labels is 1.0, or that is the rule that made the gold
    labels, can never be beaten: a head's lead over it is no evidence about the head.

    Raises:
        Refused: naming the baseline and its accuracy, and saying what to compare with instead.
    """
    where = f"{claim} on {model}: " if claim or model else ""
    if labelling_rule:
        raise Refused(f"{where}the baseline {name!r} is the rule that made the gold labels (accuracy "
                      f"{accuracy:.3f}); no head can lead it. Compare with the contrast the claim names "
                      "(for C4, the best fixed offset) and show this baseline beside the row")
    if accuracy >= 1.0:
        raise Refused(f"{where}the baseline {name!r} scores 1.000 on the gold labels: it is the answer key, and "
                      "no head can lead it. Compare with the contrast the claim names instead")


def check(row: ClaimRow) -> None:
    """Raise ``Refused`` (``deviating.claim_rows.Refused``) when the row cannot meet the rule: a zero-width interval, conditions
    on different seeds, fewer than :data:`deviating.bands.MIN_SEEDS` training seeds, few items
    with no degrees of freedom, or an undeclared kind of quantity."""
    for m in row.measurements:  # the headline is shown, not judged
        if m.low == m.high:
            seed = "" if m.seed is None else f", seed {m.seed}"
            raise Refused(f"{row.claim} on {row.model}: {m.condition!r}{seed} has a zero-width interval "
                          f"[{m.low:g}, {m.high:g}] (n = {m.n}); give the item-level interval, or an exact "
                          "bound (Clopper-Pearson, headlab.stats.proportion) for 0/1 outcomes only; a difference "
                          "that is zero by construction (a head compared with itself) is no measurement: drop it")
    seeds = {c: tuple(sorted(m.seed for m in ms if m.seed is not None)) for c, ms in row.by_condition.items()}
    if len(set(seeds.values())) > 1:
        most = max(seeds.values(), key=len)
        c, few = min(seeds.items(), key=lambda kv: len(kv[1]))
        raise Refused(f"{row.claim} on {row.model}: condition {c!r} was measured on "
                      f"{_seed_words(few)}, other conditions on {_seed_words(most)}; measure every condition "
                      "on the same seeds")
    if row.seeds and len(row.seeds) < MIN_SEEDS:
        raise Refused(f"{row.claim} on {row.model}: {_seed_words(row.seeds)}; a claim about what training "
                      f"produces is judged over at least {MIN_SEEDS} training seeds")
    for m in row.measurements:
        if m.seed is None and m.df is None and m.n < MIN_ITEMS:
            raise Refused(f"{row.claim} on {row.model}: {m.condition!r} rests on n = {m.n} with no degrees of "
                          f"freedom; a t interval over {m.n} seeds or students has df = {m.n - 1} "
                          "(Measurement(df=...)), or store one measurement per numbered seed")
    for c in row.conditions:
        row.unit_for(c)  # raises Refused for an undeclared kind


def _seed_words(seeds: tuple[int, ...]) -> str:
    if not seeds:
        return "no numbered seed"
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def _one(row: ClaimRow, c: str) -> dict:
    ms = row.by_condition[c]
    lo_b, hi_b = row.band_for(c)
    w = BANDS[row.unit_for(c)]
    equiv = c in row.equivalence
    greater = row.direction == "greater"
    states = [m.status(row.null, row.direction, (lo_b, hi_b)) for m in ms]
    binary = row.unit_for(c) == "accuracy"  # 0/1 outcomes: the only data an exact bound is for
    valid = [(m.df is not None or m.n >= MIN_ITEMS) and (binary or not _exact_tie(m, row.level))
             for m in ms]  # item intervals that can be read
    item_p = [interval_pvalue(m.effect, m.low, m.high, row.null, row.direction, row.level, m.df) for m in ms]
    across = len(ms) >= 2
    if across:
        values = [m.effect for m in ms]
        est, test = across_seeds(values, row.null, row.direction, row.level)
        effect, low, high, n, df = est.value, est.low, est.high, est.n, est.n - 1
        per, how = f"{n} seeds", test.method
        p = equivalence_pvalue((lo_b, hi_b), values=values) if equiv else test.pvalue
    else:
        m = ms[0]
        effect, low, high, n, df = m.effect, m.low, m.high, m.n, m.df
        per = f"{m.n} {row.items}" + ("" if m.seed is None else f", seed {m.seed} only")
        how = "normal reading of the interval" if df is None else f"t({df:g}) reading of the interval"
        p = (equivalence_pvalue((lo_b, hi_b), interval=(effect, low, high), level=row.level, df=df) if equiv
             else item_p[0])
    identical = across and len({m.effect for m in ms}) == 1  # one measurement: read its items
    if identical:
        inside = all(lo_b <= m.low and m.high <= hi_b for m in ms)
        against = all(v and s == "contradicts" for v, s in zip(valid, states))
        clears = all(v and (m.low > hi_b if greater else m.high < lo_b) for v, m in zip(valid, ms))
        outside = all(v and (m.low > hi_b or m.high < lo_b) for v, m in zip(valid, ms))
    else:
        inside = lo_b <= low and high <= hi_b
        against = high < row.null if greater else low > row.null
        clears = low > row.null + w if greater else high < row.null - w
        outside = low > hi_b or high < lo_b
    excludes = low > row.null if greater else high < row.null  # p < alpha says the same, up to rounding
    every_seed_against = across and all(v and s == "contradicts" for v, s in zip(valid, states))
    fail_why = ("outside the band" if equiv else "inside the band" if inside else
                "contradicted across seeds" if against and across and not identical else
                "contradicted on every seed" if across else "contradicted")
    return {"condition": c, "unit": row.unit_for(c), "band": [lo_b, hi_b], "effect": effect, "low": low,
            "high": high, "n": n, "df": df, "per": per, "test": "equivalence (TOST), " + how if equiv else how,
            "p": float(p), "role": _role(row, c), "states": states, "valid": valid, "item_p": item_p,
            "across": across, "inside": inside, "against": against or every_seed_against, "clears": clears,
            "outside": outside, "equivalence": equiv, "excludes": excludes, "fail_why": fail_why}


def _exact_tie(m, level: float) -> bool:
    """Whether a measurement is an exact tie carrying the Clopper-Pearson bound for 0 events of n."""
    if m.effect != 0 or m.low > 0 or m.high <= 0:
        return False
    bound = float(sps.beta.ppf(1 - (1 - level) / 2, 1, m.n))  # upper end for 0 of n
    return math.isclose(m.high, bound, rel_tol=1e-6) and m.low in (0.0, -m.high)


def _role(row: ClaimRow, c: str) -> str:
    if c in row.beside:
        return f"beside: {row.beside[c]}"
    return "primary" if c == row.primary else "required" if c in row.required else "judged"


def _status(e: dict, p: float, alpha: float, each: bool) -> str:
    if e["equivalence"]:
        return "holds" if p < alpha else "fails" if e["outside"] else "open"
    if p < alpha and e["excludes"]:
        return "holds" if e["clears"] else "small"
    if e["inside"] or e["against"]:
        return "fails"
    return "each" if each else "open"


def weigh(row: ClaimRow) -> list[dict]:
    """Every condition's evidence and status, judged conditions first corrected with Holm's step-down.

    Each dict has ``condition``, ``role`` (``"primary"``, ``"required"``, ``"judged"`` or
    ``"beside: why"``), ``unit``, ``band``, ``effect``, ``low``, ``high``, ``n``, ``df``, ``per``,
    ``test``, ``p``, ``p_holm`` (None beside the row) and ``status`` (one of :data:`STATUSES`).
    """
    check(row)
    alpha = (1 - row.level) / 2
    out = [_one(row, c) for c in row.conditions]
    judged = [e for e in out if not e["role"].startswith("beside")]
    for e, adj in zip(judged, holm([e["p"] for e in judged])):
        e["p_holm"] = float(adj)
    items = [p for e in judged for p in e["item_p"]]
    adj_items = iter(holm(items)) if items else iter(())
    trained = bool(row.seeds)
    for e in judged:
        item_ok = [next(adj_items) < alpha and s == "supports" and v
                   for s, v in zip(e["states"], e["valid"])]
        each = trained and e["across"] and all(item_ok) and not e["equivalence"]
        e["status"] = _status(e, e["p_holm"], alpha, each)
    for e in out:
        if e["role"].startswith("beside"):
            e["p_holm"] = None
            e["beside_status"] = _status(e, e["p"], alpha, False)
            e["status"] = "beside"
    return out
