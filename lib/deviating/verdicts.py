"""One verdict rule for every claim of the book, applied to numbers, never typed by hand.

A :class:`ClaimRow` carries what a claim was measured as: the quantity and its 95%
interval, how many items (``n``), which training seeds, the null or baseline it is compared
with, the direction the claim predicts, and every condition tested (each with its own
numbers, per seed). :func:`judge` turns those numbers into the verdict, for example::

    from headlab import stats
    from deviating.verdicts import ClaimRow, Measurement, judge, to_json

    # head_right, nearest_right: 0/1 per held-out item
    lead = stats.paired_difference(head_right, nearest_right)
    row = ClaimRow("C4", "MiniLM, English set, held out",
                   "accuracy lead over the nearest mention",
                   null=0.0, null_label="nearest-mention baseline",
                   direction="greater",
                   measurements=(Measurement.from_estimate(lead, "all items"),))
    judge(row).kind      # one of KINDS
    to_json(row)         # what the ledger stores

.. rubric:: The rule

Each measurement (one condition, one seed) is read against the null:

- it *supports* the claim when its interval lies strictly on the side of the null the
  claim predicts;
- it *contradicts* the claim when its interval lies strictly on the other side, or lies
  entirely inside the stated no-effect band (a band around the null within which any
  effect counts as none; this test comes first);
- otherwise it *spans* the null (an interval that touches the null counts as spanning it).

A condition holds when it is supported on every seed tested, fails when it is
contradicted on every seed, and is open otherwise (including when seeds disagree).
Then the verdict is:

- *holds*: every condition tested holds;
- *holds with conditions*: some conditions hold and others do not; the verdict lists
  the conditions under which it holds;
- *inconclusive*: no condition holds and not every condition fails;
- *does not hold here*: every condition fails.

A condition that the claim itself names (for example "ranked by average importance")
is marked required: if a required condition does not hold, the verdict is that
condition's own (*does not hold here* if it fails, *inconclusive* otherwise), whatever
other conditions show, because a claim does not hold "with conditions" that replace
the one it states.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from headlab.stats.results import Estimate

__all__ = ["KINDS", "SCHEMA", "SCHEMA_VERSION", "DIRECTIONS", "Measurement", "ClaimRow", "Judgement", "judge",
           "rule_text", "count_verdicts", "to_json", "from_json"]

KINDS = ("holds", "holds with conditions", "inconclusive", "does not hold here")
DIRECTIONS = ("greater", "less")
SCHEMA = "headlab.claim-row"
SCHEMA_VERSION = 1

_CLAIM_ID = re.compile(r"^C[1-9][0-9]*$")


def _finite_or_inf(name: str, value: float) -> float:
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} is NaN: every number of a claim row must be measured")
    return v


@dataclass(frozen=True)
class Measurement:
    """One condition on one seed: an effect with its interval.

    Attributes:
        condition: the condition, in words (``"all constructions"``, ``"mean order"``,
            ``"zero ablation, loss"``).
        effect: the measured effect (same units as the row's null).
        low: lower end of its interval (may be ``-inf`` for a one-sided interval).
        high: upper end (may be ``inf``).
        n: number of items behind it.
        seed: the training seed, or ``None`` for a model the book did not train.
    """

    condition: str
    effect: float
    low: float
    high: float
    n: int
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.condition or not self.condition.strip():
            raise ValueError("a measurement needs a condition name (e.g. 'all items')")
        eff = _finite_or_inf("effect", self.effect)
        low = _finite_or_inf("low", self.low)
        high = _finite_or_inf("high", self.high)
        if not math.isfinite(eff):
            raise ValueError(f"effect must be finite; got {self.effect} for condition {self.condition!r}")
        if low > high:
            raise ValueError(f"interval reversed for condition {self.condition!r}: low={low} > high={high}")
        if isinstance(self.n, bool) or int(self.n) != self.n or self.n < 1:
            raise ValueError(f"n must be a positive count of items; got {self.n!r} for {self.condition!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or int(self.seed) != self.seed):
            raise ValueError(f"seed must be an integer or None; got {self.seed!r}")

    @classmethod
    def from_estimate(cls, estimate: Estimate, condition: str, seed: int | None = None) -> Measurement:
        """A measurement from a :class:`headlab.stats.Estimate` (its value, interval and n)."""
        return cls(condition, estimate.value, estimate.low, estimate.high, estimate.n, seed)

    def status(self, null: float, direction: str, no_effect: tuple[float, float] | None = None) -> str:
        """``"supports"``, ``"contradicts"`` or ``"spans"``: this measurement read by the rule."""
        if no_effect is not None and no_effect[0] <= self.low and self.high <= no_effect[1]:
            return "contradicts"
        above, below = self.low > null, self.high < null
        if (above and direction == "greater") or (below and direction == "less"):
            return "supports"
        if above or below:
            return "contradicts"
        return "spans"


@dataclass(frozen=True)
class Judgement:
    """The verdict and why.

    Attributes:
        kind: one of ``KINDS``.
        holds_under: conditions under which the claim holds (every seed supports it).
        fails_under: conditions under which it fails (every seed contradicts it).
        open_under: the other conditions (interval spans the null, or seeds disagree).
        reason: one sentence generated from the numbers.
    """

    kind: str
    holds_under: tuple[str, ...]
    fails_under: tuple[str, ...]
    open_under: tuple[str, ...]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The judgement as a plain dict (for JSON)."""
        return {"kind": self.kind, "holds_under": list(self.holds_under), "fails_under": list(self.fails_under),
                "open_under": list(self.open_under), "reason": self.reason}


@dataclass(frozen=True)
class ClaimRow:
    """A claim as measured on one model: the numbers :func:`judge` reads.

    Attributes:
        claim: the claim id, ``"C1"`` ... (see ``deviating.ledger.CLAIMS``).
        model: the model (and data) measured, in words.
        quantity: what ``effect`` is, with units (e.g. "accuracy lead of head 1.3 over the
            nearest mention").
        null: the value of ``effect`` if the claim were false (0 for a lead, a chance rate,
            the mean of a random-trigger null).
        null_label: what the null or baseline is, in words.
        direction: ``"greater"`` or ``"less"``: the side of the null the claim predicts.
        measurements: one :class:`Measurement` per (condition, seed); at least one.
        headline: the measurement the ledger prints (e.g. pooled over seeds with
            :func:`headlab.stats.over_seeds`); by default the first condition's, which must
            then have a single measurement. It is shown, not judged.
        required: conditions the claim itself names (see the rule).
        no_effect: optional ``(low, high)`` band around the null within which an effect
            counts as none.
        level: the confidence level of every interval in the row.
        note: one sentence on what the numbers do not say (optional).
    """

    claim: str
    model: str
    quantity: str
    null: float
    null_label: str
    direction: str
    measurements: tuple[Measurement, ...]
    headline: Measurement | None = None
    required: tuple[str, ...] = ()
    no_effect: tuple[float, float] | None = None
    level: float = 0.95
    note: str = ""

    def __post_init__(self) -> None:
        if not _CLAIM_ID.match(str(self.claim)):
            raise ValueError(f"claim must be an id like 'C4'; got {self.claim!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS} (the side of the null the claim predicts); "
                             f"got {self.direction!r}")
        if not math.isfinite(float(self.null)):
            raise ValueError(f"null must be a finite number; got {self.null!r}")
        object.__setattr__(self, "measurements", tuple(self.measurements))
        object.__setattr__(self, "required", tuple(self.required))
        if not self.measurements:
            raise ValueError(f"{self.claim} on {self.model}: a claim row needs at least one measurement")
        seen: dict[str, set] = {}
        for m in self.measurements:
            if not isinstance(m, Measurement):
                raise ValueError(f"measurements must be Measurement values; got {type(m).__name__}")
            seeds = seen.setdefault(m.condition, set())
            if m.seed in seeds:
                raise ValueError(f"{self.claim}: condition {m.condition!r} has seed {m.seed} twice")
            seeds.add(m.seed)
        for name, seeds in seen.items():
            if None in seeds and len(seeds) > 1:
                raise ValueError(f"{self.claim}: condition {name!r} mixes seed None with numbered seeds")
        unknown = [r for r in self.required if r not in seen]
        if unknown:
            raise ValueError(f"{self.claim}: required condition {unknown[0]!r} was not measured; "
                             f"measured: {', '.join(seen)}")
        if self.no_effect is not None:
            lo, hi = (float(v) for v in self.no_effect)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= self.null <= hi and lo < hi):
                raise ValueError(f"no_effect must be a finite band (low, high) around the null {self.null}; "
                                 f"got {self.no_effect!r}")
            object.__setattr__(self, "no_effect", (lo, hi))
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1); got {self.level}")
        if self.headline is None:
            first = self.conditions[0]
            ms = self.by_condition[first]
            if len(ms) != 1:
                raise ValueError(f"{self.claim}: condition {first!r} has {len(ms)} seeds; give headline= the number "
                                 "to print (e.g. Measurement.from_estimate(headlab.stats.over_seeds(...), ...))")
            object.__setattr__(self, "headline", ms[0])

    @property
    def conditions(self) -> tuple[str, ...]:
        """The condition names, in the order first measured."""
        return tuple(dict.fromkeys(m.condition for m in self.measurements))

    @property
    def by_condition(self) -> dict[str, tuple[Measurement, ...]]:
        """The measurements grouped by condition."""
        return {c: tuple(m for m in self.measurements if m.condition == c) for c in self.conditions}

    @property
    def seeds(self) -> tuple[int, ...]:
        """The training seeds measured (empty for a model the book did not train)."""
        return tuple(sorted({m.seed for m in self.measurements if m.seed is not None}))

    @property
    def n(self) -> int:
        """Items behind the headline number."""
        return self.headline.n


