"""Chapter 4's claim rows on relation heads: C4 (content, not position) and C14 (the role recurs).

Each relation result the chapter measured gives, per baseline, the baseline's accuracy on the
measurement inputs and the head's paired lead over it. Before any row is built, a baseline that
is the answer key is refused (:func:`deviating.evidence.refuse_answer_key`): one whose accuracy
on the gold labels is 1.0, or that is the rule that made the gold labels. On the Brown relations
the nearest earlier word of the key's class is that rule (:data:`BROWN_LABELLING_RULES`): its
accuracy is 1.000 on every pair, so no head could ever lead it.

C4 is judged against the contrast the claim names, position: the best fixed offset. A head's
lead over an admissible content baseline (the nearest mention, the nearest noun) is reported
beside the row: a stronger test than the claim asks for, not the claim.
"""

from __future__ import annotations

from collections.abc import Mapping

from headlab.roles.syntactic import OFFSET  # the position baseline of the relation-head definition
from headlab.stats.results import Estimate
from deviating.claim_rows import ClaimRow, Measurement, Refused
from deviating.data.brown_relations import KEY_CLASS
from deviating.evidence import refuse_answer_key

__all__ = ["OFFSET", "BROWN_LABELLING_RULES", "baseline_leads", "answer_keys", "c4_row", "c14_row"]

#: The Brown baselines that made the gold labels (the nearest earlier word of the key's class).
BROWN_LABELLING_RULES = tuple(f"nearest {c}" for c in KEY_CLASS.values())
_BESIDE = "a content baseline: a stronger test than the claim's contrast (position), shown, not counted"

Leads = Mapping[str, tuple[Estimate, Estimate]]  # baseline -> (its accuracy, the head's lead over it)


def baseline_leads(result) -> dict[str, tuple[Estimate, Estimate]]:
    """Per baseline, ``(its accuracy, the head's lead over it)`` of one relation result: a
    ``RelationResult`` (``baselines`` and ``leads``) or a Brown ``CatalogueRow`` (``baseline``,
    ``lead``, ``others`` and ``other_leads``)."""
    if hasattr(result, "leads"):
        return {k: (result.baselines[k], result.leads[k]) for k in result.leads}
    out = {result.baseline_name: (result.baseline, result.lead)}
    leads = dict(getattr(result, "other_leads", ()))
    for name, acc in result.others:
        if name not in leads:
            raise ValueError(f"the catalogue row of {result.kind!r} has no lead over {name!r}: build it with "
                             "deviating.experiments.brown_catalogue.relation_rows")
        out[name] = (acc, leads[name])
    return out


def answer_keys(cells: Mapping[object, Leads], labelling_rules=()) -> dict[str, str]:
    """The baselines of ``cells`` that are the answer key anywhere (accuracy 1.0 on the gold
    labels, or named in ``labelling_rules``), each with the refusal's message."""
    out: dict[str, str] = {}
    for by in cells.values():
        for name, (acc, _) in by.items():
            try:
                refuse_answer_key(name, acc.value, labelling_rule=name in labelling_rules)
            except Refused as err:
                out.setdefault(name, str(err))
    return out


def _refused_note(keys: dict[str, str], cells: Mapping[object, Leads], labelling_rules=()) -> str:
    if not keys:
        return ""
    low = {k: min(by[k][0].value for by in cells.values() if k in by) for k in keys}
    why = {k: ("the rule that made the gold labels" if k in labelling_rules else "the answer key")
           + (f", accuracy {low[k]:.3f} on every input measured" if low[k] >= 1.0
              else f", accuracy {low[k]:.3f} or more")
           for k in keys}
    return "refused baselines: " + "; ".join(f"the {k} ({why[k]})" for k in keys)


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def c4_row(model: str, cells: Mapping[tuple[str, int | None], Leads], *, labelling_rules=(), items: str = "",
           note: str = "") -> ClaimRow:
    """C4 on one model: per relation (and training seed), the lead of the head chosen on the select
    inputs over the best fixed offset on the measurement inputs (null 0, the claim predicts > 0).

    ``cells`` maps ``(relation, seed)`` (seed ``None`` for a pretrained model) to
    :func:`baseline_leads`. Leads over the other admissible baselines are reported beside the row.

    Raises:
        Refused: when the best fixed offset itself is the answer key.
    """
    keys = answer_keys(cells, labelling_rules)
    if OFFSET in keys:
        raise Refused(keys[OFFSET])
    ms, beside = [], {}
    for (relation, seed), by in cells.items():
        if OFFSET not in by:
            raise ValueError(f"C4 on {model}: {relation!r} has no {OFFSET!r} baseline; have {', '.join(by)}")
        ms.append(Measurement.from_estimate(by[OFFSET][1], relation, seed))
    for (relation, seed), by in cells.items():
        for name, (_, lead) in by.items():
            if name != OFFSET and name not in keys:
                condition = f"{relation}, lead over the {name}"
                beside[condition] = _BESIDE
                ms.append(Measurement.from_estimate(lead, condition, seed))
    return ClaimRow("C4", model, "accuracy lead of the head chosen on the select inputs over the best fixed offset",
                    0.0, "best fixed offset (position alone)", "greater", tuple(ms), unit="accuracy",
                    beside=beside, items=items, note=_join(_refused_note(keys, cells, labelling_rules), note))


def c14_row(model: str, cells: Mapping[tuple[str, int], Leads], *, labelling_rules=(), items: str = "",
            note: str = "") -> ClaimRow:
    """C14 on the seeds of one model: does each role recur? Per role and training seed, the lead
    of the head that seed chose for the role (on the select inputs) over the strongest admissible
    baseline on the measurement inputs (the most accurate there; answer keys refused). Heads in
    a layer are interchangeable at initialisation, so the row asks whether the *role* recurs, not
    whether the same head index plays it. The claim speaks of every specialist: every role is
    required; the first is the primary endpoint."""
    keys = answer_keys(cells, labelling_rules)
    ms = []
    for (role, seed), by in cells.items():
        fair = {k: v for k, v in by.items() if k not in keys}
        if not fair:
            raise Refused(f"C14 on {model}: every baseline of {role!r} at seed {seed} is the answer key")
        acc, lead = max(fair.values(), key=lambda v: v[0].value)
        ms.append(Measurement.from_estimate(lead, f"{role} role", seed))
    roles = tuple(dict.fromkeys(m.condition for m in ms))
    return ClaimRow("C14", model, "lead of each seed's own head for the role over the strongest baseline", 0.0,
                    "strongest baseline", "greater", tuple(ms), required=roles, unit="accuracy", items=items,
                    note=_join(_refused_note(keys, cells, labelling_rules), note))
