"""Checks for chapter 10, "The claims ledger": the pieces of the verdict rule, built by the student.

Every case is built so that its answer is known by construction: data whose bootstrap interval
is known from the normal approximation (a mean of a few hundred values), intervals placed on a
chosen side of a null and of its no-effect band, and per-seed effects whose sign flips can be
counted by hand. The corrections for many tests and the answer-key check are in :mod:`.ch10_more`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats as sps

from deviating.exercises import Case, compare_number, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_bootstrap_interval", "check_verdict_of", "check_sign_flip_pvalue"]

_STATS = ("headlab.stats", "deviating.bands", "deviating.evidence", "deviating.verdicts", "scipy.stats")


# --------------------------------------------------------------------------- a bootstrap interval


def _normal(values: np.ndarray, level: float) -> tuple[float, float, float]:
    """(mean, low, high) of the normal approximation to the bootstrap of the mean: the bootstrap
    resamples with replacement, so its means have the standard deviation of the data (ddof 0)
    over sqrt(n)."""
    m = float(np.mean(values))
    half = float(sps.norm.ppf(0.5 + level / 2)) * float(np.std(values)) / np.sqrt(len(values))
    return m, m - half, m + half


def _compare_interval(got, expected) -> str | None:
    try:
        m, low, high = (float(x) for x in got)
    except (TypeError, ValueError):
        return f"expected (mean, low, high), three numbers; got {type(got).__name__} {got!r}"
    want_m, want_low, want_high = expected
    if abs(m - want_m) > 1e-9 * max(1.0, abs(want_m)):
        return f"the first number must be the mean of the values; got {m:.6g}"
    width, want = high - low, want_high - want_low
    if not low <= m <= high:
        return f"the interval [{low:.4g}, {high:.4g}] does not contain the mean {m:.4g}"
    if want == 0:
        return None if width == 0 else f"every value is the same, yet the interval has width {width:.3g}"
    if not 0.88 <= width / want <= 1.12:
        return (f"the interval's width is {width / want:.2f} times what the sampling spread of a mean at this "
                "level gives: resample the values (with replacement, as many as there are), and read the "
                "level's two tails")
    if abs((low + high) / 2 - m) > 0.1 * want:
        return "the interval is not centred near the mean"
    return None


def _bootstrap_cases() -> list[Case]:
    g = np.random.default_rng(3)
    flat, wide, half = g.normal(1.0, 2.0, 300), g.normal(-0.5, 1.0, 200), g.exponential(1.0, 400)
    return [
        Case("one value repeated: no spread at all", args=(np.full(30, 0.25),), expected=(0.25, 0.25, 0.25),
             hint="every resample has the same mean."),
        Case("300 values, mean about 1, spread 2", args=(flat,), expected=_normal(flat, 0.95),
             hint="a mean of n values varies much less than the values: resample the values, take each "
                  "resample's mean."),
        Case("the same, with n_resamples=4000 and level=0.5", args=(flat,),
             kwargs={"n_resamples": 4000, "level": 0.5}, expected=_normal(flat, 0.5),
             hint="the level sets which tails of the resampled means are cut off."),
        Case("200 values, a 90% interval", args=(wide,), kwargs={"level": 0.9}, expected=_normal(wide, 0.9)),
        Case("400 skewed values", args=(half,), kwargs={"seed": 7}, expected=_normal(half, 0.95), hidden=True),
    ]


def _drawn_bootstrap_cases(rng: np.random.Generator) -> list[Case]:
    """Three samples of 150-400 normal values with drawn centre and spread, at levels 0.95, 0.8 and
    0.5; the expected interval is the normal approximation, within 12% of its width."""
    cases = []
    for level in (0.95, 0.8, 0.5):
        n = int(rng.integers(150, 401))
        values = rng.normal(rng.uniform(-3, 3), rng.uniform(0.2, 4.0), n)
        cases.append(Case(MARK + f": {n} values at level {level}", args=(values,),
                          kwargs={"n_resamples": 4000, "level": level, "seed": int(rng.integers(1000))},
                          expected=_normal(values, level)))
    return cases


def check_bootstrap_interval(fn: Callable) -> None:
    """Check ``bootstrap_interval(values, n_resamples=2000, level=0.95, seed=0)``: ``(mean, low, high)``,
    the mean and its percentile bootstrap interval. Expected: the normal approximation (the width
    within 12%)."""
    run_cases(fn, _bootstrap_cases() + drawn(_drawn_bootstrap_cases), compare=_compare_interval,
              what="a bootstrap interval", forbid=_STATS)


# --------------------------------------------------------------------------- a verdict


_KINDS = ("holds", "significant but inside the band", "inconclusive", "does not hold here", "cannot be judged")


def _compare_kind(got, expected) -> str | None:
    if not isinstance(got, str) or got not in _KINDS:
        return f"expected one of {', '.join(repr(k) for k in _KINDS)}; got {got!r}"
    return None if got == expected else f"got {got!r}"


def _placed(kind: str, null: float, band: float, direction: str, u: Callable[[], float]) -> tuple:
    """An interval ``(effect, low, high)`` of ``kind`` for a claim that predicts ``direction``,
    built on the 'greater' side and mirrored around the null for 'less'; ``u()`` in (0, 1)."""
    edge = band
    if kind == "holds":
        low = edge + 0.05 + u()
        high = low + 0.1 + u()
    elif kind == "inside":
        low = edge * (0.1 + 0.8 * u())  # above the null, below the edge
        high = edge + 0.1 + u()
    elif kind == "spans":
        low, high = -0.1 - u(), edge + 0.1 + u()
    elif kind == "other side":
        high = -0.05 - u()
        low = high - 0.1 - u()
    else:  # "in the band": around the null, within the band
        low, high = -edge * (0.1 + 0.8 * u()), edge * (0.1 + 0.8 * u())
    # the point estimate alone would say "holds" wherever the interval reaches past the edge
    start = max(low, edge) if high > edge else max(low, 0.0)
    effect = start + (high - start) * (0.2 + 0.6 * u())
    sign = 1.0 if direction == "greater" else -1.0
    effect, low, high = null + sign * effect, null + sign * low, null + sign * high
    return (effect, min(low, high), max(low, high))


_EXPECTED = {"holds": "holds", "inside": "significant but inside the band", "spans": "inconclusive",
             "other side": "does not hold here", "in the band": "does not hold here"}


def _verdict_cases() -> list[Case]:
    def case(name, args, kwargs, expected, hint="", hidden=False):
        return Case(name, args=args, kwargs=kwargs, expected=expected, hint=hint, hidden=hidden)

    return [
        case("a clear effect above the null", (0.5, 0.3, 0.7, 0.0, "no harm"), {"band": 0.1}, "holds"),
        case("clear of the null, not of the band", (0.12, 0.05, 0.2, 0.0, "no harm"), {"band": 0.1},
             "significant but inside the band",
             hint="the interval must clear the band's edge, not only the null, to hold."),
        case("an interval across the null", (0.1, -0.1, 0.3, 0.0, "no harm"), {"band": 0.1}, "inconclusive"),
        case("wholly below the null, the claim predicts above", (-0.4, -0.6, -0.2, 0.0, "no harm"),
             {"band": 0.1}, "does not hold here", hint="the data contradict the claim's direction."),
        case("across the null, but wholly inside the band", (0.01, -0.04, 0.05, 0.0, "no harm"),
             {"band": 0.1}, "does not hold here",
             hint="an interval inside the band says the effect, if any, is too small to matter."),
        case("a claim that predicts less", (0.2, 0.1, 0.3, 0.5, "chance"), {"band": 0.05, "direction": "less"},
             "holds", hint="with direction='less', the claim predicts an effect below the null."),
        case("the same numbers, predicting greater", (0.2, 0.1, 0.3, 0.5, "chance"), {"band": 0.05},
             "does not hold here"),
        case("no baseline named", (0.5, 0.3, 0.7, 0.0, ""), {"band": 0.1}, "cannot be judged",
             hint="a number without what it is compared with is no verdict."),
        case("an interval of zero width", (0.5, 0.5, 0.5, 0.0, "no harm"), {"band": 0.1}, "cannot be judged",
             hint="an interval of zero width claims a certainty no measurement has."),
        case("the interval touches the band's edge", (0.3, 0.1, 0.5, 0.0, "no harm"), {"band": 0.1},
             "significant but inside the band", hint="touching the edge is not clearing it."),
        case("a band of zero width", (0.05, 0.01, 0.09, 0.0, "no harm"), {}, "holds",
             hint="band=0 by default: then clearing the null is clearing the band."),
        case("predicting less, just inside the band", (0.46, 0.42, 0.49, 0.5, "chance"),
             {"band": 0.05, "direction": "less"}, "significant but inside the band", hidden=True),
    ]


def _drawn_verdict_cases(rng: np.random.Generator) -> list[Case]:
    """Each kind of interval, in each direction, placed around a drawn null and band; an interval
    that touches the band's edge; and the two refusals (no baseline, zero width)."""
    cases = []
    for direction in ("greater", "less"):
        for kind, expected in _EXPECTED.items():
            null, band = rng.uniform(-1, 1), rng.uniform(0.02, 0.5)
            args = _placed(kind, null, band, direction, lambda: float(rng.uniform(0.01, 0.99)))
            cases.append(Case(MARK + f": {direction}, {kind}", args=(*args, null, "a baseline"),
                              kwargs={"direction": direction, "band": band}, expected=expected))
    for direction, sign in (("greater", 1.0), ("less", -1.0)):
        null, band = int(rng.integers(-8, 9)) / 8, int(rng.integers(1, 8)) / 16  # dyadic: the edge is exact
        touch, far = null + sign * band, null + sign * (band + 0.5)
        cases.append(Case(MARK + f": {direction}, touching the band's edge",
                          args=((touch + far) / 2, min(touch, far), max(touch, far), null, "a baseline"),
                          kwargs={"direction": direction, "band": band}, expected="significant but inside the band"))
    effect = rng.uniform(1, 2)
    cases.append(Case(MARK + ": no baseline", args=(effect, effect - 0.5, effect + 0.5, 0.0, None),
                      kwargs={"band": 0.1}, expected="cannot be judged"))
    cases.append(Case(MARK + ": zero width", args=(effect, effect, effect, 0.0, "a baseline"),
                      kwargs={"band": 0.1}, expected="cannot be judged"))
    return cases


