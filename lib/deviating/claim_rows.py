"""What a claim was measured as: :class:`Measurement` (one condition on one network) and
:class:`ClaimRow` (a claim on one model, every condition tested, with what was declared before the
data: the primary endpoint, the kind of each quantity, the conditions reported beside the row and
the conditions that claim "no effect"). :mod:`deviating.verdicts` judges them."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from headlab.stats import over_seeds
from headlab.stats.results import Estimate
from deviating.bands import UNITS, band

__all__ = ["DIRECTIONS", "Measurement", "ClaimRow", "Refused", "items_noun"]

DIRECTIONS = ("greater", "less")

_CLAIM_ID = re.compile(r"^C[1-9][0-9]*$")
_NOUNS = ("sentences", "windows", "sequences", "predictions", "students", "texts", "items")


class Refused(ValueError):
    """A row the verdict rule cannot judge (a zero-width interval, conditions on different seeds,
    an undeclared kind of quantity, too few seeds, a baseline that is the answer key); the message
    names the value and what to do."""


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
        df: the degrees of freedom of a Student t interval (``n - 1`` for a mean over n seeds or
            students), or ``None`` for a bootstrap or normal interval over many items.
    """

    condition: str
    effect: float
    low: float
    high: float
    n: int
    seed: int | None = None
    df: float | None = None

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
        if self.df is not None and (isinstance(self.df, bool) or not float(self.df) > 0):
            raise ValueError(f"df must be a positive number of degrees of freedom or None; got {self.df!r}")

    @classmethod
    def from_estimate(cls, estimate: Estimate, condition: str, seed: int | None = None,
                      df: float | None = None) -> Measurement:
        """A measurement from a :class:`headlab.stats.Estimate` (its value, interval and n)."""
        return cls(condition, estimate.value, estimate.low, estimate.high, estimate.n, seed, df)

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
        headline: the primary endpoint as the ledger prints it; by default the primary
            condition's own measurement, or, over seeds, its mean with the t interval
            (:func:`headlab.stats.over_seeds`).
        required: conditions the claim itself names (see the rule).
        no_effect: the no-effect band around the null; it comes from the one band table
            (:data:`deviating.bands.BANDS`) for the row's ``unit``: pass nothing, or the same band.
        level: the confidence level of every interval in the row.
        note: one sentence on what the numbers do not say (optional).
        unit: the kind of quantity of every condition (a key of :data:`deviating.bands.UNITS`),
            declared; never read from the wording. A row with no kind declared is refused.
        units: the kind of a condition whose kind differs from ``unit``, by condition name.
        items: what ``n`` counts (``"sentences"``, ``"windows"``); by default read from ``model``.
        primary: the primary endpoint, named before the data: the condition that decides the
            verdict with the required ones. By default the first condition measured.
        beside: conditions reported beside the row, with why (``"negative control"``,
            ``"saturated metric: ..."``): shown, outside the count of conditions and outside the
            Holm family.
        equivalence: conditions that claim *no effect* (e.g. "unseen by the mean"): they hold when
            the two one-sided tests put the effect inside the no-effect band.
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
    primary: str = ""
    beside: dict[str, str] = field(default_factory=dict)
    equivalence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _CLAIM_ID.match(str(self.claim)):
            raise ValueError(f"claim must be an id like 'C4'; got {self.claim!r}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS} (the side of the null the claim predicts); "
                             f"got {self.direction!r}")
        if not math.isfinite(float(self.null)):
            raise ValueError(f"null must be a finite number; got {self.null!r}")
        for name in ("measurements", "required", "equivalence"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "units", dict(self.units))
        object.__setattr__(self, "beside", dict(self.beside))
        for kind in (self.unit, *self.units.values()):
            if kind and kind not in UNITS:
                raise ValueError(f"{self.claim}: unknown unit {kind!r}; choose from {', '.join(UNITS)}")
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
        for what, names in (("required condition", self.required), ("units", self.units),
                            ("beside", self.beside), ("equivalence", self.equivalence)):
            bad = [c for c in names if c not in seen]
            if bad:
                raise ValueError(f"{self.claim}: {what} names condition {bad[0]!r}, which was not measured; "
                                 f"measured: {', '.join(seen)}")
        if len(self.beside) >= len(seen):
            raise ValueError(f"{self.claim}: every condition is reported beside the row; judge at least one")
        if not self.primary:
            object.__setattr__(self, "primary", next(c for c in self.conditions if c not in self.beside))
        if self.primary not in seen:
            raise ValueError(f"{self.claim}: the primary endpoint {self.primary!r} was not measured; "
                             f"measured: {', '.join(seen)}")
        if self.primary in self.beside or any(r in self.beside for r in self.required):
            raise ValueError(f"{self.claim}: the primary endpoint and the required conditions are judged; "
                             "they cannot also be reported beside the row")
        if not self.items:
            object.__setattr__(self, "items", items_noun(self.model))
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1); got {self.level}")
        if self.headline is None:
            ms = self.by_condition[self.primary]
            head = ms[0]
            if len(ms) > 1:
                est = over_seeds([m.effect for m in ms], level=self.level)
                head = Measurement(f"{self.primary}, over seeds", est.value, est.low, est.high, est.n,
                                   None, est.n - 1)
            object.__setattr__(self, "headline", head)
        if self.no_effect is not None:
            given = tuple(float(v) for v in self.no_effect)
            table = band(self.unit_for(self.primary), float(self.null))
            if len(given) != 2 or not all(math.isclose(g, t, abs_tol=1e-12) for g, t in zip(given, table)):
                raise ValueError(f"{self.claim}: no_effect {self.no_effect!r} is not the band table's {table} for "
                                 f"this kind of quantity; bands come from deviating.bands.BANDS: drop no_effect=")
        elif self.unit or self.primary in self.units:
            object.__setattr__(self, "no_effect", self.band_for(self.primary))

    @property
    def judged(self) -> tuple[str, ...]:
        """The conditions the verdict counts, that is every condition not reported beside the row."""
        return tuple(c for c in self.conditions if c not in self.beside)

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
        """The declared kind of quantity of one condition: ``units[condition]``, else ``unit``.

        Raises:
            Refused: when neither declares it (the kind is never read from the wording).
        """
        kind = self.units.get(condition) or self.unit
        if not kind:
            raise Refused(f"{self.claim} on {self.model}: condition {condition!r} declares no kind of quantity; pass "
                          f"unit= (or units={{condition: kind}}), one of {', '.join(UNITS)}")
        return kind

    def band_for(self, condition: str) -> tuple[float, float]:
        """The no-effect band of one condition, from the one band table."""
        return band(self.unit_for(condition), float(self.null))

    @property
    def n(self) -> int:
        """Items behind the headline number."""
        return self.headline.n

