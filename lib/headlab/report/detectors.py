"""The two kinds of text the checklist's circuit check runs the induction role on.

The classic test of an induction head (Elhage et al. 2021; Olsson et al. 2022) repeats a
sequence of random tokens and asks whether a head, at the second copy of a token, attends to
the token that followed its first copy. A model trained on a language may never have seen
random tokens, and its copying heads can stay silent on them (the book's chapter 3 shows a
language model's copy head near uniform on random repeats and pointing at the earlier copy on
its own repeated sentences). So the checklist applies the one definition of an
induction head (:func:`headlab.roles.induction.induction_heads`) to both kinds of text:

* :func:`random_repeats`: ``n`` sequences of ``length`` distinct random tokens repeated once
  (:func:`headlab.analysis.atlas.repeated_random_tokens`);
* :func:`own_text_repeats`: the model's own kind of text. A plug-in of the model's own data
  (:class:`headlab.report.ReportData`, ``own_text``) gives it, with the key an induction
  head should read at each query (the book's organisms: the evaluation batch of their span task,
  or windows of their language holding a repeated sentence). Without one: the report's own
  texts, each followed by the same tokens again, counting only the queries of the second copy.

Each is a :class:`TargetSet`: the inputs, the key an induction head should read at each query,
and :attr:`TargetSet.queries`, the queries the role counts (None: every repeated token, the
role's own rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headlab.analysis.atlas import repeated_random_tokens
from headlab.report.data import ReportData, check_data

__all__ = ["TargetSet", "random_repeats", "own_text_repeats", "previous_occurrence_targets"]


@dataclass(frozen=True)
class TargetSet:
    """Inputs and the key an induction head should read at each query.

    Attributes:
        batch: ``{"input_ids", "attention_mask"}``, ``(n_inputs, pos)``.
        targets: ``(n_inputs, q_pos, k_pos)`` bool, True at the target keys of each query
            (a query with no True has no target and does not count).
        source: what the inputs are, in one sentence.
        kind: ``"random tokens"`` or ``"own text"``.
        every_repeat: True when the targets are those of every repeated token (the induction
            role's own rule), so that no query needs to be left out.
    """

    batch: dict
    targets: torch.Tensor
    source: str
    kind: str
    every_repeat: bool = False

    def __post_init__(self) -> None:
        ids = self.batch["input_ids"]
        if self.targets.shape != (*ids.shape, ids.shape[1]):
            raise ValueError(f"targets must be (n_inputs, pos, pos) = {(*ids.shape, ids.shape[1])}; "
                             f"got {tuple(self.targets.shape)}")
        if not bool(self.targets.any()):
            raise ValueError(f"{self.source}: no query has an induction target (the inputs repeat nothing)")

    @property
    def n_inputs(self) -> int:
        """How many inputs."""
        return int(self.batch["input_ids"].shape[0])

    @property
    def queries(self) -> torch.Tensor | None:
        """The queries the induction role counts, for its ``queries`` argument: None when the
        targets are every repeated token's, else ``(n_inputs, pos)`` bool, True at a real query
        with a target."""
        if self.every_repeat:
            return None
        return self.targets.any(-1) & self.batch["attention_mask"].bool().cpu()

    def subset(self, rows) -> "TargetSet":
        """The same set restricted to the inputs ``rows`` (e.g. one half of a split)."""
        rows = torch.as_tensor(list(rows), dtype=torch.long)
        if rows.numel() == 0:
            raise ValueError("a subset needs at least one input")
        return TargetSet({k: v[rows] for k, v in self.batch.items()}, self.targets[rows],
                         f"{self.source} ({rows.numel()} of them)", self.kind, self.every_repeat)


def previous_occurrence_targets(ids: torch.Tensor, real: torch.Tensor, first_query: torch.Tensor) -> torch.Tensor:
    """``(b, q, k)``: for a real query ``i >= first_query[b]`` whose token occurred earlier at
    ``j < i - 1`` (the latest such ``j``), the key ``j + 1``."""
    b, n = ids.shape
    targets = torch.zeros(b, n, n, dtype=torch.bool)
    for r in range(b):
        last: dict[int, int] = {}
        for i in range(n):
            if not real[r, i]:
                continue
            tok = int(ids[r, i])
            j = last.get(tok)
            if j is not None and j < i - 1 and i >= int(first_query[r]):
                targets[r, i, j + 1] = True
            last[tok] = i
    return targets


def random_repeats(hm, n: int, length: int, seed: int) -> TargetSet:
    """Induction targets on ``n`` repeated random sequences (the classic test), drawn with ``seed``."""

    batch = {k: v.cpu() for k, v in repeated_random_tokens(hm, n, length, seed).items()}
    ids, real = batch["input_ids"], batch["attention_mask"].bool()
    targets = previous_occurrence_targets(ids, real, torch.zeros(len(ids), dtype=torch.long))
    return TargetSet(batch, targets, f"{len(ids)} sequences of random tokens, each repeated once (seed {seed})",
                     "random tokens", every_repeat=True)


def own_text_repeats(hm, texts=None, seed: int = 0, data: ReportData | None = None) -> TargetSet:
    """Induction targets on the model's own kind of text (see the module docstring).

    Args:
        hm: the model.
        texts: the texts to repeat (a list of strings or a batch) when ``data`` gives no own text.
        seed: passed to ``data.own_text``.
        data: the model's own data (:class:`~headlab.report.ReportData`), or None.
    """
    if check_data(data) is not None and data.own_text is not None:
        return data.own_text(hm, seed)
    if texts is None:
        raise ValueError(f"no own text for {hm.name}: give its texts to repeat, or ReportData(own_text=...)")
    batch = {k: v.cpu() for k, v in hm.tokenize(texts).items()}
    special = set(getattr(hm.tokenizer, "all_special_ids", None) or [])
    limit = hm.max_positions  # the adapter's limit (None: none known)
    rows, starts, cut = [], [], False
    for ids, mask in zip(batch["input_ids"], batch["attention_mask"].bool()):
        toks = ids[mask].tolist()
        head = 1 if toks and toks[0] in special else 0
        tail = 1 if len(toks) > head and toks[-1] in special else 0
        body = toks[head:len(toks) - tail]
        if limit is not None and 2 * len(body) + head + tail > limit:  # both copies must fit the context
            body, cut = body[:(limit - head - tail) // 2], True
        if len(body) < 2:
            raise ValueError(f"a text of {len(body)} ordinary tokens cannot show induction: give longer texts")
        rows.append(toks[:head] + body + body + toks[len(toks) - tail:])
        starts.append(head + len(body))  # queries from the second copy on
    width = max(map(len, rows))
    pad = hm.tokenizer.pad_token_id if hm.tokenizer is not None and hm.tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor(row)
        mask[r, :len(row)] = 1
    targets = previous_occurrence_targets(ids, mask.bool(), torch.tensor(starts))
    how = " (cut to half the model's context first)" if cut else ""
    return TargetSet({"input_ids": ids, "attention_mask": mask}, targets,
                     f"{len(rows)} of the model's own texts, each followed by the same tokens again{how}", "own text")
