"""The model's own data, for the checklist: a small plug-in, :class:`ReportData`.

The checklist runs on any model. Three of its checks read better on the model's own kind of
data, which only the model's owner knows:

* the **default texts** the effects are measured on, when none are given (without a plug-in:
  :func:`headlab.analysis.atlas.default_texts`, the hand-annotated English set or random tokens);
* the **own text** of the induction check (without a plug-in: the report's texts, each followed by
  the same tokens again, counting only the queries of the second copy);
* the **per-task margins** (without a plug-in: "not measured", with the reason).

A plug-in is a :class:`ReportData` passed as ``checklist(hm, ..., data=...)``, or, on the
command line, a function of the loaded model returning one (or None):
``python -m headlab report --model NAME --data MODULE:FUNCTION``. The book's models use
``deviating.report:book_data`` (its organisms' span task and synthetic language).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from headlab.heads.head import Head

__all__ = ["ReportData", "tasks_section"]


@dataclass(frozen=True)
class ReportData:
    """What a model's own data adds to the checklist; every field is optional.

    Attributes:
        texts: ``texts(hm, n, seed) -> (inputs, source)``: the default inputs (a list of strings
            or a batch ``{"input_ids", "attention_mask"}``) and one sentence saying what they are.
            More than ``n`` are spread down to ``n`` by the report.
        own_text: ``own_text(hm, seed) -> TargetSet``: the model's own kind of text for the
            induction check, with the key an induction head should read at each query
            (:class:`headlab.report.detectors.TargetSet`).
        task_shares: ``task_shares(hm, n_windows, seed) -> {task: (n_layers, n_heads) tensor}``:
            each head's share of each task's margin, on the ``n_windows`` windows richest in the task.
    """

    texts: Callable | None = None
    own_text: Callable | None = None
    task_shares: Callable | None = None

    def __post_init__(self) -> None:
        for name in ("texts", "own_text", "task_shares"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"ReportData.{name} must be a function or None, got {type(value).__name__}")


def check_data(data) -> ReportData | None:
    """``data`` if it is a :class:`ReportData` or None; else a ``TypeError`` saying what to pass."""
    if data is not None and not isinstance(data, ReportData):
        raise TypeError(f"data must be a headlab.report.ReportData or None, got {type(data).__name__}")
    return data


def tasks_section(hm, mean: torch.Tensor, shares: dict | None, windows: int, share: float) -> dict:
    """Check 6, ``tasks``: the largest share of each task's margin, and the *task specialists*:
    heads carrying at least ``share`` of a task's margin while their mean effect (``mean``, the
    report's metric) is below the median head's. ``shares`` None: not measured."""
    if shares is None:
        return {"measured": False, "why": f"{hm.name} has no annotated tasks here (per-task margins need items of "
                "each task, e.g. agreement, pronouns and copies; ReportData(task_shares=...) gives them)"}
    median = float(mean.median())
    specialists = []
    for task, grid in shares.items():
        for l in range(hm.n_layers):
            for h in range(hm.n_heads):
                if float(grid[l, h]) >= share and float(mean[l, h]) < median:
                    specialists.append({"head": Head(l, h).to_json(), "task": task, "share": round(float(grid[l, h]), 4),
                                        "mean_effect": round(float(mean[l, h]), 5)})
    best = {task: {"head": Head(*divmod(int(s.flatten().argmax()), hm.n_heads)).to_json(),
                   "share": round(float(s.max()), 4)} for task, s in shares.items()}
    return {"measured": True, "windows": windows,
            "shares": {t: [[round(float(x), 4) for x in r] for r in s.tolist()] for t, s in shares.items()},
            "best": best, "specialists": specialists}
