"""Repeated random spans: the sequences on which induction heads form and are measured.

One mechanism makes every repeated sequence of the library: :func:`copy_span` writes a second
copy of a span further on in a row of tokens, and says which targets of the copy are
predictable. Two distributions are built on it:

* :class:`RepeatedSpans`, the training task of the attention-only organisms (``attn-only-1l``,
  ``attn-only-2l``, ``tiny-attn-2l``): random tokens after a ``<bos>``, one span of random
  length copied at a random distance, so no fixed-offset head can find the earlier copy;
* :func:`repeated_tokens` (:mod:`headlab.analysis.texts`, re-exported here): a span of *distinct* tokens drawn from a pool, then the same span
  again (each token of the copy has exactly one earlier occurrence), between optional fixed
  prefix and suffix ids. The atlas (:func:`headlab.analysis.atlas.repeated_random_tokens`),
  the checklist and the exercises measure induction on these.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from deviating.data.head_scores import per_input_head_scores, run_with_patterns, summarize_head_scores
from headlab.analysis.texts import repeated_tokens  # re-exported: the book's callers import it from here
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT

__all__ = ["SPANS_EVAL_SEED", "copy_span", "repeated_tokens", "SpanBatch", "RepeatedSpans"]

SPANS_EVAL_SEED = 1234  # the evaluation data of RepeatedSpans is the same whatever the training seed


def copy_span(tokens: torch.Tensor, start: torch.Tensor, period: torch.Tensor,
              span_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row with its span repeated: ``out[b, start[b] + period[b] + k] = tokens[b, start[b] + k]``
    for ``0 <= k < span_len[b]``; the other positions are ``tokens``' own.

    Args:
        tokens: ``(batch, n)`` token ids (not modified).
        start: ``(batch,)`` first position of the first copy.
        period: ``(batch,)`` distance between the copies, at least ``span_len`` (they do not overlap).
        span_len: ``(batch,)`` length of the span, at least 1.

    Returns:
        ``(out, predictable)``: ``out`` ``(batch, n)``, and ``predictable`` ``(batch, n)`` bool, True at the
        positions of the second copy after its first token (``k >= 1``), whose token an induction
        head can predict from the token before it.
    """
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (batch, n), got shape {tuple(tokens.shape)}")
    if bool((span_len < 1).any()) or bool((period < span_len).any()):
        raise ValueError("every span needs span_len >= 1 and period >= span_len (the copies must not overlap)")
    if bool((start < 0).any()) or bool((start + period + span_len > tokens.shape[1]).any()):
        raise ValueError(f"a second copy would run past the end of the rows (n = {tokens.shape[1]}); "
                         "shorten the span or the period")
    idx = torch.arange(tokens.shape[1])[None, :]  # (1, n)
    second_start = (start + period)[:, None]  # (batch, 1)
    in_second = (idx >= second_start) & (idx < second_start + span_len[:, None])  # (batch, n)
    source = (idx - period[:, None]).clamp(min=0)  # (batch, n)
    out = torch.where(in_second, tokens.gather(1, source), tokens)
    return out, in_second & (idx > second_start)


@dataclass
class SpanBatch:
    """A batch of :class:`RepeatedSpans` sequences and where their repeat is.

    ``tokens[b, start[b] + period[b] + k] == tokens[b, start[b] + k]`` for
    ``0 <= k < span_len[b]``. ``predictable[b, i]`` marks target positions
    ``i`` inside the second copy that an induction head can predict: the
    copy's positions after its first token (``k >= 1``).
    """

    tokens: torch.Tensor  # (batch, n_ctx) int64, BOS at position 0
    start: torch.Tensor  # (batch,) first position of the first copy
    period: torch.Tensor  # (batch,) distance between the copies (>= span_len)
    span_len: torch.Tensor  # (batch,)
    predictable: torch.Tensor  # (batch, n_ctx) bool


