"""Where a pruned model first fails, with intervals: first-failure counts resampled over items.

A pruning curve (:mod:`headlab.analysis.prune`) gives, for each number of heads removed, a value
per *item* (a window, a sentence): a loss, or the number of correct tail items in that window.
A measure *fails* at the first count where its mean has degraded by more than a tolerance from
the unpruned model. That count is a statistic of the items, so it has an interval:
:func:`failure_bootstrap` resamples the items (whole windows, with replacement; every measure
is read on the same resample, so the comparison between two measures is paired) and recomputes
every first failure on each resample.

The question of claim C10 is whether the tail fails *before* the average benchmark:
:func:`failure_gap` is the number of heads removed by which the average's first failure comes
after the earliest tail's (positive: the tail failed first, while the average still passed).

A measure that never fails within the curve is given the count :func:`never` (one past the
last count): a lower bound, stated wherever it is printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from headlab.stats.results import Estimate

__all__ = ["WindowTable", "pool_tables", "never", "first_failures", "last_passing", "FailureBootstrap", "failure_bootstrap",
           "failure_gap", "first_failure_interval"]


def never(counts: Sequence[int]) -> int:
    """The count given to a measure that never fails within ``counts``: ``counts[-1] + 1``."""
    return int(counts[-1]) + 1


@dataclass(frozen=True)
class WindowTable:
    """One measure along a pruning curve, item by item.

    Attributes:
        counts: heads removed at each point (``counts[0]`` is the reference, usually 0).
        sums: ``(len(counts), n_items)`` the measure summed over each item's units (the loss of a
            window: its mean loss, weight 1; a tail accuracy: the number of its items right).
        weights: ``(n_items,)`` how many units each item holds (items without any: 0).
        higher_is_better: True for accuracies, False for losses.
    """

    counts: tuple[int, ...]
    sums: np.ndarray
    weights: np.ndarray
    higher_is_better: bool

    def __post_init__(self) -> None:
        sums = np.asarray(self.sums, dtype=float)
        weights = np.asarray(self.weights, dtype=float)
        counts = tuple(int(c) for c in self.counts)
        if sums.ndim != 2 or sums.shape[0] != len(counts):
            raise ValueError(f"sums must be (len(counts)={len(counts)}, n_items); got shape {sums.shape}")
        if weights.shape != (sums.shape[1],):
            raise ValueError(f"weights must hold one count per item ({sums.shape[1]}); got shape {weights.shape}")
        if (weights < 0).any() or weights.sum() <= 0:
            raise ValueError("weights must be >= 0 with at least one unit in all: a measure needs items")
        if not np.isfinite(sums).all():
            raise ValueError("sums must be finite (items without units hold 0, not NaN)")
        if list(counts) != sorted(set(counts)):
            raise ValueError(f"counts must be strictly increasing; got {counts}")
        object.__setattr__(self, "sums", sums)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "counts", counts)

    @property
    def n_items(self) -> int:
        """Items (windows, sentences) along the curve."""
        return self.sums.shape[1]

    def means(self, index: np.ndarray | None = None) -> np.ndarray:
        """The measure's mean at each count, ``(len(counts),)``; with ``index`` ``(n_resamples,
        n_items)`` of resampled items, ``(n_resamples, len(counts))``."""
        if index is None:
            return self.sums.sum(1) / self.weights.sum()
        total = self.weights[index].sum(1)  # (n_resamples,)
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums[:, index].sum(-1).T / total[:, None]


def pool_tables(tables: Sequence[WindowTable]) -> WindowTable:
    """One measure made of several read on the same items: their sums and weights added, so
    that its mean at each count is over every unit of every part (three tails pooled into one
    tail, each item weighing as many units as it holds)."""
    tables = list(tables)
    if not tables:
        raise ValueError("give at least one table to pool")
    first = tables[0]
    for k, t in enumerate(tables[1:], 1):
        if t.counts != first.counts or t.n_items != first.n_items:
            raise ValueError(f"table {k} has other counts or items than table 0 ({t.counts}, {t.n_items} items "
                             f"against {first.counts}, {first.n_items}): pool measures of one curve")
        if t.higher_is_better != first.higher_is_better:
            raise ValueError(f"table {k} and table 0 disagree on higher_is_better: pool measures of one kind "
                             "(accuracies with accuracies)")
    return WindowTable(first.counts, sum(t.sums for t in tables), sum(t.weights for t in tables),
                       first.higher_is_better)


def first_failures(means: np.ndarray, counts: Sequence[int], tolerance: float, higher_is_better: bool) -> np.ndarray:
    """The first count at which each curve of ``means`` (``(..., len(counts))``) has degraded by
    more than ``tolerance`` from its first value; :func:`never` where it does not (or where the
    reference is undefined, a resample without any unit of the measure)."""
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0 (nats or accuracy points), got {tolerance}")
    m = np.asarray(means, dtype=float)
    if m.shape[-1] != len(counts):
        raise ValueError(f"{m.shape[-1]} curve values for {len(counts)} counts")
    worse = (m[..., :1] - m) if higher_is_better else (m - m[..., :1])
    bad = worse > tolerance
    first = np.where(bad.any(-1), np.argmax(bad, axis=-1), len(counts))
    lookup = np.array([*counts, never(counts)])
    return lookup[first]


@dataclass(frozen=True)
class FailureBootstrap:
    """First failures of several measures on all items and on item resamples.

    Attributes:
        counts: the curve's counts.
        point: measure -> first failure on all items.
        draws: measure -> ``(n_resamples,)`` first failures on the resamples (the same
            resamples for every measure).
        n_items: items resampled.
        level: confidence level of the intervals drawn from it.
    """

    counts: tuple[int, ...]
    point: dict[str, int]
    draws: dict[str, np.ndarray]
    n_items: int
    level: float = 0.95


def failure_bootstrap(tables: dict[str, WindowTable], tolerances: dict[str, float], *, n_resamples: int = 2000,
                      seed: int = 0, level: float = 0.95) -> FailureBootstrap:
    """First failures of every measure of ``tables`` at its tolerance, on all items and on
    ``n_resamples`` resamples of the items (the same for every measure: paired).

    Args:
        tables: measure name -> its :class:`WindowTable` (same counts and items for all).
        tolerances: measure name -> its tolerance (nats for a loss, accuracy points as a
            fraction for an accuracy).
        n_resamples: bootstrap resamples of the items.
        seed: seed of the resampling.
        level: confidence level of the intervals read from the result.
    """
    if not tables:
        raise ValueError("give at least one measure")
    missing = [k for k in tables if k not in tolerances]
    if missing:
        raise ValueError(f"no tolerance for measure(s) {missing}: give tolerances[name] for each")
    first = next(iter(tables.values()))
    for name, t in tables.items():
        if t.counts != first.counts or t.n_items != first.n_items:
            raise ValueError(f"measure {name!r} has other counts or items than {next(iter(tables))!r}: "
                             "every measure must be read on the same curve and items")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be at least 100 for a 95% interval; got {n_resamples}")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, first.n_items, size=(n_resamples, first.n_items))
    point, draws = {}, {}
    for name, t in tables.items():
        point[name] = int(first_failures(t.means(), t.counts, tolerances[name], t.higher_is_better))
        draws[name] = first_failures(t.means(index), t.counts, tolerances[name], t.higher_is_better)
    return FailureBootstrap(first.counts, point, draws, first.n_items, level)


def _percentile(draws: np.ndarray, level: float) -> tuple[float, float]:
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    return float(low), float(high)


def last_passing(failures: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """For first failures read on the grid ``counts``, the count before each: the last one measured
    that still passed (the first count itself where the curve failed there). A curve is measured
    only at the grid's counts, so its failure lies after that count and at or before the first
    failure: between the two."""
    grid = np.array([*counts, never(counts)])
    at = np.searchsorted(grid, np.asarray(failures))
    return grid[np.maximum(at - 1, 0)]


def first_failure_interval(fb: FailureBootstrap, name: str) -> Estimate:
    """The first failure of one measure with its percentile interval over the resamples, widened
    to the grid: its low end is the last count that passed on the resample at the low quantile,
    so that a failure every resample places at one count gets the grid's step, not zero width."""
    if name not in fb.point:
        raise ValueError(f"unknown measure {name!r}; measured: {', '.join(fb.point)}")
    low, _ = _percentile(last_passing(fb.draws[name], fb.counts), fb.level)
    _, high = _percentile(fb.draws[name], fb.level)
    return Estimate(float(fb.point[name]), low, high, fb.n_items, fb.level,
                    f"percentile bootstrap over {fb.n_items} items ({len(fb.draws[name])} resamples), "
                    "at the resolution of the counts")


def failure_gap(fb: FailureBootstrap, average: str, tails: Sequence[str]) -> Estimate:
    """Heads removed by which the ``average`` measure's first failure comes after the earliest of
    the ``tails``' (positive: a tail failed while the average still passed), with its percentile
    interval over the resamples (the earliest tail is taken on each resample)."""
    names = [average, *tails]
    unknown = [n for n in names if n not in fb.point]
    if unknown:
        raise ValueError(f"unknown measure(s) {unknown}; measured: {', '.join(fb.point)}")
    if not tails:
        raise ValueError("give at least one tail measure")
    value = fb.point[average] - min(fb.point[t] for t in tails)
    tail = np.min(np.stack([fb.draws[t] for t in tails]), axis=0)
    # at the grid's resolution: each failure lies after the last count that passed
    lowest = last_passing(fb.draws[average], fb.counts) - tail
    highest = fb.draws[average] - last_passing(tail, fb.counts)
    low, _ = _percentile(lowest, fb.level)
    _, high = _percentile(highest, fb.level)
    return Estimate(float(value), low, high, fb.n_items, fb.level,
                    f"percentile bootstrap over {fb.n_items} items ({len(tail)} resamples), "
                    "at the resolution of the counts")
