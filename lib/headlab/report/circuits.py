"""Check 4 of the checklist, ``circuits``: previous-token -> induction pairs, by the one
definition of each role, on two kinds of text (random repeats and the model's own text,
:mod:`headlab.report.detectors`).

* **Induction heads**: :func:`headlab.roles.induction.induction_heads` on each kind of
  text: the attention half (held-out lift over uniform attention at least
  ``INDUCTION_LIFT``, heads selected on one half of the inputs and measured on the other) and
  the copying half (through the head's OV circuit; not testable on an encoder). The candidates
  of the pair check are the heads whose attention half holds on at least one kind.
* **Previous-token heads**: :func:`headlab.roles.positional.previous_token_heads` on the
  model's own text, on the same split. The heads that play the role (measured lift above the
  threshold) are listed; the pair check tests, as possible feeders, the heads whose measured
  lift beats the decoy null (:attr:`~headlab.roles.positional.FixedKeyHeads.beyond_null`),
  in a layer below a candidate, strongest first: whether one feeds an induction head is for the
  ablation to say.
* **The pair check**: :func:`headlab.roles.induction.induction_dependence`, the one
  computation behind "removing the previous-token head cuts the induction score by ...":
  zero-ablate the feeder and measure the induction head's score on the half of the inputs it
  was *not* selected on, on each kind of text where its attention half holds. A pair is
  *verified* when the lower end of the 95% interval of the share of the score lost is at least
  ``CIRCUIT_MIN_RELATIVE_DROP``.
"""

from __future__ import annotations

from headlab.roles.induction import induction_dependence, induction_heads
from headlab.roles.positional import previous_token_heads
from headlab.heads.head import Head
from headlab.report.data import ReportData
from headlab.report.detectors import own_text_repeats, random_repeats
from headlab.report.thresholds import CIRCUIT_MIN_RELATIVE_DROP, CIRCUIT_TEXTS, MAX_CANDIDATES
from headlab.analysis.atlas import INDUCTION_LENGTH

__all__ = ["circuits_section", "KINDS"]

KINDS = ("random tokens", "own text")
_KEY = {"random tokens": "random", "own text": "own"}


def _r(x, digits: int = 4) -> float | None:
    x = float(x)
    return None if x != x else round(x, digits)


def _est(e) -> dict:
    return {"value": _r(e.value), "low": _r(e.low), "high": _r(e.high), "n": int(e.n)}


def _grid(hm, values: dict) -> list:
    return [[_r(values[Head(l, h)].value) if Head(l, h) in values else None for h in range(hm.n_heads)]
            for l in range(hm.n_layers)]


def circuits_section(hm, seed: int, texts=None, length: int | None = None,
                     data: ReportData | None = None) -> tuple[dict, dict]:
    """Check 4, ``circuits`` (see :mod:`headlab.report.circuits` and :mod:`headlab.report`).

    Args:
        hm: the model.
        seed: the draw of the random repeats and of the own-text sample, and the split of each
            into a selection and a measurement half.
        texts: the model's own texts (the report's inputs), repeated when ``data`` gives no own
            text (see :func:`headlab.report.detectors.own_text_repeats`).
        length: tokens per random span (default: the atlas's ``INDUCTION_LENGTH``).
        data: the model's own data (:class:`~headlab.report.ReportData`), or None.

    Returns:
        The section, and ``{kind: InductionHeads}`` on both kinds of text (the pattern labels read
        the own text's lifts).
    """

    sets = {"random tokens": random_repeats(hm, CIRCUIT_TEXTS, length or INDUCTION_LENGTH, seed),
            "own text": own_text_repeats(hm, texts, seed, data)}
    for kind, ts in sets.items():
        if ts.n_inputs < 4:
            raise ValueError(f"the circuit check selects induction heads on one half of the {kind} and measures them "
                             f"on the other: it needs at least 4 inputs, got {ts.n_inputs}; give at least 4 texts")
    found = {kind: induction_heads(hm, ts.batch, queries=ts.queries, seed=seed) for kind, ts in sets.items()}
    own = found["own text"]
    prev = previous_token_heads(hm, sets["own text"].batch, split=own.split, seed=seed)
    # candidates: the attention half holds on at least one kind; strongest held-out lift first
    cand = sorted({h for f in found.values() for h in f.attends},
                  key=lambda h: (-round(max(found[k].lift[h].value for k in KINDS), 6), h))[:MAX_CANDIDATES]
    top = max((h.layer for h in cand), default=0)
    feeders = [c for c in prev.beyond_null if c.head[0] < top][:MAX_CANDIDATES]
    pairs = []
    for feeder in feeders:
        p = Head(*feeder.head)
        later = [h for h in cand if h.layer > p.layer]
        measured = {}
        for kind, ts in sets.items():
            on_kind = [h for h in later if h in found[kind].attends]
            if on_kind:
                measured[kind] = induction_dependence(hm, ts.batch, [p], on_kind, items=found[kind].split.measure,
                                                      queries=ts.queries, seed=seed)
        for i in later:
            row = {"previous_token": p.to_json(), "induction": i.to_json(),
                   "found_on": [k for k in KINDS if i in found[k].attends]}
            for kind in KINDS:
                d = measured.get(kind, {}).get(i)
                row[_KEY[kind]] = None if d is None else {
                    "clean": _r(d.clean.value), "ablated": _r(d.ablated.value), "drop": _est(d.drop),
                    "relative_drop": _est(d.relative), "passes": bool(d.relative.low >= CIRCUIT_MIN_RELATIVE_DROP)}
            row["verified"] = any(row[_KEY[k]] is not None and row[_KEY[k]]["passes"] for k in KINDS)
            pairs.append(row)

    def best_cut(r) -> float:
        return max(r[_KEY[k]]["relative_drop"]["value"] for k in r["found_on"])

    pairs.sort(key=lambda r: (-round(best_cut(r), 6), r["previous_token"], r["induction"]))
    tested = own.copying_tested
    rows = []
    for h in cand:
        rows.append({"head": h.to_json(), "lift": {k: _est(found[k].lift[h]) for k in KINDS},
                     "found_on": [k for k in KINDS if h in found[k].attends],
                     "copying": _est(own.copying[h]) if tested else None,
                     "induction_head_on": [k for k in KINDS if h in found[k].heads]})
    return {
        "inputs": {kind: ts.source for kind, ts in sets.items()},
        "copying_tested": tested,
        "uniform": {_KEY[k]: _r(found[k].uniform) for k in KINDS},
        "induction_lift": _grid(hm, found["random tokens"].lift), "induction_own_lift": _grid(hm, own.lift),
        "copying": _grid(hm, own.copying) if tested else None,
        "induction_heads": {k: [h.to_json() for h in found[k].heads] for k in KINDS},
        "borderline": {k: [h.to_json() for h in found[k].borderline] for k in KINDS},
        "induction_candidates": rows,
        "found_on_one_kind_only": [{"head": r["head"], "found_on": r["found_on"][0]} for r in rows
                                   if len(r["found_on"]) == 1],
        "previous_token_lift": [[_r(x) for x in row] for row in prev.select_lifts.tolist()],
        "previous_token_threshold": {"threshold": _r(prev.threshold), "null": _r(prev.null_threshold)},
        "previous_token_heads": [{"head": list(c.head), "lift": _est(c.lift)} for c in prev.heads],
        "previous_token_candidates": [{"head": list(c.head), "lift": _est(c.lift)} for c in feeders],
        "pairs": pairs, "verified": [p for p in pairs if p["verified"]],
    }, found