def _condition_status(row: ClaimRow, ms: tuple[Measurement, ...]) -> tuple[str, str]:
    states = [m.status(row.null, row.direction, row.no_effect) for m in ms]
    if all(s == "supports" for s in states):
        return "holds", ""
    if all(s == "contradicts" for s in states):
        return "fails", ""
    if len(states) > 1 and len(set(states)) > 1:
        verbs = {"supports": "support", "contradicts": "contradict", "spans": "span"}
        counts = ", ".join(f"{states.count(s)} {v}" for s, v in verbs.items() if s in states)
        return "open", f"the seeds differ: {counts}"
    return "open", "the interval spans the null"


def judge(row: ClaimRow) -> Judgement:
    """The verdict on a claim row, by the rule stated in :mod:`deviating.verdicts`.

    Args:
        row: the measured claim.

    Returns:
        A :class:`Judgement` (kind, the conditions under which the claim holds, fails or
        stays open, and a one-sentence reason).
    """
    status = {c: _condition_status(row, ms) for c, ms in row.by_condition.items()}
    holds = tuple(c for c, (s, _) in status.items() if s == "holds")
    fails = tuple(c for c, (s, _) in status.items() if s == "fails")
    open_ = tuple(c for c, (s, _) in status.items() if s == "open")
    side = "above" if row.direction == "greater" else "below"
    null = f"{row.null_label} ({row.null:g})"
    seeds = f" on each of {len(row.seeds)} seeds" if len(row.seeds) > 1 else ""

    def why(c: str) -> str:
        s, detail = status[c]
        if s == "fails":
            return f"{c} (contradicted)"
        return f"{c} ({detail})"

    required_bad = [c for c in row.required if status[c][0] != "holds"]
    if required_bad:
        c = required_bad[0]
        kind = "does not hold here" if status[c][0] == "fails" else "inconclusive"
        others = f"; it holds only under {', '.join(holds)}" if holds else ""
        reason = f"the condition the claim names is not met: {why(c)}{others}"
    elif not fails and not open_:
        kind = "holds"
        reason = f"the {row.level:.0%} interval lies {side} the {null} under every condition tested{seeds}"
    elif holds:
        kind = "holds with conditions"
        reason = f"holds under {', '.join(holds)}; not under {'; '.join(why(c) for c in fails + open_)}"
    elif not open_:
        kind = "does not hold here"
        reason = f"every condition contradicts it against the {null}"
    else:
        kind = "inconclusive"
        reason = f"no condition supports it against the {null}: {'; '.join(why(c) for c in open_ + fails)}"
    return Judgement(kind, holds, fails, open_, reason)


