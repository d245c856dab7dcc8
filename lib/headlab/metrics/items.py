"""Metrics over annotated items: at position ``pos`` of window ``doc`` the model should prefer
one token over others (the accuracy or the logit margin, averaged per window)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

__all__ = ["ItemMetric"]


@dataclass
class ItemMetric:
    """A per-window metric over annotated items.

    Attributes:
        doc: ``(n_items,)`` window index of each item.
        pos: ``(n_items,)`` position whose logits make the prediction.
        correct: ``(n_items,)`` token id that should win.
        competitors: ``(n_items, max_competitors)`` token ids it must beat, padded with -1;
            ``None``: it must beat every other token (argmax).
        score: ``"accuracy"`` or ``"margin"``.
        n_windows: how many windows the inputs hold (items must index into them).
    """

    doc: torch.Tensor
    pos: torch.Tensor
    correct: torch.Tensor
    competitors: torch.Tensor | None
    n_windows: int
    score: str = "accuracy"

    def __post_init__(self) -> None:
        if self.score not in ("accuracy", "margin"):
            raise ValueError(f"score must be 'accuracy' or 'margin', not {self.score!r}")
        if len(self.doc) == 0:
            raise ValueError("no items: the metric would be undefined")
        if int(self.doc.max()) >= self.n_windows or int(self.doc.min()) < 0:
            raise ValueError(f"items refer to windows outside 0..{self.n_windows - 1}")
        self.__name__ = f"item_{self.score}"

    def restricted(self) -> tuple[torch.Tensor, "ItemMetric"]:
        """``(windows, metric)``: the windows that hold at least one item (the others would score
        NaN), and this metric re-indexed to them — run it on ``ids[windows]``."""
        windows, doc = torch.unique(self.doc, return_inverse=True)
        return windows, ItemMetric(doc, self.pos, self.correct, self.competitors, len(windows), self.score)

    def per_item(self, logits: torch.Tensor) -> torch.Tensor:
        """Scores of every item for logits ``(n_windows, pos, d_vocab)`` of the untiled windows."""
        return self._scores(logits, self.doc, torch.arange(len(self.doc)))

    def _scores(self, logits: torch.Tensor, rows: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Score items ``items`` read from logit rows ``rows`` (equal lengths)."""
        dev = logits.device
        items = items.to(dev)
        at = logits[rows.to(dev), self.pos.to(dev)[items]].float()  # (n, d_vocab)
        correct = self.correct.to(dev)[items][:, None]
        right = at.gather(1, correct)[:, 0]
        if self.competitors is None:
            best_other = at.scatter(1, correct, float("-inf")).max(dim=1).values
        else:
            comp = self.competitors.to(dev)[items]
            best_other = at.gather(1, comp.clamp_min(0)).masked_fill(comp < 0, float("-inf")).max(dim=1).values
        margin = right - best_other
        return (margin > 0).float() if self.score == "accuracy" else margin

    def __call__(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Per-row mean item score for a (possibly tiled) batch of the windows; rows whose window
        holds no item get NaN. Row ``r`` of tile ``t`` holds window ``r - t * n_windows`` (the tiling
        of :func:`headlab.analysis.sweep.sweep`)."""
        n = self.n_windows
        if output.shape[0] % n:
            raise ValueError(f"the metric was built for {n} windows; the batch has {output.shape[0]} rows")
        k = output.shape[0] // n
        dev = output.device
        # an item of window d lives in rows d + n * t, t = 0..k-1
        rows = (self.doc.to(dev)[:, None] + n * torch.arange(k, device=dev)).flatten()
        items = torch.arange(len(self.doc), device=dev).repeat_interleave(k)
        values = self._scores(output, rows, items)
        total = torch.zeros(output.shape[0], device=dev).index_add_(0, rows, values)
        count = torch.zeros(output.shape[0], device=dev).index_add_(0, rows, torch.ones_like(values))
        return total / count  # NaN (0/0) where a window holds no item
