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

1. **Declared before the data.** Each row names its *primary endpoint* (one condition; by default
   the first listed), the kind of quantity of every condition (nats, accuracy, AUC, share, cosine,
   rank, count, ratio; never guessed from the wording), the conditions the claim itself names
   (*required*), the conditions that claim *no effect* (*equivalence*), and the negative
   controls and saturated metrics, which are reported *beside* the row: shown with their own
   p-value, outside the count of conditions and outside Holm's family.
2. **Refusals.** A row is not judged (*cannot be judged*, with the reason) when an interval has
   zero width, when its conditions were measured on different seeds, when a claim about training
   rests on fewer than 3 training seeds, when a measurement over fewer than 20 items gives no
   degrees of freedom (a t interval over 5 students has df = 4), or when a condition declares no
   kind. A baseline that is the answer key (accuracy 1.0 on the gold labels, or the rule that made
   them) is refused before any row is built (``deviating.evidence.refuse_answer_key``).
3. **The unit.** For a model the book trained, the unit is the training seed: a condition's
   evidence is the one-sided t test over the per-seed effects, with the same t as its interval
   (the exact sign test when the seeds gave the same number). For a model the book did not train,
   it is the item: the one-sided p-value read from the item-level interval, with Student t when
   the interval was a t interval (its degrees of freedom are stored) and the normal otherwise.
4. **Holm over the judged conditions.** Their p-values are corrected with Holm's step-down. A
   condition *holds* when its corrected p-value is below (1 - level)/2 = 0.025 *and* its interval
   clears the edge of the no-effect band (``deviating.bands.BANDS``) on the side the claim
   predicts. Significant but not clear of the edge is its own outcome:
   *significant but inside the band*. A condition *fails* when, not significant, its interval
   lies inside the band, or on the other side of the null, or every seed's interval contradicts
   the claim. An equivalence
   condition holds when the two one-sided tests (TOST) against the band's edges are significant
   after Holm, and fails when its interval lies wholly outside the band.
5. **Held in each network.** A condition that does not hold across seeds, but whose every seed's
   item-level interval (over at least 20 items, or with its degrees of freedom; a Clopper-Pearson
   bound only on 0/1 outcomes, declared as the kind "accuracy") supports the
   claim after Holm's correction over all the row's measurements, is *held in each network
   trained*: a statement about those networks, not about training.

The verdict: when the primary endpoint and every required condition hold, *holds* if every judged
condition holds, else *holds with conditions* ("holds in k of m conditions"). When one of them
does not hold, it decides, the worst first: *does not hold here* (it fails), then
*significant but inside the band*, *held in each network trained*, *inconclusive* (open).

The ledger also prints, as a sensitivity column, the Benjamini-Hochberg adjustment of every
judged condition's p-value over the whole ledger.

**Worked example.** Chapter 7's C10 on the organism's three seeds: "pruning by average
importance fails the tail first". The tail the chapter first judged was redefined after the run
was seen, so the row now compares like with like: accuracy on a task's hard cases against
accuracy on the same task, by the same tolerance. Its primary endpoint is agreement with an
attractor against all agreement: it fails 2 heads earlier on each of the three seeds. Three
identical numbers are one measurement, so the test is the exact sign test: p = 0.125, not
significant, and each seed's own interval touches 0. The endpoint is open, and decides:
*inconclusive*.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deviating.claim_rows import DIRECTIONS, ClaimRow, Measurement, Refused
from deviating.evidence import check, weigh

__all__ = ["KINDS", "SCHEMA", "SCHEMA_VERSION", "DIRECTIONS", "Measurement", "ClaimRow", "Judgement", "Refused",
           "judge", "verdict", "named_condition_failing", "rule_text", "count_verdicts", "to_json", "from_json"]

KINDS = ("holds", "holds with conditions", "held in each network trained", "significant but inside the band",
         "inconclusive", "does not hold here", "cannot be judged")
SCHEMA = "headlab.claim-row"
SCHEMA_VERSION = 3  # 3: declared kinds, primary endpoint, beside, equivalence, df; clear the band
_READS = (1, 2, 3)  # rows of the older rules (1, 2) are read and judged again by this one


@dataclass(frozen=True)
class Judgement:
    """The verdict and why.

    Attributes:
        kind: one of ``KINDS``.
        holds_under: judged conditions that hold (after Holm's correction, clear of the band).
        fails_under: judged conditions that fail (no effect, or contradicted).
        open_under: the other judged conditions (open, or significant but inside the band).
        reason: one sentence generated from the numbers.
        each_under: conditions held in each network trained but not across seeds.
        held: how many judged conditions hold (k of "holds in k of m conditions").
        tested: how many conditions were judged (m); those beside the row are not counted.
        conditions: per condition, the evidence the ledger shows: ``condition``, ``role``,
            ``unit``, ``band``, ``effect``, ``low``, ``high``, ``n`` with its ``per`` ("3 seeds",
            "216 sentences"), ``df``, ``test``, ``p``, ``p_holm`` and ``status``.
        small_under: judged conditions significant but inside the band.
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
    small_under: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The judgement as a plain dict (for JSON)."""
        return {"kind": self.kind, "holds_under": list(self.holds_under), "fails_under": list(self.fails_under),
                "open_under": list(self.open_under), "each_under": list(self.each_under),
                "small_under": list(self.small_under), "held": self.held, "tested": self.tested,
                "reason": self.reason, "conditions": [dict(c) for c in self.conditions]}


