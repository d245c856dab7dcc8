"""Next-token prediction on windows of the Brown Corpus, with an optional repeat curriculum.

:class:`BrownWindows` is a training task (:class:`~deviating.training.recipe.Task`) on real English:

* a byte-level BPE tokenizer of ``vocab_size`` ids is trained on the training texts
  (:func:`deviating.data.brown_tags.train_tokenizer`; id 0, ``<|endoftext|>``, starts every window);
* a window is ``<|endoftext|>`` and then ``n_ctx - 1`` consecutive tokens of **one** text of the
  training split (:func:`deviating.data.brown.split`): windows never straddle two texts;
* with ``repeat_fraction > 0`` (the *repeat curriculum*) that fraction of the training windows
  gets one span of its own text written again further on, as :func:`~deviating.data.spans.copy_span`
  does for :class:`~deviating.data.spans.RepeatedSpans`. This changes the data distribution: such
  a window is no longer natural text. The evaluation data never has it.

The evaluation (:meth:`BrownWindows.evaluate`) is what shows induction heads forming on real
English: the validation loss; the loss on the first and second copy of a repeated span of
validation text and of repeated random tokens; each head's induction and previous-token scores
on the random repeats, beside the scores a uniform causal pattern gets (the chance baseline).
Nothing is downloaded: the corpus comes from the cache (``python -m deviating fetch-brown``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from deviating.data import brown
from deviating.data.brown_tags import train_tokenizer
from deviating.data.head_scores import per_input_head_scores, run_with_patterns, summarize_head_scores
from deviating.data.spans import copy_span, repeated_tokens
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT

__all__ = ["BROWN_EVAL_SEED", "EOT_ID", "BrownBatch", "BrownEval", "BrownWindows", "window_starts",
           "add_repeats", "ngram_baselines"]

BROWN_EVAL_SEED = 1234  # the evaluation data is the same whatever the training seed
EOT, EOT_ID = "<|endoftext|>", 0  # the tokenizer's one special token


@dataclass
class BrownBatch:
    """Training windows and where their repeats are.

    For a row with ``repeated[b]``: ``tokens[b, start[b] + period[b] + k] == tokens[b, start[b] + k]``
    for ``0 <= k < span_len[b]``; for the other rows ``start``, ``period`` and ``span_len`` are 0.
    """

    tokens: torch.Tensor  # (batch, n_ctx) int64, EOT at position 0
    repeated: torch.Tensor  # (batch,) bool
    start: torch.Tensor  # (batch,)
    period: torch.Tensor  # (batch,)
    span_len: torch.Tensor  # (batch,)


@dataclass
class BrownEval:
    """The fixed evaluation data: validation windows, repeated halves of validation windows,
    repeated random tokens, the chance scores and the n-gram baselines."""

    windows: torch.Tensor  # (n, n_ctx)
    text_repeats: torch.Tensor  # (n, 1 + 2 * half): EOT, a span of validation text, the same span
    random_repeats: torch.Tensor  # (n, 1 + 2 * half): EOT, distinct random ids, the same ids
    half: int
    chance: dict[str, float]  # induction / previous_token score of uniform causal attention
    baselines: dict[str, float]  # unigram / bigram validation loss


def window_starts(lengths: list[int], n_ctx: int) -> torch.Tensor:
    """Every start, in a concatenation of texts of ``lengths`` tokens, of ``n_ctx - 1`` consecutive
    tokens that lie inside one text (a text shorter than that has none)."""
    body, offset, out = n_ctx - 1, 0, []
    for length in lengths:
        if length >= body:
            out.append(torch.arange(offset, offset + length - body + 1))
        offset += length
    if not out:
        raise ValueError(f"no text has the {body} tokens a window of n_ctx={n_ctx} needs; lower n_ctx")
    return torch.cat(out)


def add_repeats(tokens: torch.Tensor, fraction: float, min_span: int, max_span: int,
                generator: torch.Generator) -> BrownBatch:
    """``tokens`` with, in each row independently with probability ``fraction``, one span of the
    row repeated further on (:func:`~deviating.data.spans.copy_span`): a length ``L`` uniform in
    ``[min_span, max_span]``, a period ``d`` uniform in ``[L, n - 1 - L]`` and a start uniform in
    ``[1, n - d - L]`` (after the EOT). Draws the same random numbers whatever ``fraction`` is."""
    B, n = tokens.shape
    if not 1 <= min_span <= max_span or 2 * max_span > n - 1:
        raise ValueError(f"need 1 <= min_span <= max_span and 2 * max_span <= n_ctx - 1 = {n - 1}; "
                         f"got min_span={min_span}, max_span={max_span}")
    repeated = torch.rand(B, generator=generator) < fraction
    span_len = min_span + (torch.rand(B, generator=generator) * (max_span - min_span + 1)).long()
    period = span_len + (torch.rand(B, generator=generator) * (n - 2 * span_len)).long()
    start = 1 + (torch.rand(B, generator=generator) * (n - period - span_len)).long()
    out = tokens.clone()
    if bool(repeated.any()):
        out[repeated] = copy_span(tokens[repeated], start[repeated], period[repeated], span_len[repeated])[0]
    zero = torch.zeros_like(span_len)
    return BrownBatch(out, repeated, torch.where(repeated, start, zero), torch.where(repeated, period, zero),
                      torch.where(repeated, span_len, zero))


def ngram_baselines(train: list[torch.Tensor], targets: torch.Tensor, d_vocab: int) -> dict[str, float]:
    """The validation loss of a unigram and of a bigram model counted on the training texts.

    ``targets`` ``(n, n_ctx)`` windows; every token after the first is predicted from the one before.
    The unigram model is add-one smoothed; the bigram one is interpolated with it, with the weight
    (of 0.5, 0.7, 0.8, 0.9, 0.95, 0.99) that does best on ``targets`` (so the baseline is not sold short).
    """
    uni = torch.ones(d_vocab, dtype=torch.float64)
    big = torch.zeros(d_vocab * d_vocab, dtype=torch.float64)
    for ids in train:
        uni += torch.bincount(ids, minlength=d_vocab).double()
        big += torch.bincount(ids[:-1] * d_vocab + ids[1:], minlength=d_vocab * d_vocab).double()
    p_uni = uni / uni.sum()
    big = big.view(d_vocab, d_vocab)
    p_big = big / big.sum(1, keepdim=True).clamp(min=1)
    prev, nxt = targets[:, :-1].reshape(-1), targets[:, 1:].reshape(-1)
    out = {"unigram": float(-p_uni[nxt].log().mean())}
    out["bigram"] = min(float(-(lam * p_big[prev, nxt] + (1 - lam) * p_uni[nxt]).log().mean())
                        for lam in (0.5, 0.7, 0.8, 0.9, 0.95, 0.99))
    return out


@dataclass
class BrownWindows:
    """Windows of Brown Corpus texts, ``<|endoftext|>`` first (see the module docstring).

    Args:
        vocab_size: the BPE tokenizer's size (and the model's ``d_vocab``).
        n_ctx: window length, the EOT included.
        repeat_fraction: the share of training windows given a repeated span (0: natural text only).
        min_span, max_span: the repeated span's length range.
    """

    vocab_size: int = 1024
    n_ctx: int = 128
    repeat_fraction: float = 0.0
    min_span: int = 8
    max_span: int = 32
    kind: str = "brown_windows"
    version: str = "1"

    def __post_init__(self) -> None:
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int) or self.vocab_size < 260:
            raise ValueError(f"vocab_size must be an int >= 260, got {self.vocab_size!r}")
        if isinstance(self.n_ctx, bool) or not isinstance(self.n_ctx, int) or self.n_ctx < 8:
            raise ValueError(f"n_ctx must be an int >= 8, got {self.n_ctx!r}")
        if not isinstance(self.repeat_fraction, (int, float)) or not 0 <= self.repeat_fraction <= 1:
            raise ValueError(f"repeat_fraction must be a number in [0, 1], got {self.repeat_fraction!r}")
        if not 1 <= self.min_span <= self.max_span or 2 * self.max_span > self.n_ctx - 1:
            raise ValueError(f"need 1 <= min_span <= max_span and 2 * max_span <= n_ctx - 1 = {self.n_ctx - 1}; "
                             f"got min_span={self.min_span}, max_span={self.max_span}")
        self._prepared: dict[str, Any] | None = None

    @property
    def d_vocab(self) -> int:
        return self.vocab_size

    def prepared(self, texts: list[brown.Text] | None = None) -> dict[str, Any]:
        """Load the corpus and train the tokenizer once (a few seconds): ``tokenizer``, the token ids of
        each ``train`` and ``validation`` text, and the training ``stream`` and its window ``starts``.

        ``texts`` (default: :func:`deviating.data.brown.load`'s) are read only on the first call;
        a test passes made-up ones."""
        if self._prepared is None:
            parts = brown.split(texts if texts is not None else brown.load())
            docs = {name: [" ".join(brown.detokenize([w for w, _ in s])[0] for s in t.sentences) for t in parts[name]]
                    for name in ("train", "validation")}
            tok = train_tokenizer(docs["train"], self.vocab_size)
            ids = {name: [torch.tensor(e.ids, dtype=torch.long) for e in tok.encode_batch(d)]
                   for name, d in docs.items()}
            self._prepared = {"tokenizer": tok, **ids, "stream": torch.cat(ids["train"]),
                              "starts": window_starts([len(x) for x in ids["train"]], self.n_ctx)}
        return self._prepared

    def tokenizer(self):
        """The BPE tokenizer as a ``PreTrainedTokenizerFast`` (what a checkpoint saves). It puts
        ``<|endoftext|>`` before every text, as every training window starts: a typed sentence reaches
        the model as the windows did."""
        from tokenizers import Tokenizer, processors
        from transformers import PreTrainedTokenizerFast

        tok = Tokenizer.from_str(self.prepared()["tokenizer"].to_str())  # a copy: the task's own encodes bare texts
        tok.post_processor = processors.TemplateProcessing(single=f"{EOT} $A", special_tokens=[(EOT, EOT_ID)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                       eos_token="<|endoftext|>", pad_token="<|endoftext|>")

    def windows(self, stream: torch.Tensor, starts: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` windows ``(n, n_ctx)``: EOT, then ``n_ctx - 1`` tokens of ``stream`` from starts drawn
        uniformly among ``starts``."""
        pick = starts[torch.randint(len(starts), (n,), generator=generator)]
        body = stream[pick[:, None] + torch.arange(self.n_ctx - 1)]
        return torch.cat([torch.full((n, 1), EOT_ID), body], dim=1)

    def sample(self, batch_size: int, generator: torch.Generator) -> BrownBatch:
        """A training batch, repeats included (:func:`add_repeats`)."""
        p = self.prepared()
        tokens = self.windows(p["stream"], p["starts"], batch_size, generator)
        return add_repeats(tokens, self.repeat_fraction, self.min_span, self.max_span, generator)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        while True:
            yield self.sample(batch_size, generator).tokens

    def eval_data(self, n: int) -> BrownEval:
        """``n`` validation windows, ``n // 2`` (at least 8) repeated spans of validation text and as
        many of random tokens, all drawn with :data:`BROWN_EVAL_SEED`."""
        p = self.prepared()
        g = torch.Generator().manual_seed(BROWN_EVAL_SEED)
        val = p["validation"]
        windows = self.windows(torch.cat(val), window_starts([len(x) for x in val], self.n_ctx), n, g)
        half, m = (self.n_ctx - 1) // 2, max(8, n // 2)
        span = windows[:m, 1:half + 1]
        text = torch.cat([windows[:m, :1], span, span], dim=1)
        rand = repeated_tokens(torch.arange(1, self.vocab_size), m, half, g, prefix=[EOT_ID])
        uniform = torch.ones(1, 1, rand.shape[1], rand.shape[1]).tril()
        uniform = uniform / uniform.sum(-1, keepdim=True)
        chance = per_input_head_scores([uniform.expand(m, 1, -1, -1)], rand)
        return BrownEval(windows, text, rand, half, {k: float(v.nanmean()) for k, v in chance.items()},
                         ngram_baselines(p["train"], windows, self.d_vocab))

    @torch.no_grad()
    def evaluate(self, model: GPT, data: BrownEval) -> dict[str, Any]:
        """Losses and head scores on the fixed evaluation data.

        ``val_loss``: the mean next-token loss on validation windows. On the repeats
        (EOT, span, span): ``loss_text_first`` / ``loss_text_second`` and ``loss_random_first`` /
        ``loss_random_second`` are the mean losses on the tokens of the first / second copy after
        its first token (same positions within the span, so the two are comparable).
        ``induction``, ``previous_token`` (per layer and head), their ``*_best`` and ``*_best_head``,
        on the random repeats; ``previous_token_l0``: the best layer-0 head's; ``induction_chance``
        and ``previous_token_chance``: a uniform causal pattern's scores; ``unigram_loss`` and
        ``bigram_loss``: the baselines of :func:`ngram_baselines`.
        """
        device, h = model.device, data.half
        metrics: dict[str, Any] = {"val_loss": float(next_token_loss(model(data.windows.to(device)),
                                                                      data.windows.to(device), reduction="mean"))}
        for name, tokens in (("text", data.text_repeats), ("random", data.random_repeats)):
            tokens = tokens.to(device)
            logits, patterns = run_with_patterns(model, tokens)
            losses = next_token_loss(logits, tokens, reduction="token")  # (n, 2h): target t at index t - 1
            metrics[f"loss_{name}_first"] = float(losses[:, 1:h].mean())  # targets 2..h
            metrics[f"loss_{name}_second"] = float(losses[:, h + 1:].mean())  # targets h+2..2h
            if name == "random":
                metrics.update(summarize_head_scores(per_input_head_scores(patterns, tokens)))
        metrics["previous_token_l0"] = max(metrics["previous_token"][0])
        metrics["induction_chance"] = data.chance["induction"]
        metrics["previous_token_chance"] = data.chance["previous_token"]
        metrics["unigram_loss"], metrics["bigram_loss"] = data.baselines["unigram"], data.baselines["bigram"]
        return metrics

    def phase_change(self, metrics: dict[str, Any]) -> bool:
        """The induction phase change has happened at an evaluation when the loss on the second copy
        of repeated validation text is below half of the first copy's **and** the best head's
        induction score on repeated random tokens is above 5 times chance (a uniform causal pattern's)."""
        return (metrics["loss_text_second"] < 0.5 * metrics["loss_text_first"]
                and metrics["induction_best"] > 5 * metrics["induction_chance"])

    def describe(self) -> dict[str, Any]:
        """What the task is, as recorded in a checkpoint's provenance."""
        return {"kind": self.kind, "version": self.version, "corpus": brown.SPEC, "vocab_size": self.vocab_size,
                "n_ctx": self.n_ctx, "repeat_fraction": self.repeat_fraction, "min_span": self.min_span,
                "max_span": self.max_span, "split": "by text, train", "eval_seed": BROWN_EVAL_SEED}
