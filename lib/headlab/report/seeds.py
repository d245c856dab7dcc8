"""Check 5 of the checklist, ``seeds``: does what the report found on one checkpoint hold on the same
recipe trained with other seeds?

A head of one trained model is one draw. :func:`seeds_section` compares the single-head effects
of the model with those of its replicas (the same recipe at other seeds, measured on the same
texts): the rank correlation of every head's mean effect, and how many of the model's top heads
are also top heads of each replica. Heads need not keep their index across seeds (a role can move
to another head), so the section also compares how concentrated the work is (the share of the
positive mean effect carried by the ``top_k`` largest heads), which can hold across seeds when the
head ids do not.
"""

from __future__ import annotations

import torch

from headlab.analysis.importance import Importance
from headlab.report.robustness import rank_correlation, top_heads
from headlab.report.thresholds import top_count

__all__ = ["seeds_section", "top_share"]


def top_share(mean: torch.Tensor, k: int) -> float:
    """The share of the summed positive mean effect carried by the ``k`` largest heads (0 if none is positive)."""
    pos = mean.clamp(min=0).flatten()
    total = float(pos.sum())
    return round(float(pos.sort(descending=True).values[:k].sum()) / total, 4) if total > 0 else 0.0


def seeds_section(name: str, imp: Importance, replicas: dict[str, Importance] | None = None,
                  top_k: int | None = None) -> dict:
    """Check 5, ``seeds`` (see the module docstring).

    Args:
        name: the model's name.
        imp: its single-head effects.
        replicas: ``{name: effects}`` of the same recipe at other seeds, on the same texts;
            ``None`` or empty: not tested (the section says so).
        top_k: how many top heads to compare (default :func:`~headlab.report.thresholds.top_count`).
    """
    if not replicas:
        return {"measured": False, "why": f"only {name} was measured: give the same recipe at other seeds "
                "(--replicas NAME-s1 NAME-s2) to test whether its heads replicate", "replicas": []}
    top_k = top_count(imp.n_layers * imp.n_heads) if top_k is None else top_k
    mean = imp.mean()
    top = set(top_heads(mean, top_k))
    rows = []
    for other, r in replicas.items():
        if r.effects.shape != imp.effects.shape:
            raise ValueError(f"{other}'s effects have shape {tuple(r.effects.shape)}, {name}'s "
                             f"{tuple(imp.effects.shape)}: replicas share the recipe and the texts")
        m = r.mean()
        rows.append({"model": other, "spearman_by_head": rank_correlation(mean, m),
                     "top_k_share": top_share(m, top_k),
                     "top_k_shared": len(top & set(top_heads(m, top_k))),
                     "largest_mean": round(float(m.max()), 5)})
    return {"measured": True, "top_k": top_k, "largest_mean": round(float(mean.max()), 5),
            "top_k_share": top_share(mean, top_k), "replicas": rows}