def rule_text() -> str:
    """The rule, as written in this module's docstring (Markdown and reST alike), for the ledger page."""
    doc = __doc__ or ""
    marker = ".. rubric:: The rule\n"
    start = doc.index(marker) + len(marker)
    return doc[start:].strip()


def count_verdicts(rows: Iterable[ClaimRow]) -> dict[str, int]:
    """How many rows get each verdict, in the order of ``KINDS`` (zeros included)."""
    counts = Counter(judge(r).kind for r in rows)
    return {k: counts.get(k, 0) for k in KINDS}


def _measurement_dict(m: Measurement) -> dict[str, Any]:
    return {"condition": m.condition, "seed": m.seed, "effect": m.effect, "low": m.low, "high": m.high, "n": m.n}


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
        "note": row.note, "verdict": judge(row).as_dict(),
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
    if d.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"claim row schema version {d.get('schema_version')!r} is not supported "
                         f"(this headlab reads version {SCHEMA_VERSION}); regenerate the row")

    def meas(m: dict[str, Any]) -> Measurement:
        return Measurement(m["condition"], m["effect"], float(m["low"]), float(m["high"]), m["n"], m.get("seed"))

    row = ClaimRow(d["claim"], d["model"], d["quantity"], d["null"], d["null_label"], d["direction"],
                   tuple(meas(m) for m in d["measurements"]), meas(d["headline"]), tuple(d.get("required", ())),
                   tuple(d["no_effect"]) if d.get("no_effect") else None, d.get("level", 0.95), d.get("note", ""))
    stored = d.get("verdict")
    if stored is not None and stored.get("kind") != judge(row).kind:
        raise ValueError(f"{row.claim} on {row.model}: the stored verdict {stored.get('kind')!r} is not what the "
                         f"rule gives for these numbers ({judge(row).kind!r}); verdicts are never edited by hand")
    return row
