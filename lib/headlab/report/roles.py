"""The roles the checklist names (induction heads, orphan heads), each behind one call.

The book defines each role once, in :mod:`headlab.analysis.roles`. Until those definitions are in
the library this checklist is built against, the two calls below hold the report's own rule, stated
in its docstring; when :mod:`headlab.analysis.roles.induction` and
:mod:`headlab.analysis.roles.orphan` exist, these two functions are where the report switches to
them, and nothing else in the report changes.
"""

from __future__ import annotations

import torch

__all__ = ["induction_candidates", "orphan_heads", "ROLE_SOURCES"]

# where each role's definition comes from today (travels in report.json under "roles")
ROLE_SOURCES = {
    "induction": "headlab.report.roles.induction_candidates (the report's rule, until "
                 "headlab.analysis.roles.induction is merged)",
    "orphan": "headlab.report.roles.orphan_heads (the report's rule, until headlab.analysis.roles.orphan is merged)",
}


def induction_candidates(lifts: dict[str, torch.Tensor], min_lift: float, max_candidates: int) -> list[dict]:
    """Induction-head candidates from the induction detector's lift over uniform attention on each
    kind of text (``{kind: (n_layers, n_heads)}``): a head of layer 1 or later whose lift reaches
    ``min_lift`` on at least one kind. Returns at most ``max_candidates`` rows ``{"head": (l, h),
    "lift": {kind: lift}, "found_on": [kinds where it reaches min_lift]}``, strongest best lift
    first (ties by head index)."""
    if not lifts:
        raise ValueError("give the detector's lift on at least one kind of text")
    kinds = list(lifts)
    shape = lifts[kinds[0]].shape
    if any(lifts[k].shape != shape for k in kinds):
        raise ValueError(f"every kind of text needs a lift grid of the same shape {tuple(shape)}")
    rows = []
    for l in range(1, shape[0]):
        for h in range(shape[1]):
            found = [k for k in kinds if float(lifts[k][l, h]) >= min_lift]
            if found:
                best = max(float(lifts[k][l, h]) for k in kinds)
                rows.append({"head": (l, h), "lift": {k: round(float(lifts[k][l, h]), 4) for k in kinds},
                             "found_on": found, "_best": round(best, 6)})
    rows.sort(key=lambda r: (-r["_best"], r["head"]))
    for r in rows:
        del r["_best"]
    return rows[:max_candidates]


def orphan_heads(entropy: torch.Tensor, effect: torch.Tensor, write: torch.Tensor, *, diffuse: float,
                 effect_factor: float, write_factor: float) -> list[tuple[int, int]]:
    """Orphans that matter, by the report's rule: normalised attention entropy at least ``diffuse``
    and a mean ``|effect|`` at least ``effect_factor`` x the mean over heads (and above 0), or a
    write norm at least ``write_factor`` x the median head's (and above 0). Heads in index order."""
    if not (entropy.shape == effect.shape == write.shape):
        raise ValueError(f"entropy {tuple(entropy.shape)}, effect {tuple(effect.shape)} and write "
                         f"{tuple(write.shape)} must be the same (n_layers, n_heads) grid")
    average, median_write = float(effect.mean()), float(write.median())
    out = []
    for l in range(entropy.shape[0]):
        for h in range(entropy.shape[1]):
            if entropy[l, h] < diffuse:
                continue
            matters = effect[l, h] > 0 and effect[l, h] >= effect_factor * average
            writes = write[l, h] > 0 and write[l, h] >= write_factor * median_write
            if matters or writes:
                out.append((l, h))
    return out
