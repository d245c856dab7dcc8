"""One verdict rule for every claim of the book, applied to numbers, never typed by hand.

A :class:`ClaimRow` carries what a claim was measured as: per condition tested and per
training seed, an effect with its 95% interval and ``n``; the null or baseline it is compared
with, and the direction the claim predicts. :func:`judge` turns those numbers into the verdict::

    from headlab import stats
    from deviating.verdicts import ClaimRow, Measurement, judge, to_json

    lead = stats.paired_difference(head_right, nearest_right)  # 0/1 per held-out item
    row = ClaimRow("C4", "MiniLM, English set, held out", "accuracy lead over the nearest mention",
                   null=0.0, null_label="nearest-mention baseline", direction="greater",
                   measurements=(Measurement.from_estimate(lead, "all items"),))
    judge(row).kind      # one of KINDS
    to_json(row)         # what the ledger stores

.. rubric:: The rule

1. **Refusals.** A row is not judged (*cannot be judged*, with the reason) when an interval has
   zero width (use an exact bound such as Clopper–Pearson, or the item-level interval:
   identical seeds on identical windows are one measurement, not several), when its conditions
   were measured on different seeds (every condition on the same seeds), or when its quantity is
   of no kind in the band table.
2. **The unit.** For a model the book trained, the unit is the training seed: a condition's
   evidence is the one-sided t test over the per-seed effects (the exact sign test when the seeds
   gave the same number). For a model the book did not train, it is the item (sentence, window):
   the one-sided p-value read from the item-level interval.
3. **Conditions counted after correction.** The p-values of a claim's conditions are corrected
   with Holm's step-down; a condition *holds* when its corrected p-value is below
   (1 − level)/2 = 0.025 on the side the claim predicts.
4. **One band table.** Each kind of quantity (nats, accuracy, share, cosine, rank, count, ratio)
   has one no-effect band around the null (``deviating.bands.BANDS``). A condition *fails* when its
   interval (across seeds, or the item-level one) lies inside the band, when the across-seed
   interval lies on the other side of the null, or when every seed's interval contradicts the
   claim (on the other side of the null, or inside the band).
5. **Held in each network.** A condition that does not hold across seeds, but whose every seed's
   item-level interval supports the claim after Holm's correction over all the row's
   measurements, is *held in each network trained*: a statement about those networks, not about
   training.

The verdict: *holds* when every condition holds; *holds with conditions* when k of m hold
(the verdict says "holds in k of m conditions"); otherwise *held in each network trained* when
some condition is; *does not hold here* when every condition fails; else *inconclusive*. A
condition the claim itself names is *required*: when it does not hold, the verdict is that
condition's own (*does not hold here*, *held in each network trained* or *inconclusive*),
whatever the other conditions show; of several required conditions that do not hold, one that
fails decides first (a part of the claim that is contradicted cannot be left open by another).

**Worked example.** Chapter 7's C10 on the organism's three seeds: "pruning by average
importance fails the tail first". The claim names its condition: the mean order under zero
ablation, at the tolerance fixed before the run (0.05). There the pooled tail fails -2, -4 and -4
heads before the loss on seeds 0-2 (that is, after it), with item-level intervals [-6, 2],
[-6, 0] and [-8, 0]: each touches 0, so no seed alone contradicts the claim. Over the seeds the
t interval is -3.3 [-6.2, -0.5], on the other side of the null: the condition *fails*,
contradicted across seeds. Being the named condition, it decides: *does not hold here*, whatever
the other six conditions show (none holds after Holm's correction; two more fail).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from headlab.stats import holm
from deviating.bands import across_seeds, interval_pvalue
from deviating.claim_rows import DIRECTIONS, ClaimRow, Measurement, Refused

__all__ = ["KINDS", "SCHEMA", "SCHEMA_VERSION", "DIRECTIONS", "Measurement", "ClaimRow", "Judgement", "Refused",
           "judge", "verdict", "named_condition_failing", "rule_text", "count_verdicts", "to_json", "from_json"]

KINDS = ("holds", "holds with conditions", "held in each network trained", "inconclusive", "does not hold here",
         "cannot be judged")
SCHEMA = "headlab.claim-row"
SCHEMA_VERSION = 2  # 2: seeds as the unit, Holm across conditions, one band table, refusals
_READS = (1, 2)  # version 1 rows (the old rule) are read and judged again


@dataclass(frozen=True)
class Judgement:
    """The verdict and why.

    Attributes:
        kind: one of ``KINDS``.
        holds_under: conditions that hold (across seeds, after Holm's correction).
        fails_under: conditions that fail (inside the band, contradicted across seeds, or on every seed).
        open_under: the other conditions.
        reason: one sentence generated from the numbers.
        each_under: conditions held in each network trained but not across seeds.
        held: how many conditions hold (k of "holds in k of m conditions").
        tested: how many conditions were tested (m).
        conditions: per condition, the evidence the ledger shows: ``condition``, ``unit``,
            ``band``, ``effect``, ``low``, ``high``, ``n`` with its ``per`` ("3 seeds",
            "216 sentences"), ``p``, ``p_holm`` and ``status``.
    """

    kind: str
    holds_under: tuple[str, ...]
    fails_under: tuple[str, ...]
    open_under: tuple[str, ...]
    reason: str
    each_under: tuple[str, ...] = ()
    held: int = 0
    tested: int = 0
    conditions: tuple[dict, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """The judgement as a plain dict (for JSON)."""
        return {"kind": self.kind, "holds_under": list(self.holds_under), "fails_under": list(self.fails_under),
                "open_under": list(self.open_under), "each_under": list(self.each_under), "held": self.held,
                "tested": self.tested, "reason": self.reason, "conditions": [dict(c) for c in self.conditions]}


def _check(row: ClaimRow) -> None:
    """Raise :class:`Refused` when the row cannot meet the rule."""
    for m in (*row.measurements, row.headline):
        if m.low == m.high:
            seed = "" if m.seed is None else f", seed {m.seed}"
            raise Refused(f"{row.claim} on {row.model}: {m.condition!r}{seed} has a zero-width interval "
                          f"[{m.low:g}, {m.high:g}] (n = {m.n}); give an exact bound (Clopper-Pearson, "
                          "headlab.stats.proportion) or the item-level interval; identical seeds on identical "
                          "windows are one measurement")
    seeds = {c: tuple(sorted(m.seed for m in ms if m.seed is not None)) for c, ms in row.by_condition.items()}
    if len(set(seeds.values())) > 1:
        most = max(seeds.values(), key=len)
        c, few = min(seeds.items(), key=lambda kv: len(kv[1]))
        raise Refused(f"{row.claim} on {row.model}: condition {c!r} was measured on "
                      f"{_seed_words(few)}, other conditions on {_seed_words(most)}; measure every condition "
                      "on the same seeds")
    for c in row.conditions:
        row.unit_for(c)  # raises Refused for a quantity of no known kind


def _seed_words(seeds: tuple[int, ...]) -> str:
    if not seeds:
        return "no numbered seed"
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def _evidence(row: ClaimRow) -> list[dict]:
    alpha = (1 - row.level) / 2
    trained = bool(row.seeds)
    out, item_p = [], []
    for c, ms in row.by_condition.items():
        lo_band, hi_band = row.band_for(c)
        ps = [interval_pvalue(m.effect, m.low, m.high, row.null, row.direction, row.level) for m in ms]
        states = [m.status(row.null, row.direction, (lo_band, hi_band)) for m in ms]
        item_p.extend(ps)
        if trained and len(ms) >= 2:
            est, test = across_seeds([m.effect for m in ms], row.null, row.direction, row.level)
            effect, low, high, n, per, p = est.value, est.low, est.high, est.n, f"{est.n} seeds", test.pvalue
        else:
            m = ms[0]
            effect, low, high, n, p = m.effect, m.low, m.high, m.n, ps[0]
            per = f"{m.n} {row.items}" + ("" if m.seed is None else f", seed {m.seed} only")
        inside = lo_band <= low and high <= hi_band
        # the across-seed interval on the other side of the null: contradicted for training
        against = trained and len(ms) >= 2 and (high < row.null if row.direction == "greater" else low > row.null)
        if len({m.effect for m in ms}) == 1 and len(ms) > 1:  # identical seeds: one measurement, read its items
            inside = all(s == "contradicts" for s in states) and all(lo_band <= m.low and m.high <= hi_band
                                                                     for m in ms)
        out.append({"condition": c, "unit": row.unit_for(c), "band": [lo_band, hi_band], "effect": effect,
                    "low": low, "high": high, "n": n, "per": per, "p": p, "states": states,
                    "across": trained and len(ms) >= 2, "inside": inside, "against": against})
    for e, adj in zip(out, holm([e["p"] for e in out])):
        e["p_holm"] = float(adj)
    adj_items = iter(holm(item_p))
    for e in out:
        e["each"] = trained and all([next(adj_items) < alpha and s == "supports" for s in e["states"]])
        if e["across"] and e["p_holm"] < alpha and not e["inside"]:
            e["status"] = "holds"
        elif not trained and e["p_holm"] < alpha and not e["inside"] and e["states"] == ["supports"]:
            e["status"] = "holds"
        elif e["inside"] or e["against"] or all(s == "contradicts" for s in e["states"]):
            e["status"] = "fails"
        elif e["each"]:
            e["status"] = "each"
        else:
            e["status"] = "open"
    return out


_NAMED = "the condition the claim names does not hold: "  # how judge() opens such a reason


def _why(e: dict) -> str:
    detail = {"fails": "inside the band" if e["inside"] else "contradicted across seeds" if e["against"]
              else "contradicted on every seed" if e["across"] else "contradicted",
              "each": f"on each seed, not across them (Holm p = {e['p_holm']:.2g})",
              "open": f"Holm p = {e['p_holm']:.2g}", "holds": f"Holm p = {e['p_holm']:.2g}"}[e["status"]]
    return f"{e['condition']} ({detail})"


def judge(row: ClaimRow) -> Judgement:
    """The verdict on a claim row, by the rule stated in :mod:`deviating.verdicts`.

    Raises:
        Refused: for a row that cannot meet the rule (zero-width interval, conditions on different
            seeds, a quantity of no known kind); :func:`verdict` turns it into *cannot be judged*.
    """
    _check(row)
    ev = _evidence(row)
    by = {e["condition"]: e for e in ev}
    pick = lambda status: tuple(e["condition"] for e in ev if e["status"] == status)  # noqa: E731
    holds, fails, each, open_ = pick("holds"), pick("fails"), pick("each"), pick("open")
    k, m = len(holds), len(ev)
    unit = f"across {len(row.seeds)} seeds" if row.seeds else f"on {row.headline.n} {row.items}"
    count = f"holds in {k} of {m} conditions after Holm's correction, {unit}"
    null = f"{row.null_label} ({row.null:g})"
    rank = {"fails": 0, "each": 1, "open": 2}  # a contradicted named condition speaks first
    required_bad = sorted((c for c in row.required if by[c]["status"] != "holds"),
                          key=lambda c: rank[by[c]["status"]])
    if required_bad:
        e = by[required_bad[0]]
        kind = {"fails": "does not hold here", "each": "held in each network trained"}.get(e["status"],
                                                                                          "inconclusive")
        reason = f"{_NAMED}{_why(e)}; {count}"
    elif k == m:
        kind, reason = "holds", f"{count}, against the {null}"
    elif k:
        kind = "holds with conditions"
        reason = f"{count}: {', '.join(holds)}; not {'; '.join(_why(by[c]) for c in fails + each + open_)}"
    elif each:
        kind = "held in each network trained"
        reason = (f"{count}; held on every seed under {', '.join(each)}, but the seeds do not show it "
                  "for training")
    elif len(fails) == m:
        kind = "does not hold here"
        reason = f"every condition fails against the {null}: {count}: {'; '.join(_why(by[c]) for c in fails)}"
    else:
        kind = "inconclusive"
        reason = f"{count}: {'; '.join(_why(by[c]) for c in open_ + fails)}"
    shown = tuple({k2: v for k2, v in e.items() if k2 not in ("states", "across", "inside", "against", "each")}
                  for e in ev)
    return Judgement(kind, holds, fails, open_, reason, each, k, m, shown)


def named_condition_failing(judgement: Judgement) -> str:
    """The required condition that decided the verdict, with why (``"seed 0's subject head
    (contradicted on every seed)"``), or ``""`` when no required condition decided it."""
    if not judgement.reason.startswith(_NAMED):
        return ""
    return judgement.reason[len(_NAMED):].split("; holds in ", 1)[0]


def verdict(row: ClaimRow) -> Judgement:
    """:func:`judge`, with a refused row given the verdict *cannot be judged* and the refusal as its reason
    (what the ledger and the chapters' tables show, so a refused row never breaks them)."""
    try:
        return judge(row)
    except Refused as err:
        tested = len(row.conditions)
        return Judgement("cannot be judged", (), (), row.conditions, f"refused by the rule: {err}", (), 0, tested)


def rule_text() -> str:
    """The rule, as written in this module's docstring (Markdown and reST alike), for the ledger page."""
    doc = __doc__ or ""
    marker = ".. rubric:: The rule\n"
    start = doc.index(marker) + len(marker)
    return doc[start:].strip()


def count_verdicts(rows: Iterable[ClaimRow]) -> dict[str, int]:
    """How many rows get each verdict, in the order of ``KINDS`` (zeros included)."""
    counts = Counter(verdict(r).kind for r in rows)
    return {k: counts.get(k, 0) for k in KINDS}


def _measurement_dict(m: Measurement) -> dict[str, Any]:
    return {"condition": m.condition, "seed": m.seed, "effect": m.effect, "low": m.low, "high": m.high, "n": m.n}


def _clean(d: Any) -> Any:
    """Infinite numbers as the strings ``"inf"`` / ``"-inf"`` (JSON has no infinity), recursively."""
    if isinstance(d, dict):
        return {k: _clean(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_clean(v) for v in d]
    if isinstance(d, float) and math.isinf(d):
        return "inf" if d > 0 else "-inf"
    return d


def to_json(row: ClaimRow) -> dict[str, Any]:
    """The row and its verdict as a JSON-ready dict, with the schema name and version.

    Infinite interval ends are written as the strings ``"inf"`` / ``"-inf"`` (JSON has no
    infinity).
    """
    def enc(x: float) -> float | str:
        return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")

    def mdict(m: Measurement) -> dict[str, Any]:
        d = _measurement_dict(m)
        d["low"], d["high"] = enc(m.low), enc(m.high)
        return d

    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "claim": row.claim, "model": row.model, "quantity": row.quantity,
        "null": row.null, "null_label": row.null_label, "direction": row.direction,
        "level": row.level, "no_effect": list(row.no_effect) if row.no_effect else None,
        "required": list(row.required), "seeds": list(row.seeds),
        "headline": mdict(row.headline), "measurements": [mdict(m) for m in row.measurements],
        "note": row.note, "unit": row.unit, "units": dict(row.units), "items": row.items,
        "verdict": _clean(verdict(row).as_dict()),
    }


def from_json(data: dict[str, Any] | str) -> ClaimRow:
    """Read a row written by :func:`to_json` (a dict or its JSON text).

    Raises:
        ValueError: on another schema or version, or when the stored verdict is not what
            the rule gives for the stored numbers (a verdict edited by hand).
    """
    d = json.loads(data) if isinstance(data, str) else data
    if d.get("schema") != SCHEMA:
        raise ValueError(f"not a claim row: schema {d.get('schema')!r}, expected {SCHEMA!r}")
    if d.get("schema_version") not in _READS:
        raise ValueError(f"claim row schema version {d.get('schema_version')!r} is not supported "
                         f"(this headlab reads versions {_READS}); regenerate the row")

    def meas(m: dict[str, Any]) -> Measurement:
        return Measurement(m["condition"], m["effect"], float(m["low"]), float(m["high"]), m["n"], m.get("seed"))

    old = d["schema_version"] == 1  # the old rule's bands and verdict are not this rule's: judged again
    row = ClaimRow(d["claim"], d["model"], d["quantity"], d["null"], d["null_label"], d["direction"],
                   tuple(meas(m) for m in d["measurements"]), meas(d["headline"]), tuple(d.get("required", ())),
                   None if old or not d.get("no_effect") else tuple(d["no_effect"]), d.get("level", 0.95),
                   d.get("note", ""), d.get("unit", ""), d.get("units", {}), d.get("items", ""))
    stored = None if old else d.get("verdict")
    if stored is not None and stored.get("kind") != verdict(row).kind:
        raise ValueError(f"{row.claim} on {row.model}: the stored verdict {stored.get('kind')!r} is not what the "
                         f"rule gives for these numbers ({verdict(row).kind!r}); verdicts are never edited by hand")
    return row
