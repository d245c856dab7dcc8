"""Check 6 of the checklist, ``tasks``: per-task margins, where the model has annotated tasks.

An average effect over all tokens can hide a head that carries one task. For a model of the
book's synthetic language, :func:`tasks_section` measures each head's share of each task's margin
(:func:`deviating.analysis.task_shares.margin_share_lost`: agreement, pronouns, copying) on windows
of the language, and lists the heads that carry a large share of a task while their average
effect is small. Other models have no annotated tasks here; the section says so.
"""

from __future__ import annotations

import torch

from deviating.data.language import synthetic_language
from headlab.analysis.importance import Importance
from deviating.analysis.task_shares import TASKS, margin_share_lost
from headlab.heads.head import Head
from deviating.report.thresholds import TASK_SHARE, TASK_WINDOWS
from deviating.data.language import pack

__all__ = ["tasks_section"]


def tasks_section(hm, imp: Importance, seed: int = 0) -> dict:
    """Check 6, ``tasks`` (see the module docstring). A head is a *task specialist* when it carries
    at least ``TASK_SHARE`` of a task's margin while its mean effect on the report's metric is below
    the median head's."""
    lang = synthetic_language(hm)
    if lang is None:
        return {"measured": False, "why": f"{hm.name} has no annotated tasks in this library (per-task margins "
                "need items such as the synthetic language's agreement, pronouns and copies)"}

    docs = pack(lang.sample(200, seed=seed), n_ctx=64, drop_last=True)
    shares = {task: margin_share_lost(hm, docs, task, n_windows=TASK_WINDOWS) for task in TASKS}
    mean = imp.mean()
    median = float(mean.median())
    specialists = []
    for task, share in shares.items():
        for l in range(hm.n_layers):
            for h in range(hm.n_heads):
                if float(share[l, h]) >= TASK_SHARE and float(mean[l, h]) < median:
                    specialists.append({"head": Head(l, h).to_json(), "task": task, "share": round(float(share[l, h]), 4),
                                        "mean_effect": round(float(mean[l, h]), 5)})
    best = {task: {"head": Head(*divmod(int(s.flatten().argmax()), hm.n_heads)).to_json(),
                   "share": round(float(s.max()), 4)} for task, s in shares.items()}
    return {"measured": True, "windows": TASK_WINDOWS,
            "shares": {t: [[round(float(x), 4) for x in r] for r in s.tolist()] for t, s in shares.items()},
            "best": best, "specialists": specialists}
