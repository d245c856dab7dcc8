"""Check 4 of the checklist, ``circuits``: previous-token -> induction pairs, found by a detector run
on two kinds of text (random repeats and the model's own text, :mod:`headlab.report.detectors`)
and verified by ablation on the kind of text where each induction head was found."""

from __future__ import annotations

import torch

from headlab.analysis.detect import head_scores, lift
from headlab.heads.head import Head
from headlab.report.detectors import TargetSet, own_text_repeats, random_repeats, target_weight
from headlab.report.roles import induction_candidates
from headlab.report.thresholds import (
    CANDIDATE_LIFT, CIRCUIT_MIN_DROP, CIRCUIT_MIN_RELATIVE_DROP, CIRCUIT_TEXTS, MAX_CANDIDATES,
)

__all__ = ["circuits_section", "KINDS"]

KINDS = ("random tokens", "own text")
_KEY = {"random tokens": "random", "own text": "own"}


def _grid(t: torch.Tensor, digits: int = 4) -> list:
    return [[None if x != x else round(float(x), digits) for x in row] for row in t.tolist()]


def _r(x, digits: int = 4) -> float | None:
    x = float(x)
    return None if x != x else round(x, digits)


def _induction(hm, ts: TargetSet) -> tuple[torch.Tensor, float]:
    weight, uniform = target_weight(hm, ts)
    return weight.nanmean(dim=0), float(uniform.nanmean())


def circuits_section(hm, seed: int, texts=None, length: int | None = None) -> tuple[dict, dict]:
    """Check 4, ``circuits`` (see :mod:`headlab.report`).

    Args:
        hm: the model.
        seed: the draw of the random repeats and of the own-text sample.
        texts: the model's own texts (the report's inputs), for a model whose own text the
            library cannot generate (see :func:`headlab.report.detectors.own_text_repeats`).
        length: tokens per random span (default: the atlas's ``INDUCTION_LENGTH``).

    Returns:
        The section, and ``{kind: (n_layers, n_heads) induction score}`` on both kinds of text
        (the pattern labels read it).
    """
    from headlab.analysis.atlas import INDUCTION_LENGTH

    sets = {"random tokens": random_repeats(hm, CIRCUIT_TEXTS, length or INDUCTION_LENGTH, seed),
            "own text": own_text_repeats(hm, texts, seed)}
    induction, uniform = {}, {}
    for kind, ts in sets.items():
        induction[kind], uniform[kind] = _induction(hm, ts)
    lifts = {kind: lift(induction[kind], uniform[kind]).float() for kind in KINDS}
    prev_scores = head_scores(hm, sets["random tokens"].batch, scores=["previous_token"])
    prev, prev_lift = prev_scores.mean("previous_token"), prev_scores.lift("previous_token")
    prev_c = [((l, h), float(prev_lift[l, h])) for l in range(hm.n_layers - 1) for h in range(hm.n_heads)
              if float(prev_lift[l, h]) >= CANDIDATE_LIFT]
    prev_c = sorted(prev_c, key=lambda row: (-round(row[1], 6), row[0]))[:MAX_CANDIDATES]
    ind_c = induction_candidates(lifts, CANDIDATE_LIFT, MAX_CANDIDATES)
    pairs = []
    for p, _ in prev_c:
        later = [c for c in ind_c if c["head"][0] > p[0]]
        if not later:
            continue
        with hm.ablate([p]):
            ablated = {kind: _induction(hm, ts)[0] for kind, ts in sets.items()}
        for c in later:
            i = c["head"]
            row = {"previous_token": Head(*p).to_json(), "induction": Head(*i).to_json(), "found_on": c["found_on"]}
            verified = False
            for kind in KINDS:
                before, after = float(induction[kind][i]), float(ablated[kind][i])
                drop = before - after
                relative = drop / before if before > 0 else 0.0
                ok = drop >= CIRCUIT_MIN_DROP and relative >= CIRCUIT_MIN_RELATIVE_DROP
                row[_KEY[kind]] = {"clean": _r(before), "ablated": _r(after), "drop": _r(drop),
                                   "relative_drop": _r(relative), "passes": bool(ok)}
                verified |= ok and kind in c["found_on"]
            row["verified"] = bool(verified)
            pairs.append(row)
    pairs.sort(key=lambda r: (-max(r[_KEY[k]]["drop"] for k in r["found_on"]), r["previous_token"], r["induction"]))
    one_kind = [c for c in ind_c if len(c["found_on"]) == 1]
    return {
        "inputs": {kind: ts.source for kind, ts in sets.items()},
        "previous_token": _grid(prev), "previous_token_lift": _grid(prev_lift),
        "induction": _grid(induction["random tokens"]), "induction_own": _grid(induction["own text"]),
        "induction_lift": _grid(lifts["random tokens"]), "induction_own_lift": _grid(lifts["own text"]),
        "uniform": {_KEY[k]: _r(v) for k, v in uniform.items()},
        "previous_token_candidates": [{"head": Head(*h).to_json(), "score": _r(prev[h]), "lift": _r(v)}
                                      for h, v in prev_c],
        "induction_candidates": [{**c, "head": Head(*c["head"]).to_json()} for c in ind_c],
        "found_on_one_kind_only": [{"head": Head(*c["head"]).to_json(), "found_on": c["found_on"][0]}
                                   for c in one_kind],
        "pairs": pairs, "verified": [p for p in pairs if p["verified"]],
    }, induction