def check_verdict_of(fn: Callable) -> None:
    """Check ``verdict_of(effect, low, high, null, baseline, direction="greater", band=0.0)``: one of
    ``_KINDS``, from where the interval lies against the null and its band."""
    run_cases(fn, _verdict_cases() + drawn(_drawn_verdict_cases), compare=_compare_kind,
              what="a verdict", forbid=_STATS)


# --------------------------------------------------------------------------- a null over seeds


def _flips(positive: list[float], small: list[float]) -> tuple[np.ndarray, float]:
    """Per-seed effects: large positives, and small values (negative or zero) whose sizes add up to
    less than the smallest positive. Only flips of the small ones keep the mean as large, so the
    exact p-value is 2**len(small) / 2**n."""
    values = np.array(positive + small)
    return values, 2.0 ** len(small) / 2.0 ** len(values)


def _sign_cases() -> list[Case]:
    five, _ = _flips([0.4, 0.2, 0.3, 0.5, 0.6], [])
    one_neg, p1 = _flips([1.0, 2.0, 3.0], [-0.5])
    zero, p0 = _flips([1.0, 1.5, 0.7], [0.0])
    mixed, p2 = _flips([2.0, 1.0, 1.2, 1.4, 1.1, 1.3], [-0.3, -0.2])
    return [
        Case("five seeds, all positive", args=(five,), expected=1 / 32,
             hint="of the 32 ways to flip five signs, only one gives a mean as large as the observed one."),
        Case("three equal effects", args=(np.ones(3),), expected=1 / 8,
             hint="the observed signs are one of the assignments: count a mean equal to the observed one."),
        Case("one small negative effect", args=(one_neg,), expected=p1,
             hint="flipping the small negative one makes the mean larger: that counts too."),
        Case("a seed with effect 0", args=(zero,), expected=p0,
             hint="flipping a zero changes nothing: both of its signs count."),
        Case("every effect negative", args=(-one_neg[:3],), expected=1.0,
             hint="no assignment has a smaller mean: the p-value is 1."),
        Case("eight seeds", args=(mixed,), expected=p2, hidden=True),
    ]


