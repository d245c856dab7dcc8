"""The data tasks the organisms train on, each with its held-out evaluation.

* :class:`RepeatedSpans`: random tokens with one random span repeated at a random
  distance, the data on which induction heads form (``attn-only-1l``, ``attn-only-2l``);
* :class:`SyntheticLanguage`: the annotated language of :mod:`headlab.data.language`,
  evaluated per phenomenon (agreement, pronouns, copying, rare words).

Split out of :mod:`headlab.training.loop` (which re-exports every name) to keep each module
about one thing: here what the models see, there how they are trained and saved.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from headlab.analysis.detect import induction_score, previous_token_score
from headlab.metrics import next_token_loss
from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT

EVAL_SEED = 1234  # the evaluation data is the same whatever the training seed
LANGUAGE_EVAL_SEED = -1  # negative: never drawn for the training stream


# ---------------------------------------------------------------------------- data: repeated spans

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
        idx = torch.arange(n)[None, :]  # (1, n_ctx)
        second_start = (start + period)[:, None]  # (batch, 1)
        in_second = (idx >= second_start) & (idx < second_start + span_len[:, None])  # (batch, n_ctx)
        source = (idx - period[:, None]).clamp(min=0)  # (batch, n_ctx)
        tokens = torch.where(in_second, tokens.gather(1, source), tokens)
        predictable = in_second & (idx > second_start)
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
        while True:
            yield self.sample(batch_size, generator).tokens

    def eval_data(self, n: int) -> SpanBatch:
        return self.sample(n, torch.Generator().manual_seed(EVAL_SEED))

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
        logits, patterns = _run_with_patterns(model, tokens)
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
        return {**dataclasses.asdict(self), "eval_seed": EVAL_SEED}


# ---------------------------------------------------------------------------- data: the synthetic language

@dataclass
class LanguageEval:
    """Fixed evaluation windows of the synthetic language and their items."""

    windows: list  # list[headlab.data.language.Document]
    ids: torch.Tensor  # (n_windows, n_ctx)
    agreement: list
    pronoun: list
    copy: list
    rare: list


@dataclass
class SyntheticLanguage:
    """Next-token prediction on :mod:`headlab.data.language`, packed into full windows of ``n_ctx`` tokens.

    Training batches come from an endless stream: chunks of ``docs_per_chunk``
    documents, each chunk drawn with a seed from the training generator, packed
    (``<bos>`` first, ``drop_last``) and served ``batch_size`` windows at a time.
    Evaluation windows use negative seeds, which the training stream never draws.
    """

    n_ctx: int = 128
    seed_vocab: int = 0
    language_config: dict = field(default_factory=dict)
    docs_per_chunk: int = 256
    kind: str = "synthetic_language"
    version: str = "1"

    def __post_init__(self) -> None:
        from headlab.data.language import Language

        self.lang = Language(self.seed_vocab, **self.language_config)
        self._tok = None

    @property
    def d_vocab(self) -> int:
        return len(self.lang.vocab)

    def tokenizer(self):
        from headlab.data.language import tokenizer

        if self._tok is None:
            self._tok = tokenizer(self.lang)
        return self._tok

    def windows(self, n: int, seed: int) -> list:
        """``n`` full windows from documents sampled with ``seed``."""
        from headlab.data.language import pack

        n_docs = 4 * n * self.n_ctx // 40 + 8  # documents average ~42 tokens
        windows = pack(self.lang.sample(n_docs, seed=seed), self.n_ctx, drop_last=True)
        if len(windows) < n:
            raise RuntimeError(f"{n_docs} documents gave only {len(windows)} windows of {self.n_ctx}; "
                               "the language's documents are shorter than expected")
        return windows[:n]

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        from headlab.data.language import encode, pack

        buffer = torch.empty(0, self.n_ctx, dtype=torch.long)
        while True:
            while len(buffer) < batch_size:
                seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
                docs = self.lang.sample(self.docs_per_chunk, seed=seed)
                buffer = torch.cat([buffer, encode(self.tokenizer(), pack(docs, self.n_ctx, drop_last=True))])
            yield buffer[:batch_size]
            buffer = buffer[batch_size:]

    def eval_data(self, n: int) -> LanguageEval:
        from headlab.data.language import agreement_items, copy_items, encode, pronoun_items, rare_items

        w = self.windows(n, seed=LANGUAGE_EVAL_SEED)
        return LanguageEval(w, encode(self.tokenizer(), w), agreement_items(w), pronoun_items(w),
                            copy_items(w, self.lang), rare_items(w, self.lang))

    @torch.no_grad()
    def evaluate(self, model: GPT, data: LanguageEval, batch_size: int = 64) -> dict[str, Any]:
        """Validation loss, per-phenomenon accuracy and head scores on the fixed evaluation windows.

        ``agreement``: the fraction of verbs whose correct form gets a higher logit
        than the same verb in the other number; ``pronoun``: of pronouns whose
        correct form beats every other form of its case; ``copy``: of tokens
        inside repeated sentences predicted exactly (argmax); ``rare``: of rare
        words seen earlier in the window predicted exactly. Each is given
        overall (``*_acc``) and broken down (``*_by``: by construction, and for
        agreement by attractor, for pronouns by distractor, for rare words by
        whether they are inside a copy).
        """
        vocab = self.tokenizer().get_vocab()
        ids = data.ids.to(model.device)
        logits, losses, scores = [], [], []
        for chunk in ids.split(batch_size):
            out, patterns = _run_with_patterns(model, chunk)
            losses.append(next_token_loss(out, chunk, reduction="token"))
            logits.append(out.float().cpu())
            scores.append(per_input_head_scores(patterns, chunk))
        logits = torch.cat(logits)  # (n_windows, n_ctx, d_vocab)

        def at(item) -> torch.Tensor:
            return logits[item.doc, item.pos]  # (d_vocab,)

        def construction(item, pos: int) -> str:
            return data.windows[item.doc].construction[pos]

        results = {
            "agreement": [(at(i)[vocab[i.correct]] > at(i)[vocab[i.wrong]],
                           {"construction": i.construction, "attractor": i.attractor}) for i in data.agreement],
            "pronoun": [(at(i)[vocab[i.correct]] > max(at(i)[vocab[a]] for a in i.alternatives),
                         {"construction": i.construction, "distractor": i.distractor}) for i in data.pronoun],
            "copy": [(int(at(i).argmax()) == vocab[i.target], {"construction": construction(i, i.pos + 1)})
                     for i in data.copy],
            "rare": [(int(at(i).argmax()) == vocab[i.target], {"in_copy": i.in_copy}) for i in data.rare],
        }
        metrics: dict[str, Any] = {"val_loss": float(torch.cat(losses).mean())}
        for name, rows in results.items():
            metrics[f"{name}_acc"] = sum(bool(ok) for ok, _ in rows) / len(rows) if rows else float("nan")
            metrics[f"{name}_n"] = len(rows)
        for name, rows in results.items():
            by: dict[str, dict[str, dict[str, float]]] = {}
            for ok, labels in rows:
                for key, value in labels.items():
                    cell = by.setdefault(key, {}).setdefault(str(value), {"acc": 0.0, "n": 0})
                    cell["acc"] += bool(ok)
                    cell["n"] += 1
            for table in by.values():
                for cell in table.values():
                    cell["acc"] = round(cell["acc"] / cell["n"], 4)
            metrics[f"{name}_by"] = by
        metrics.update(summarize_head_scores({k: torch.cat([s[k] for s in scores]) for k in scores[0]}))
        return metrics

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "n_ctx": self.n_ctx, "docs_per_chunk": self.docs_per_chunk,
                "eval_seed": LANGUAGE_EVAL_SEED, "language": self.lang.describe()}


def _run_with_patterns(model: GPT, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and each layer's pattern ``(batch, head, q_pos, k_pos)``, through the head interface."""
    hm = HeadModel(model)
    logits, cache = hm.run_with_cache(tokens, names=["pattern"])
    return logits, [cache.pattern(layer) for layer in range(hm.n_layers)]


def per_input_head_scores(patterns: list[torch.Tensor], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Induction and previous-token scores ``(batch, layer, head)`` of each layer's pattern
    (NaN induction score for an input with no repeated token)."""
    return {"induction": torch.stack([induction_score(p, tokens, on_empty="nan") for p in patterns], 1),
            "previous_token": torch.stack([previous_token_score(p) for p in patterns], 1)}


def summarize_head_scores(scores: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Batch means per (layer, head) and the best head of each score.

    ``induction``/``previous_token``: ``n_layers x n_heads`` lists (4 digits);
    ``*_best``: the largest mean; ``*_best_head``: its ``[layer, head]``.
    """
    out: dict[str, Any] = {}
    for name, per_input in scores.items():
        mean = per_input.nanmean(0)  # (layer, head)
        out[f"{name}_best"] = float(mean.max())
        out[f"{name}_best_head"] = list(divmod(int(mean.argmax()), mean.shape[1]))
        out[name] = [[round(float(x), 4) for x in row] for row in mean]
    return out
