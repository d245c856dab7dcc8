"""The book's one definition of each role a head plays in the indirect-object task, and the circuit.

A role is decided from measurements on clean prompts and their ABC twins
(:mod:`deviating.analysis.ioi`); ``D`` is the model's mean ``logit(IO) - logit(S)`` on the clean
prompts, and a path-patching *effect* is an :func:`~deviating.analysis.ioi.effect_fraction`
(-1: the patch takes away the whole difference between the clean and the ABC run). The roles
follow Wang et al. (2022); the thresholds are the book's, stated here once (:data:`THRESHOLDS`):

* **name mover**: its mean direct share of the metric is at least ``dla`` x D, and at END it
  attends to the IO more than ``attend`` and more than to both copies of the subject together.
* **negative name mover**: attends at END to the IO as a name mover does, but its direct share
  is at most ``-negative_dla`` x D: it writes *against* the name it reads.
* **S-inhibition**: path patching its ABC output into the name movers' queries (summed over the
  name movers) has an effect of at most ``-path``: it tells the name movers where (not) to look.
* **backup name mover**: not a name mover; when the name movers are ablated, its direct share
  rises by more than ``backup`` x D, the 95% interval over prompts above 0.
* **induction**: at S2 it attends to the token after S1 (S1+1) more than ``pattern``.
* **duplicate token**: at S2 it attends to S1 more than ``pattern``.
* **previous token**: at S1+1 it attends to S1 more than ``previous``.

A head gets the first role of this list that it meets (:data:`ROLES` is the order); a head that
meets none has **no role**. The **circuit** is every head with one of the first four roles,
plus every head whose path-patching effect into the S-inhibition heads (query, key and value,
summed over them) is at most ``-path`` (the step back). The attention roles (the last three)
name a pattern; whether such a head matters to the task is the circuit's question, not the role's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from deviating.analysis.ioi import attention_scores, head_dla, logit_diffs, path_patch_senders
from deviating.analysis.ioi_circuit import backup_test, make_ablation
from deviating.data.ioi.prompts import IoiPrompts
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel

__all__ = ["ROLES", "THRESHOLDS", "RoleEvidence", "IoiRoles", "find_roles"]

ROLES = ("name mover", "negative name mover", "S-inhibition", "backup name mover", "induction",
         "duplicate token", "previous token")
THRESHOLDS = {"dla": 0.10, "attend": 0.2, "negative_dla": 0.05, "path": 0.05, "backup": 0.05,
              "pattern": 0.2, "previous": 0.4}


@dataclass
class RoleEvidence:
    """The numbers behind one head's role, each a mean over prompts."""

    dla: float  # direct share of the metric, in units of D
    end_io: float  # attention END -> IO
    end_s: float  # attention END -> S1 + END -> S2
    si_path: float  # path-patching effect into the name movers' queries (summed over them)
    upstream: float  # path-patching effect into the S-inhibition heads' q, k, v (summed)
    backup: float  # rise of the direct share (units of D) when the name movers are ablated
    backup_low: float  # lower end of its 95% interval
    s2_s1_next: float  # attention S2 -> S1+1
    s2_s1: float  # attention S2 -> S1
    prev: float  # attention S1+1 -> S1


@dataclass
class IoiRoles:
    """Each head's role (``None``: no role), the circuit and the evidence."""

    roles: dict[Head, str | None]
    circuit: list[Head]
    evidence: dict[Head, RoleEvidence]
    logit_diff: float  # D
    thresholds: dict[str, float] = field(default_factory=lambda: dict(THRESHOLDS))

    def heads_with(self, role: str) -> list[Head]:
        """The heads given ``role``, in layer order."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}: choose from {', '.join(ROLES)}")
        return sorted(h for h, r in self.roles.items() if r == role)

    def no_role(self) -> list[Head]:
        """The heads that meet no role's definition."""
        return sorted(h for h, r in self.roles.items() if r is None)

    def table(self) -> dict[str, str]:
        """``{role: "L.H, L.H" or "none"}`` for every role and ``"no role"``."""
        fmt = lambda hs: ", ".join(f"{l}.{h}" for l, h in hs) or "none"
        return {**{r: fmt(self.heads_with(r)) for r in ROLES}, "no role": fmt(self.no_role())}


