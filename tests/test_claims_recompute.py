"""An independent recomputation of every stored verdict (issue 38, "done when").

Written apart from deviating.evidence and deviating.bands: for each stored row, each condition's
one-sided p-value is computed with scipy.stats (t tests over seeds, with the interval from
scipy.stats.t.interval; the sign test for identical seeds; the normal or t reading of an item-level
interval; TOST for an equivalence condition), Holm's step-down is written out here, and the
statuses and the verdict follow the rule as stated in deviating.verdicts. Every stored verdict must
agree.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files

import numpy as np
import pytest
from scipy import stats as sps

BANDS = {"nats": 0.01, "accuracy": 0.01, "auc": 0.05, "share": 0.01, "cosine": 0.01, "rank": 0.05,
         "count": 0.5, "ratio": 0.01}
DECIDES = {"fails": "does not hold here", "small": "significant but inside the band",
           "each": "held in each network trained", "open": "inconclusive"}


def _rows():
    out = []
    for path in sorted((files("deviating") / "results" / "claims").iterdir()):
        if path.name.endswith(".json"):
            for r in json.loads(path.read_text())["rows"]:
                out.append(pytest.param(r, id=f"{path.name[:4]}-{r['claim']}-{r['model'][:24]}"))
    return out


def holm(p):
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    adj, running = np.empty_like(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adj[i] = running
    return adj


def read_interval(effect, low, high, null, greater, level, df):
    """One-sided p from an interval: the side facing the null gives the standard error."""
    d = (effect - null) if greater else (null - effect)
    toward, away = (effect - low, high - effect) if greater else (high - effect, effect - low)
    one_sided = math.isinf(low) or math.isinf(high)
    q = level if one_sided else (1 + level) / 2
    dist = sps.norm if df is None else sps.t(df)
    spread = toward if d >= 0 else away
    if math.isinf(spread):
        return 1.0 if d <= 0 else 0.5
    if spread <= 0:
        spread = max(toward, away)
    return float(dist.sf(d / (spread / dist.ppf(q))))


def condition(r, name, ms):
    null, greater, level = r["null"], r["direction"] == "greater", r["level"]
    kind = r["units"].get(name) or r["unit"]
    w = BANDS[kind]
    lo_b, hi_b = null - w, null + w
    equiv = name in r.get("equivalence", [])
    f = lambda v: float(v)  # noqa: E731 ("inf" strings)
    item = [dict(m, low=f(m["low"]), high=f(m["high"])) for m in ms]
    def exact_tie(m):  # the Clopper-Pearson upper end for 0 events of n, on an effect of exactly 0
        upper = sps.binomtest(0, m["n"]).proportion_ci(confidence_level=level, method="exact").high
        return m["effect"] == 0 and m["low"] in (0.0, -m["high"]) and math.isclose(m["high"], upper, rel_tol=1e-6)

    valid = [(m.get("df") is not None or m["n"] >= 20) and (kind == "accuracy" or not exact_tie(m)) for m in item]
    item_p = [read_interval(m["effect"], m["low"], m["high"], null, greater, level, m.get("df")) for m in item]

    def supports(m):
        if lo_b <= m["low"] and m["high"] <= hi_b:
            return "contradicts"
        above, below = m["low"] > null, m["high"] < null
        return "supports" if (above if greater else below) else "contradicts" if above or below else "spans"

    states = [supports(m) for m in item]
    if len(item) >= 2:
        x = np.array([m["effect"] for m in item])
        mean, n = x.mean(), x.size
        if np.ptp(x) == 0:
            low = high = mean
            p = 1.0 if equiv else sps.binomtest(int(((x > null) if greater else (x < null)).sum()), n, 0.5,
                                                alternative="greater").pvalue
        else:
            low, high = sps.t.interval(level, n - 1, loc=mean, scale=sps.sem(x))
            p = (max(sps.ttest_1samp(x, lo_b, alternative="greater").pvalue,
                     sps.ttest_1samp(x, hi_b, alternative="less").pvalue) if equiv
                 else sps.ttest_1samp(x, null, alternative="greater" if greater else "less").pvalue)
        identical = np.ptp(x) == 0
    else:
        m = item[0]
        mean, low, high, identical = m["effect"], m["low"], m["high"], False
        p = (max(read_interval(mean, low, high, lo_b, True, level, m.get("df")),
                 read_interval(mean, low, high, hi_b, False, level, m.get("df"))) if equiv else item_p[0])
    if identical:
        inside = all(lo_b <= m["low"] and m["high"] <= hi_b for m in item)
        against = all(v and s == "contradicts" for v, s in zip(valid, states))
        clears = all(v and (m["low"] > hi_b if greater else m["high"] < lo_b) for v, m in zip(valid, item))
        outside = all(v and (m["low"] > hi_b or m["high"] < lo_b) for v, m in zip(valid, item))
    else:
        inside, outside = lo_b <= low and high <= hi_b, low > hi_b or high < lo_b
        against = high < null if greater else low > null
        clears = low > null + w if greater else high < null - w
    against = against or (len(item) >= 2 and all(v and s == "contradicts" for v, s in zip(valid, states)))
    excludes = low > null if greater else high < null
    return {"p": float(p), "item_p": item_p, "states": states, "valid": valid, "inside": inside, "against": against,
            "clears": clears, "outside": outside, "equiv": equiv, "excludes": excludes, "across": len(item) >= 2}


def recompute(r) -> str:
    alpha = (1 - r["level"]) / 2
    by: dict[str, list] = {}
    for m in r["measurements"]:
        by.setdefault(m["condition"], []).append(m)
    seeds = {m["seed"] for m in r["measurements"] if m["seed"] is not None}
    if (any(float(m["low"]) == float(m["high"]) for m in r["measurements"])
            or len({tuple(sorted(x["seed"] for x in ms if x["seed"] is not None)) for ms in by.values()}) > 1
            or (seeds and len(seeds) < 3)
            or any(m["seed"] is None and m.get("df") is None and m["n"] < 20 for m in r["measurements"])
            or any(not (r["units"].get(c) or r["unit"]) for c in by)):
        return "cannot be judged"
    judged = [c for c in by if c not in r.get("beside", {})]
    ev = {c: condition(r, c, by[c]) for c in judged}
    adj = dict(zip(judged, holm([ev[c]["p"] for c in judged])))
    item_adj = iter(holm([p for c in judged for p in ev[c]["item_p"]]))
    status = {}
    for c in judged:
        e = ev[c]
        each = bool(seeds) and e["across"] and not e["equiv"] and all(
            [next(item_adj) < alpha and s == "supports" and v for s, v in zip(e["states"], e["valid"])])
        if e["equiv"]:
            status[c] = "holds" if adj[c] < alpha else "fails" if e["outside"] else "open"
        elif adj[c] < alpha and e["excludes"]:
            status[c] = "holds" if e["clears"] else "small"
        elif e["inside"] or e["against"]:
            status[c] = "fails"
        else:
            status[c] = "each" if each else "open"
    rank = ("fails", "small", "each", "open")
    deciding = [r["primary"], *r["required"]]
    bad = sorted((c for c in deciding if status[c] != "holds"), key=lambda c: rank.index(status[c]))
    if bad:
        return DECIDES[status[bad[0]]]
    return "holds" if all(s == "holds" for s in status.values()) else "holds with conditions"


@pytest.mark.parametrize("stored", _rows())
def test_every_stored_verdict_is_recomputed_independently(stored):
    assert stored["schema_version"] == 3, "a row stored by an older rule: re-execute its chapter"
    assert recompute(stored) == stored["verdict"]["kind"], stored["verdict"]["reason"]