def _drawn_sign_cases(rng: np.random.Generator) -> list[Case]:
    """Two sets of 4-9 seeds: positives in [1, 2], up to two small negatives and up to one zero,
    shuffled; and a set whose effects are all negative (p-value 1)."""
    cases = []
    for _ in range(2):
        k, n_neg, n_zero = int(rng.integers(4, 10)), int(rng.integers(0, 3)), int(rng.integers(0, 2))
        small = list(-rng.uniform(0.05, 0.45, n_neg)) + [0.0] * n_zero
        values, p = _flips(list(rng.uniform(1.0, 2.0, k - len(small))), small)
        cases.append(Case(MARK + f": {k} seeds", args=(rng.permutation(values),), expected=p))
    cases.append(Case(MARK + ": every effect negative", args=(-rng.uniform(0.1, 1.0, int(rng.integers(3, 7))),),
                      expected=1.0))
    return cases


def check_sign_flip_pvalue(fn: Callable) -> None:
    """Check ``sign_flip_pvalue(effects)``: the exact one-sided p-value of the mean over seeds under
    sign flips (each seed's sign equally likely under the null)."""
    run_cases(fn, _sign_cases() + drawn(_drawn_sign_cases),
              compare=lambda got, want: compare_number(got, want, atol=1e-12, rtol=1e-9),
              what="a sign-flip p-value", forbid=_STATS)