def _name_movers(dla: torch.Tensor, att: dict[str, torch.Tensor], D: float, t: dict) -> tuple[list, list]:
    s = att["END->S1"] + att["END->S2"]
    looks = (att["END->IO"] > t["attend"]) & (att["END->IO"] > s)
    nm = [tuple(x) for x in torch.nonzero(looks & (dla >= t["dla"] * D)).tolist()]
    nnm = [tuple(x) for x in torch.nonzero(looks & (dla <= -t["negative_dla"] * D)).tolist()]
    return nm, nnm


def find_roles(hm: HeadModel, clean: IoiPrompts, corrupted: IoiPrompts, ablation: Ablation | None = None,
               thresholds: dict[str, float] | None = None, seed: int = 0) -> IoiRoles:
    """Measure everything the role definitions need and give each head its role (module docstring).

    ``ablation`` removes the name movers for the backup test (default: mean over the ABC twins,
    as Wang et al. do); ``thresholds`` overrides :data:`THRESHOLDS` (keys must exist there)."""
    t = dict(THRESHOLDS)
    unknown = set(thresholds or {}) - set(t)
    if unknown:
        raise ValueError(f"unknown thresholds {sorted(unknown)}: the keys are {', '.join(THRESHOLDS)}")
    t.update(thresholds or {})
    ablation = ablation if ablation is not None else make_ablation("mean", corrupted, seed)
    D = float(logit_diffs(hm, clean).mean())
    if D <= 0:
        raise ValueError(f"the model's mean logit difference is {D:.3f} <= 0: it does not do the task, "
                         "so no head can be said to do part of it")
    dla = head_dla(hm, clean).mean(0).float()
    att = attention_scores(hm, clean)
    nm, nnm = _name_movers(dla, att, D, t)
    L, H = hm.n_layers, hm.n_heads
    si_path = torch.zeros(L, H)
    for receiver in nm:
        si_path += path_patch_senders(hm, clean, corrupted, receiver, ("q",))[0]
    si = [tuple(x) for x in torch.nonzero(si_path <= -t["path"]).tolist() if tuple(x) not in nm + nnm]
    upstream = torch.zeros(L, H)
    for receiver in si:
        upstream += path_patch_senders(hm, clean, corrupted, receiver).sum(0)
    backup = backup_test(hm, clean, nm, ablation, seed=seed) if nm else None
    roles: dict[Head, str | None] = {}
    evidence = {}
    for l in range(L):
        for h in range(H):
            change = backup.change.get((l, h)) if backup else None
            ev = RoleEvidence(float(dla[l, h]) / D, float(att["END->IO"][l, h]),
                              float(att["END->S1"][l, h] + att["END->S2"][l, h]), float(si_path[l, h]),
                              float(upstream[l, h]), change.value / D if change else 0.0,
                              change.low / D if change else 0.0, float(att["S2->S1+1"][l, h]),
                              float(att["S2->S1"][l, h]), float(att["S1+1->S1"][l, h]))
            evidence[(l, h)] = ev
            meets = {"name mover": (l, h) in nm, "negative name mover": (l, h) in nnm, "S-inhibition": (l, h) in si,
                     "backup name mover": change is not None and ev.backup > t["backup"] and ev.backup_low > 0,
                     "induction": ev.s2_s1_next > t["pattern"], "duplicate token": ev.s2_s1 > t["pattern"],
                     "previous token": ev.prev > t["previous"]}
            roles[(l, h)] = next((r for r in ROLES if meets[r]), None)
    core = [h for h, r in roles.items() if r in ROLES[:4]]
    circuit = sorted(set(core) | {h for h, ev in evidence.items() if ev.upstream <= -t["path"]})
    return IoiRoles(roles, circuit, evidence, D, t)