@dataclass
class RepeatedSpans:
    """Random tokens ``t0 .. t{n_tokens-1}`` after a BOS, with one span repeated.

    Per sequence, independently: a span length ``L`` uniform in
    ``[min_span, max_span]``, a period ``d`` uniform in ``[L, n_ctx - 1 - L]``
    (copies never overlap), a start ``s`` uniform in ``[1, n_ctx - d - L]``.
    Because ``d`` and ``s`` vary, no fixed-offset (positional) head can find
    the earlier copy: only an induction mechanism can.
    Token ids: ``t{i}`` is ``i``, then ``<bos>``, then ``<pad>``.
    """

    n_tokens: int = 64
    n_ctx: int = 64
    min_span: int = 8
    max_span: int = 31
    kind: str = "repeated_spans"
    version: str = "1"

    def __post_init__(self) -> None:
        if not 1 <= self.min_span <= self.max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {self.min_span}, {self.max_span}")
        if 2 * self.max_span > self.n_ctx - 1:
            raise ValueError(f"two copies of a span of {self.max_span} tokens do not fit after the BOS in "
                             f"n_ctx={self.n_ctx}; need 2 * max_span <= n_ctx - 1")

    @property
    def bos_id(self) -> int:
        return self.n_tokens

    @property
    def pad_id(self) -> int:
        return self.n_tokens + 1

    @property
    def d_vocab(self) -> int:
        return self.n_tokens + 2

    def sample(self, batch_size: int, generator: torch.Generator) -> SpanBatch:
        """Draw ``batch_size`` sequences of ``n_ctx`` tokens (see the class docstring)."""
        B, n, g = batch_size, self.n_ctx, generator

        def uniform_int(low: torch.Tensor | int, count: torch.Tensor | int) -> torch.Tensor:
            """Integers uniform in [low, low + count), count >= 1 (elementwise)."""
            return low + (torch.rand(B, generator=g) * count).long()

        span_len = uniform_int(self.min_span, self.max_span - self.min_span + 1)  # (batch,)
        period = uniform_int(span_len, n - 2 * span_len)  # (batch,) in [L, n - 1 - L]
        start = uniform_int(1, n - period - span_len)  # (batch,) in [1, n - d - L]
        tokens = torch.randint(0, self.n_tokens, (B, n), generator=g)  # (batch, n_ctx)
        tokens[:, 0] = self.bos_id
        tokens, predictable = copy_span(tokens, start, period, span_len)
        return SpanBatch(tokens, start, period, span_len, predictable)

    def tokenizer(self):
        """A ``PreTrainedTokenizerFast`` over ``t0 .. t{n-1}``, ``<bos>`` and ``<pad>`` (whitespace-separated)."""
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        vocab = {f"t{i}": i for i in range(self.n_tokens)}
        vocab.update({"<bos>": self.bos_id, "<pad>": self.pad_id})
        tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", self.bos_id)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", pad_token="<pad>")

    # -- the task interface used by the training loop
    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """An endless stream of ``(batch_size, n_ctx)`` training sequences drawn with ``generator``."""
        while True:
            yield self.sample(batch_size, generator).tokens

    def eval_data(self, n: int) -> SpanBatch:
        """``n`` evaluation sequences, drawn with :data:`SPANS_EVAL_SEED` (the same for every training seed)."""
        return self.sample(n, torch.Generator().manual_seed(SPANS_EVAL_SEED))

    @torch.no_grad()
    def evaluate(self, model: GPT, data: SpanBatch) -> dict[str, Any]:
        """Losses and head scores on the fixed evaluation batch.

        ``loss``: mean next-token loss over all targets; ``loss_repeat``: over
        predictable targets (second copy, k >= 1); ``loss_random``: over the
        others (their best possible loss is ``ln n_tokens``).
        ``induction``/``previous_token``: per (layer, head), the batch mean of
        :func:`~headlab.analysis.detect.induction_score` / ``previous_token_score``.
        """
        tokens = data.tokens.to(model.device)
        logits, patterns = run_with_patterns(model, tokens)
        losses = next_token_loss(logits, tokens, reduction="token")  # (batch, pos-1)
        pred = data.predictable[:, 1:].to(losses.device)  # (batch, pos-1), target i+1 predictable
        return {
            "loss": float(losses.mean()),
            "loss_repeat": float(losses[pred].mean()),
            "loss_random": float(losses[~pred].mean()),
            **summarize_head_scores(per_input_head_scores(patterns, tokens)),
        }

    def phase_change(self, metrics: dict[str, Any]) -> bool:
        """The induction phase change has happened at an evaluation when the best
        head's induction score exceeds 0.3 **and** the loss on predictable
        targets is below half of ``ln n_tokens`` (the loss of a uniform guess)."""
        return metrics["induction_best"] > 0.3 and metrics["loss_repeat"] < 0.5 * math.log(self.n_tokens)

    def describe(self) -> dict[str, Any]:
        """What the task is, as recorded in a checkpoint's provenance."""
        return {**dataclasses.asdict(self), "eval_seed": SPANS_EVAL_SEED}
