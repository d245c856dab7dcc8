"""The two values every function of :mod:`headlab.stats` returns: an estimate with its
interval, and a test with its p-value."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Estimate", "TestResult", "check_counts"]


@dataclass(frozen=True)
class Estimate:
    """A number with its confidence interval.

    Attributes:
        n: how many independent units the interval rests on (items, or training seeds).
        method: how the interval was made, in words (e.g. ``"BCa bootstrap over 82 items"``).
    """

    value: float
    low: float
    high: float
    n: int
    level: float = 0.95
    method: str = ""

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            if math.isnan(getattr(self, name)):
                raise ValueError(f"Estimate.{name} is NaN: compute it from data with at least one finite value")
        if self.low > self.high:
            raise ValueError(f"Estimate interval is reversed: low={self.low} > high={self.high}")
        if not 0 < self.level < 1:
            raise ValueError(f"Estimate.level must be in (0, 1), e.g. 0.95; got {self.level}")
        if self.n < 1:
            raise ValueError(f"Estimate.n must be at least 1; got {self.n}")

    def side(self, null: float) -> int:
        """+1 when the whole interval lies above ``null``, -1 when below, 0 when it touches or spans it."""
        if self.low > null:
            return 1
        if self.high < null:
            return -1
        return 0

    def excludes(self, null: float) -> bool:
        """True when ``null`` lies strictly outside the interval."""
        return self.side(null) != 0

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.value:.3g} [{self.low:.3g}, {self.high:.3g}] (n={self.n})"


@dataclass(frozen=True)
class TestResult:
    """The outcome of a hypothesis test.

    Attributes:
        statistic: the test's statistic (named in ``method``, the test in words).
        alternative: ``"two-sided"``, ``"greater"`` or ``"less"``.
        details: the counts or values behind the statistic, by name.
    """

    __test__ = False  # not a pytest test class, despite its name

    statistic: float
    pvalue: float
    n: int
    method: str
    alternative: str = "two-sided"
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.pvalue <= 1.0:
            raise ValueError(f"p-value must be in [0, 1]; got {self.pvalue}")

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.method}: statistic {self.statistic:.4g}, p = {self.pvalue:.3g} (n={self.n})"


def check_counts(successes, n) -> tuple[int, int]:
    """``(successes, n)`` as ints (``0 <= successes <= n``, ``n >= 1``), or a clear error."""
    if isinstance(successes, bool) or isinstance(n, bool):
        raise ValueError("counts must be integers, not booleans")
    if int(successes) != successes or int(n) != n:
        raise ValueError(f"counts must be whole numbers; got successes={successes}, n={n}")
    k, total = int(successes), int(n)
    if total < 1 or not 0 <= k <= total:
        raise ValueError(f"need 0 <= successes <= n and n >= 1; got successes={k}, n={total}")
    return k, total
