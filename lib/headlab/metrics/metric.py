"""What a measurement scores: one :class:`Metric` value, and the one place a named kind is turned
into numbers (:meth:`Metric.score`).

Every measurement of the library (the sweep, patching, gradients, the effects) asks a
:class:`Metric` for its values; none of them dispatches on a kind itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import torch

from headlab.metrics.functions import cosine_distance, mean_pool, next_token_loss, retrieval_loss
from headlab.metrics.logits import LogitMetric

__all__ = ["Metric", "METRIC_KINDS", "default_kind"]

METRIC_KINDS = ("loss", "cosine", "retrieval", "kl")
CAUSAL_KINDS = ("loss", "kl")      # read a language-model head
ENCODER_KINDS = ("cosine", "retrieval")  # read the pooled embedding


def default_kind(causal: bool, gradients: bool = False) -> str:
    """The default metric, the one rule every measurement follows when given none.

    ``"loss"`` (the next-token loss) for a causal LM. For an encoder ``"cosine"`` (1 - cos of the
    pooled embedding to the clean one), except where a gradient is taken (``gradients=True``):
    1 - cos is at its minimum at the clean model, so its gradient there is zero, and the
    self-retrieval loss ``"retrieval"`` is used instead.
    """
    if causal:
        return "loss"
    return "retrieval" if gradients else "cosine"


@dataclass(frozen=True, eq=False)
class Metric:
    """What a measurement scores, one value per input: a named kind or a callable, and a loss mask.

    Attributes:
        kind: ``"loss"`` (next-token loss, causal LMs), ``"kl"`` (``KL(clean || run)`` of the
            next-token distribution at each input's last real token, causal LMs), ``"cosine"`` or
            ``"retrieval"`` (encoders; see :mod:`headlab.metrics`), ``None`` for the model's
            default (:func:`default_kind`), or a callable ``metric(output, batch) -> (rows,)``
            (e.g. a :class:`~headlab.metrics.LogitMetric` or an :class:`~headlab.metrics.ItemMetric`).
            A callable's ``batch`` holds ``input_ids``, ``attention_mask`` and ``index`` (each
            row's input in the untiled batch, when a sweep tiles the inputs).
        loss_mask: ``(batch, pos)`` positions whose next-token loss counts (only with the loss).

    Raises:
        ValueError: an unknown kind, or a ``loss_mask`` with a metric that is not the loss.
    """

    kind: str | Callable | None = None
    loss_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if not (self.kind is None or callable(self.kind) or self.kind in METRIC_KINDS):
            raise ValueError(f"unknown metric kind {self.kind!r}: choose from {', '.join(METRIC_KINDS)}, "
                             "or give a callable metric(output, batch) -> (rows,)")
        if self.loss_mask is not None:
            if self.kind not in (None, "loss"):
                raise ValueError(f"loss_mask selects positions of the next-token loss; the metric "
                                 f"{self.name!r} has none: drop loss_mask or use Metric('loss', loss_mask=...)")
            if not isinstance(self.loss_mask, torch.Tensor) or self.loss_mask.dim() != 2:
                raise ValueError(f"loss_mask must be a (batch, pos) tensor, got "
                                 f"{tuple(getattr(self.loss_mask, 'shape', ())) or type(self.loss_mask).__name__}")

    @classmethod
    def of(cls, value: "Metric | str | Callable | None") -> "Metric":
        """``value`` as a :class:`Metric`: itself, or ``Metric(value)`` for a kind, a callable or ``None``."""
        return value if isinstance(value, cls) else cls(value)

    @property
    def name(self) -> str | None:
        """The kind's name (a callable's ``__name__``, else ``"custom"``); ``None`` for the default."""
        if self.kind is None or isinstance(self.kind, str):
            return self.kind
        return getattr(self.kind, "__name__", "custom")

    def bound(self, hm, gradients: bool = False) -> "Metric":
        """This metric for model ``hm``: the default kind filled in (:func:`default_kind`), and
        checked against the model (a causal kind on an encoder, or the reverse, is refused)."""
        if callable(self.kind):
            if isinstance(self.kind, LogitMetric) and not hm.causal:
                raise ValueError(f"{hm.name} is an encoder with no language-model head: a LogitMetric reads "
                                 "logits; use Metric('cosine') or Metric('retrieval')")
            return self
        kind = self.kind or default_kind(hm.causal, gradients)
        if kind in CAUSAL_KINDS and not hm.causal:
            raise ValueError(f"{hm.name} is an encoder with no language-model head: the metric {kind!r} reads "
                             "logits; use Metric('cosine') or Metric('retrieval')")
        if kind in ENCODER_KINDS and hm.causal:
            raise ValueError(f"metric kind {kind!r} is for encoders; {hm.name} is a causal LM (use 'loss', 'kl' "
                             "or a LogitMetric)")
        return self if kind == self.kind else replace(self, kind=kind)

    def reference(self, hm, batch: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """What a bound metric compares each run with, from a clean run of ``batch`` (no gradient):
        the pooled embedding for ``"cosine"``/``"retrieval"``, the logits for ``"kl"``, else None.
        The model must be clean when this is called."""
        if self.kind not in ("cosine", "retrieval", "kl"):
            return None
        with torch.no_grad():
            output = hm.forward(batch)
        return output if self.kind == "kl" else mean_pool(output, batch["attention_mask"])

    def score(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor],
              reference: torch.Tensor | None = None) -> torch.Tensor:
        """The metric of a bound kind (:meth:`bound`) on ``output`` for ``batch``, one value per row.

        ``batch`` may be tiled (its ``index`` names each row's input); ``reference`` is
        :meth:`reference` of the untiled inputs.
        """
        kind = self.kind
        if callable(kind):
            return kind(output, batch)
        rows = output.shape[0]
        index = batch.get("index")
        index = torch.arange(rows, device=output.device) if index is None else index.to(output.device)
        if kind == "loss":
            mask = None if self.loss_mask is None else self.loss_mask.to(output.device)[index]
            return next_token_loss(output, batch["input_ids"], batch["attention_mask"], mask)
        if kind == "kl":
            return LogitMetric("kl", clean=reference)(output, {**batch, "index": index})
        if reference is None:
            raise ValueError(f"the metric {kind!r} compares with the clean run: give reference=metric.reference(hm, batch)")
        pooled = mean_pool(output, batch["attention_mask"])
        if kind == "cosine":
            return cosine_distance(pooled, reference.to(output.device)[index])
        if kind == "retrieval":
            if len(reference) < 2:
                raise ValueError("the retrieval loss ranks each input's embedding among the batch's clean ones: with "
                                 "one input it is 0 whatever the model does; give at least 2 inputs or use 'cosine'")
            return retrieval_loss(pooled, reference.to(output.device))
        raise ValueError(f"metric kind {kind!r} is not bound to a model: call metric.bound(hm) first")

    def evaluator(self, hm, batch: Mapping[str, torch.Tensor], reference_batch: Mapping[str, torch.Tensor] | None = None
                  ) -> tuple[str, Callable[[torch.Tensor, int], torch.Tensor]]:
        """``(name, evaluate)`` for the inputs ``batch`` of model ``hm``, where ``evaluate(output, k)``
        scores an output whose batch is ``batch`` tiled ``k`` times, one value per row.

        A metric that compares with the clean run (``"cosine"``, ``"retrieval"``, ``"kl"``) runs
        it here on ``reference_batch`` (default ``batch``; patching passes the clean inputs while
        it scores runs on the corrupted ones); the model must be clean when this is called.
        """
        mask = self.loss_mask
        if mask is not None and mask.shape != batch["input_ids"].shape:
            raise ValueError(f"loss_mask {tuple(mask.shape)} must have the shape of the inputs "
                             f"{tuple(batch['input_ids'].shape)}")
        metric = self.bound(hm)
        reference = metric.reference(hm, batch if reference_batch is None else reference_batch)
        index = torch.arange(batch["input_ids"].shape[0], device=batch["input_ids"].device)

        rows = len(index)

        def evaluate(output: torch.Tensor, k: int) -> torch.Tensor:
            tiled = {key: v.repeat(k, 1) for key, v in batch.items() if key != "index"}
            tiled["index"] = index.repeat(k)
            values = metric.score(output, tiled, reference)
            if not isinstance(values, torch.Tensor) or tuple(values.shape) != (k * rows,):
                got = f"shape {tuple(values.shape)}" if isinstance(values, torch.Tensor) else type(values).__name__
                raise ValueError(
                    f"the metric {metric.name!r} returned {got} for a batch of {k * rows} rows ({k} tile(s) of "
                    f"{rows} inputs); a metric must return one value per row, shape ({k * rows},): reduce over "
                    "positions inside the metric, not over inputs (e.g. return loss.mean(dim=1), not loss.mean())")
            return values

        return (self.name if callable(self.kind) else metric.kind), evaluate

    def __repr__(self) -> str:
        parts = [] if self.kind is None else [repr(self.kind) if isinstance(self.kind, str) else self.name]
        if self.loss_mask is not None:
            parts.append("loss_mask=...")
        return f"Metric({', '.join(parts)})"