_NAMED = "the condition the claim names does not hold: "  # how judge() opens such a reason
_PRIMARY = "the primary endpoint does not hold: "
_DECIDES = {"fails": "does not hold here", "small": "significant but inside the band",
            "each": "held in each network trained", "open": "inconclusive"}
_SHOWN = ("condition", "role", "unit", "band", "effect", "low", "high", "n", "df", "per", "test", "p", "p_holm",
          "status")


def _why(e: dict) -> str:
    holm_p = f"Holm p = {e['p_holm']:.2g}"
    detail = {"fails": e["fail_why"],
              "small": f"significant, {holm_p}, but the interval does not clear the band's edge",
              "each": f"on each seed, not across them ({holm_p})",
              "open": holm_p, "holds": holm_p}[e["status"]]
    return f"{e['condition']} ({detail})"


def judge(row: ClaimRow) -> Judgement:
    """The verdict on a claim row, by the rule stated in :mod:`deviating.verdicts`.

    Raises:
        Refused: for a row that cannot meet the rule (see :func:`deviating.evidence.check`);
            :func:`verdict` turns it into *cannot be judged*.
    """
    ev = weigh(row)
    judged = [e for e in ev if e["status"] != "beside"]
    by = {e["condition"]: e for e in judged}
    pick = lambda status: tuple(e["condition"] for e in judged if e["status"] == status)  # noqa: E731
    holds, fails, each, open_, small = pick("holds"), pick("fails"), pick("each"), pick("open"), pick("small")
    k, m = len(holds), len(judged)
    unit = f"across {len(row.seeds)} seeds" if row.seeds else f"on {row.headline.n} {row.items}"
    count = f"holds in {k} of {m} conditions after Holm's correction, {unit}"
    null = f"{row.null_label.removeprefix('the ')} ({row.null:g})"
    rank = {s: i for i, s in enumerate(("fails", "small", "each", "open"))}
    deciding = [row.primary, *(r for r in row.required if r != row.primary)]
    bad = sorted((c for c in deciding if by[c]["status"] != "holds"), key=lambda c: rank[by[c]["status"]])
    if bad:
        e = by[bad[0]]
        kind = _DECIDES[e["status"]]
        opening = _PRIMARY if bad[0] == row.primary and bad[0] not in row.required else _NAMED
        reason = f"{opening}{_why(e)}; {count}"
    elif k == m:
        kind, reason = "holds", f"{count}, against the {null}"
    else:
        kind = "holds with conditions"
        rest = "; ".join(_why(by[c]) for c in fails + small + each + open_)
        reason = f"{count}: {', '.join(holds)}; not {rest}"
    shown = tuple({k2: e.get(k2) for k2 in _SHOWN} for e in ev)
    return Judgement(kind, holds, fails, open_ + small, reason, each, k, m, shown, small)


def named_condition_failing(judgement: Judgement) -> str:
    """The primary endpoint or required condition that decided the verdict, with why (``"seed 0's
    subject head (contradicted on every seed)"``), or ``""`` when none decided it."""
    for opening in (_NAMED, _PRIMARY):
        if judgement.reason.startswith(opening):
            return judgement.reason[len(opening):].split("; holds in ", 1)[0]
    return ""


def verdict(row: ClaimRow) -> Judgement:
    """:func:`judge`, with a refused row given the verdict *cannot be judged* and the refusal as its reason
    (what the ledger and the chapters' tables show, so a refused row never breaks them)."""
    try:
        return judge(row)
    except Refused as err:
        return Judgement("cannot be judged", (), (), row.judged, f"refused by the rule: {err}", (), 0,
                         len(row.judged))


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
    return {"condition": m.condition, "seed": m.seed, "effect": m.effect, "low": m.low, "high": m.high, "n": m.n,
            "df": m.df}


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
        "primary": row.primary, "beside": dict(row.beside), "equivalence": list(row.equivalence),
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
        return Measurement(m["condition"], m["effect"], float(m["low"]), float(m["high"]), m["n"], m.get("seed"),
                           m.get("df"))

    old = d["schema_version"] != SCHEMA_VERSION  # an older rule's verdict is not this rule's: judged again
    row = ClaimRow(d["claim"], d["model"], d["quantity"], d["null"], d["null_label"], d["direction"],
                   tuple(meas(m) for m in d["measurements"]), meas(d["headline"]), tuple(d.get("required", ())),
                   None if old or not d.get("no_effect") else tuple(d["no_effect"]), d.get("level", 0.95),
                   d.get("note", ""), d.get("unit", ""), d.get("units", {}), d.get("items", ""),
                   d.get("primary", ""), d.get("beside", {}), tuple(d.get("equivalence", ())))
    stored = None if old else d.get("verdict")
    if stored is not None and stored.get("kind") != verdict(row).kind:
        raise ValueError(f"{row.claim} on {row.model}: the stored verdict {stored.get('kind')!r} is not what the "
                         f"rule gives for these numbers ({verdict(row).kind!r}); verdicts are never edited by hand")
    return row
