"""Per-input metrics that ablations and gradients are measured with.

Every metric maps a model output and its batch to one number **per input**
(shape ``(batch,)``): roles are conditional, so nothing is averaged away before
the reader asks for an average.

* Causal language models: :func:`next_token_loss`, the mean cross-entropy of
  predicting token ``t+1`` from the prefix up to ``t``, over real (non-padding)
  positions, optionally restricted by a ``loss_mask``.
* Encoders such as MiniLM have no language-model head. Two documented choices:
  :func:`cosine_distance` (1 - cosine similarity between the mean-pooled
  sentence embedding and the clean one; 0 for the clean model, so its gradient
  at the clean point is exactly zero), and :func:`retrieval_loss` (can the
  embedding still pick its own clean sentence out of the batch? an InfoNCE loss
  with a stated temperature, which has a non-zero gradient at the clean point
  and so serves gradient importance).
* Annotated items of the synthetic language (:class:`ItemMetric`, built by
  :func:`agreement_metric`, :func:`pronoun_metric`, :func:`copy_metric`): at position ``pos``
  of window ``doc`` the model should prefer one token over others; the accuracy or the logit
  margin, averaged per window.

What a measurement scores is passed as one :class:`Metric` value: a named kind (``"loss"``,
``"cosine"``, ``"retrieval"``) or any callable ``metric(output, batch) -> (rows,)``, and the
``loss_mask`` of the next-token loss::

    sweep(hm, inputs, metric=Metric("loss", loss_mask=on_repeats))
    # a callable is wrapped as Metric(it)
    sweep(hm, windows, metric=agreement_metric(items, vocab, n_windows))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F

__all__ = ["Metric", "METRIC_KINDS", "default_kind", "next_token_loss", "mean_pool", "cosine_distance", "positions",
           "retrieval_loss", "LogitMetric", "ItemMetric", "agreement_metric", "pronoun_metric", "copy_metric"]

METRIC_KINDS = ("loss", "cosine", "retrieval")


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
        kind: ``"loss"`` (next-token loss, causal LMs), ``"cosine"`` or ``"retrieval"``
            (encoders; see the module docstring), ``None`` for the model's default (``"loss"``
            for a causal LM, ``"cosine"`` for an encoder), or a callable
            ``metric(output, batch) -> (rows,)`` (e.g. an :class:`ItemMetric`). A callable's
            ``batch`` holds ``input_ids``, ``attention_mask`` and ``index`` (each row's input in
            the untiled batch, when a sweep tiles the inputs).
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

    def evaluator(self, hm, batch: Mapping[str, torch.Tensor]) -> tuple[str, Callable[[torch.Tensor, int], torch.Tensor]]:
        """``(name, evaluate)`` for the inputs ``batch`` of model ``hm``, where ``evaluate(output, k)``
        scores an output whose batch is ``batch`` tiled ``k`` times, one value per row.

        An encoder's ``"cosine"`` and ``"retrieval"`` compare with the clean pooled embedding of
        ``batch``, computed here (the model must be clean when this is called).
        """
        mask = self.loss_mask
        if mask is not None and mask.shape != batch["input_ids"].shape:
            raise ValueError(f"loss_mask {tuple(mask.shape)} must have the shape of the inputs "
                             f"{tuple(batch['input_ids'].shape)}")
        n = batch["input_ids"].shape[0]
        index = torch.arange(n, device=batch["input_ids"].device)

        def tiled(k: int) -> dict:
            out = {key: v.repeat(k, 1) for key, v in batch.items()}
            out["index"] = index.repeat(k)
            return out

        if callable(self.kind):
            fn = self.kind
            return self.name, lambda output, k: fn(output, tiled(k))
        kind = self.kind or default_kind(hm.causal)
        pooled = None
        if not hm.causal:
            with torch.no_grad():
                pooled = hm.metric(hm.forward(batch), batch)

        def evaluate(output: torch.Tensor, k: int) -> torch.Tensor:
            rows_mask = None if mask is None else mask.repeat(k, 1)
            return hm.metric(output, tiled(k), clean=pooled, kind=kind, loss_mask=rows_mask)

        return kind, evaluate

    def __repr__(self) -> str:
        parts = [] if self.kind is None else [repr(self.kind) if isinstance(self.kind, str) else self.name]
        if self.loss_mask is not None:
            parts.append("loss_mask=...")
        return f"Metric({', '.join(parts)})"


def next_token_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    loss_mask: torch.Tensor | None = None,
    reduction: str = "input",
) -> torch.Tensor:
    """Cross-entropy of next-token prediction.

    Args:
        logits: ``(batch, pos, d_vocab)``.
        input_ids: ``(batch, pos)``.
        attention_mask: ``(batch, pos)``, 1 for real tokens (right padding).
        loss_mask: optional ``(batch, pos)`` bool; position ``t`` counts only if
            ``loss_mask[:, t]`` is True (the prediction *made at* ``t`` of token ``t+1``).
        reduction: ``"input"`` -> ``(batch,)`` mean over counted positions of each input;
            ``"token"`` -> ``(batch, pos - 1)`` with 0 where a position does not count;
            ``"mean"`` -> scalar mean over all counted positions.
    """
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}")
    # (batch, pos-1): loss of predicting input_ids[:, t+1] from logits[:, t]
    losses = F.cross_entropy(
        logits[:, :-1].transpose(1, 2).float(), input_ids[:, 1:], reduction="none"
    )
    counted = torch.ones_like(losses, dtype=torch.bool)
    if attention_mask is not None:
        # both the predicting position and the predicted token must be real
        counted &= attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    if loss_mask is not None:
        if loss_mask.shape != input_ids.shape:
            raise ValueError(f"loss_mask {tuple(loss_mask.shape)} must have the shape of input_ids {tuple(input_ids.shape)}")
        counted &= loss_mask[:, :-1].bool()
    losses = losses * counted
    if reduction == "token":
        return losses
    n = counted.sum(dim=1)
    if reduction == "mean":
        if n.sum() == 0:
            raise ValueError("no position counts towards the loss (all masked out)")
        return losses.sum() / n.sum()
    if reduction == "input":
        if (n == 0).any():
            bad = (n == 0).nonzero().flatten().tolist()
            raise ValueError(f"inputs {bad} have no position that counts towards the loss "
                             "(too short, or masked out by loss_mask)")
        return losses.sum(dim=1) / n
    raise ValueError(f"reduction must be 'input', 'token' or 'mean', not {reduction!r}")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``hidden`` ``(batch, pos, d_model)`` over real positions -> ``(batch, d_model)``.

    This is the pooling all-MiniLM-L6-v2 was trained with.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (batch, pos, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


def cosine_distance(embedding: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """1 - cos(embedding, clean) per input: ``(batch, d)`` x ``(batch, d)`` -> ``(batch,)``."""
    return 1.0 - F.cosine_similarity(embedding.float(), clean.float(), dim=-1)


def retrieval_loss(embedding: torch.Tensor, clean: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Self-retrieval InfoNCE loss per input.

    Input ``i``'s (possibly ablated) embedding scores every clean embedding of
    the batch by cosine similarity / ``temperature``; the loss is the
    cross-entropy of picking its own clean embedding ``i``. ``clean`` may hold
    more rows than ``embedding`` when the batch has been tiled: row ``i`` of
    ``embedding`` is matched to row ``i % len(clean)``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, not {temperature}")
    e = F.normalize(embedding.float(), dim=-1)
    c = F.normalize(clean.float(), dim=-1)
    logits = e @ c.T / temperature  # (batch, n_clean)
    target = torch.arange(len(e), device=e.device) % len(c)
    return F.cross_entropy(logits, target, reduction="none")


def positions(batch: Mapping[str, torch.Tensor], pos: int) -> torch.Tensor:
    """Position ``pos`` of each row of ``batch``, ``(rows,)``; ``-1`` is each row's last real token."""
    rows, length = batch["input_ids"].shape
    if isinstance(pos, bool) or not isinstance(pos, int) or not -1 <= pos < length:
        raise ValueError(f"position {pos!r} is out of range for inputs of {length} positions "
                         "(give 0..pos-1, or -1 for each input's last real token)")
    mask = batch.get("attention_mask")
    last = mask.sum(dim=1) - 1 if mask is not None else torch.full((rows,), length - 1)
    return last if pos == -1 else torch.full((rows,), pos)


