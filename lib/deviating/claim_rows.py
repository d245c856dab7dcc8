"""What a claim was measured as: :class:`Measurement` (one condition on one network) and
:class:`ClaimRow` (a claim on one model, every condition tested). :mod:`deviating.verdicts` judges them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from headlab.stats.results import Estimate
from deviating.bands import UNITS, band, unit_of

__all__ = ["DIRECTIONS", "Measurement", "ClaimRow", "Refused", "items_noun"]

DIRECTIONS = ("greater", "less")

_CLAIM_ID = re.compile(r"^C[1-9][0-9]*$")
_NOUNS = ("sentences", "windows", "sequences", "predictions", "students", "texts", "items")


class Refused(ValueError):
    """A row the verdict rule cannot judge (a zero-width interval, conditions on different seeds,
    a quantity of no known kind); the message names the value and what to do."""


def items_noun(text: str) -> str:
    """What a row's items are, read from its model text ("216 sentences", "96 held-out windows"):
    the first noun of :data:`_NOUNS` that follows a count, else the first named, else ``"items"``."""
    low = text.lower()
    counted = re.search(r"\d+ (?:[a-z-]+ )?(" + "|".join(n.rstrip("s") for n in _NOUNS) + ")", low)
    if counted:
        return counted.group(1) + "s"
    hits = [(low.find(w.rstrip("s")), w) for w in _NOUNS if w.rstrip("s") in low]
    return min(hits)[1] if hits else "items"


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
        no_effect: the no-effect band around the null; it comes from the one band table
            (:data:`deviating.bands.BANDS`) for the row's ``unit``: pass nothing, or the same band.
        level: the confidence level of every interval in the row.
        note: one sentence on what the numbers do not say (optional).
        unit: the kind of quantity (a key of :data:`deviating.bands.UNITS`); by default read
            from ``quantity`` (:func:`deviating.bands.unit_of`).
        units: the kind of a condition whose kind differs from the row's, by condition name.
        items: what ``n`` counts (``"sentences"``, ``"windows"``); by default read from ``model``.
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
    unit: str = ""
    units: dict[str, str] = field(default_factory=dict)
    items: str = ""

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
        if self.unit and self.unit not in tuple(UNITS):
            raise ValueError(f"{self.claim}: unknown unit {self.unit!r}; choose from {', '.join(tuple(UNITS))}")
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
        object.__setattr__(self, "units", dict(self.units))
        bad = [c for c in self.units if c not in seen]
        if bad:
            raise ValueError(f"{self.claim}: units names condition {bad[0]!r}, which was not measured")
        if self.no_effect is not None:
            given = tuple(float(v) for v in self.no_effect)
            table = band(self.unit or unit_of(self.quantity, self.conditions[0]), float(self.null))
            if not all(math.isclose(g, t, abs_tol=1e-12) for g, t in zip(given, table)) or len(given) != 2:
                raise ValueError(f"{self.claim}: no_effect {self.no_effect!r} is not the band table's {table} for "
                                 f"this kind of quantity; bands come from deviating.bands.BANDS: drop no_effect=")
        if not self.items:
            object.__setattr__(self, "items", items_noun(self.model))
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1); got {self.level}")
        if self.headline is None:
            first = self.conditions[0]
            ms = self.by_condition[first]
            if len(ms) != 1:
                raise ValueError(f"{self.claim}: condition {first!r} has {len(ms)} seeds; give headline= the number "
                                 "to print (e.g. Measurement.from_estimate(headlab.stats.over_seeds(...), ...))")
            object.__setattr__(self, "headline", ms[0])
        if self.no_effect is None:
            try:
                object.__setattr__(self, "no_effect", self.band_for(self.conditions[0]))
            except Refused:
                pass  # judge() refuses the row and says why

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

    def unit_for(self, condition: str) -> str:
        """The kind of quantity of one condition: ``units[condition]``, else ``unit``, else read from the text."""
        if condition in self.units:
            return self.units[condition]
        if self.unit and ";" not in self.quantity:
            return self.unit
        try:
            return unit_of(self.quantity, condition)
        except ValueError as err:
            if self.unit:
                return self.unit
            raise Refused(f"{self.claim} on {self.model}: {err}") from None

    def band_for(self, condition: str) -> tuple[float, float]:
        """The no-effect band of one condition, from the one band table."""
        return band(self.unit_for(condition), float(self.null))

    @property
    def n(self) -> int:
        """Items behind the headline number."""
        return self.headline.n