@dataclass(frozen=True, eq=False)
class LogitMetric:
    """A causal LM's logits at position ``pos`` of each row (:func:`~headlab.metrics.positions`), one number per row.

    ``score``: ``"logit_diff"`` (logit of ``tokens[0]`` minus that of ``tokens[1]``), ``"prob"``
    (probability of ``tokens[0]``) or ``"kl"`` (``KL(clean || this run)`` of the next-token
    distributions, ``clean`` being the clean run's logits ``(n, pos, d_vocab)``; row ``r`` of a
    tiled batch compares with ``clean[batch["index"][r]]``). Use: ``Metric(LogitMetric("prob", (t,)))``.
    """

    score: str
    tokens: tuple[int, ...] = ()
    pos: int = -1
    clean: torch.Tensor | None = None

    def __post_init__(self) -> None:
        need = {"logit_diff": 2, "prob": 1, "kl": 0}
        if self.score not in need:
            raise ValueError(f"score must be one of {', '.join(map(repr, need))}, not {self.score!r}")
        if len(self.tokens) != need[self.score] or not all(isinstance(t, int) for t in self.tokens):
            raise ValueError(f"{self.score!r} needs {need[self.score]} token id(s), got {self.tokens!r}")
        if (self.clean is None) == (self.score == "kl"):
            raise ValueError("'kl' and only 'kl' needs the clean run's logits (clean=...)")
        object.__setattr__(self, "__name__", self.score)  # the metric's name in results and messages

    def __call__(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One value per row of ``output`` ``(rows, pos, d_vocab)``."""
        if self.tokens and (min(self.tokens) < 0 or max(self.tokens) >= output.shape[-1]):
            raise ValueError(f"token ids {self.tokens} are outside the {output.shape[-1]} logits")
        at, rows = positions(batch, self.pos).to(output.device), torch.arange(len(output), device=output.device)
        logits = output[rows, at].float()
        if self.score == "logit_diff":
            return logits[:, self.tokens[0]] - logits[:, self.tokens[1]]
        if self.score == "prob":
            return logits.softmax(-1)[:, self.tokens[0]]
        index = batch.get("index", rows).to(output.device)
        ref = self.clean.to(output.device)[index, at].float().log_softmax(-1)
        return (ref.exp() * (ref - logits.log_softmax(-1))).sum(dim=-1)


# ------------------------------------------------------------------ annotated items


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


def _ids(vocab: Mapping[str, int], words: Iterable[str]) -> list[int]:
    out = []
    for w in words:
        if w not in vocab:
            raise ValueError(f"token {w!r} is not in the tokenizer's vocabulary")
        out.append(vocab[w])
    return out


def _padded(rows: Sequence[Sequence[int]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([list(r) + [-1] * (width - len(r)) for r in rows], dtype=torch.long)


def agreement_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Subject-verb agreement: the verb form in the text against the same verb in the other number."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.correct for i in items))),
                      _padded([_ids(vocab, [i.wrong]) for i in items]), n_windows, score)


def pronoun_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Pronoun resolution: the right pronoun against the other forms of its case."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.correct for i in items))),
                      _padded([_ids(vocab, i.alternatives) for i in items]), n_windows, score)


def copy_metric(items, vocab: Mapping[str, int], n_windows: int, score: str = "accuracy") -> ItemMetric:
    """Copying (repeated spans, rare words): the target must be the argmax over the vocabulary."""
    items = list(items)
    return ItemMetric(torch.tensor([i.doc for i in items]), torch.tensor([i.pos for i in items]),
                      torch.tensor(_ids(vocab, (i.target for i in items))), None, n_windows, score)
