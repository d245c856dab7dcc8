"""Next-token prediction on windows of the synthetic language (:mod:`deviating.data.language`).

Two tasks, both packing documents into full windows of ``n_ctx`` tokens that start with ``<bos>``:

* :class:`SyntheticLanguage`: the language organisms (``organism``, ``organism-small-s0..2``), the
  width/depth family of chapter 8 and chapter 7's students; evaluated per phenomenon (agreement,
  pronouns, copying, rare words) on annotated windows (:class:`LanguageEval`);
* :class:`LanguageWindows`: the small models of chapter 2's adjustable-heads widget (``heads-N``),
  packed on token ids (faster) and evaluated on the loss and previous-token scores.

Both draw their evaluation windows from documents of seed :data:`LANGUAGE_EVAL_SEED`, which
their training streams (seeds drawn in ``[0, 2**31 - 1)``) never use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from deviating.data.head_scores import per_input_head_scores, run_with_patterns, summarize_head_scores
from deviating.data.language import (
    Language, agreement_items, copy_items, encode, pack, pronoun_items, rare_items, tokenizer,
)
from headlab.analysis.detect import previous_token_score
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT

__all__ = ["LANGUAGE_EVAL_SEED", "LanguageEval", "SyntheticLanguage", "LanguageWindows"]

LANGUAGE_EVAL_SEED = -1  # negative: never drawn for a training stream


@dataclass
class LanguageEval:
    """Fixed evaluation windows of the synthetic language and their items."""

    windows: list  # list[deviating.data.language.Document]
    ids: torch.Tensor  # (n_windows, n_ctx)
    agreement: list
    pronoun: list
    copy: list
    rare: list


@dataclass
class SyntheticLanguage:
    """Next-token prediction on :mod:`deviating.data.language`, packed into full windows of ``n_ctx`` tokens.

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
        self.lang = Language(self.seed_vocab, **self.language_config)
        self._tok = None

    @property
    def d_vocab(self) -> int:
        return len(self.lang.vocab)

    def tokenizer(self):
        if self._tok is None:
            self._tok = tokenizer(self.lang)
        return self._tok

    def windows(self, n: int, seed: int) -> list:
        """``n`` full windows from documents sampled with ``seed``."""
        n_docs = 4 * n * self.n_ctx // 40 + 8  # documents average ~42 tokens
        windows = pack(self.lang.sample(n_docs, seed=seed), self.n_ctx, drop_last=True)
        if len(windows) < n:
            raise RuntimeError(f"{n_docs} documents gave only {len(windows)} windows of {self.n_ctx}; "
                               "the language's documents are shorter than expected")
        return windows[:n]

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
        buffer = torch.empty(0, self.n_ctx, dtype=torch.long)
        while True:
            while len(buffer) < batch_size:
                seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
                docs = self.lang.sample(self.docs_per_chunk, seed=seed)
                buffer = torch.cat([buffer, encode(self.tokenizer(), pack(docs, self.n_ctx, drop_last=True))])
            yield buffer[:batch_size]
            buffer = buffer[batch_size:]

    def eval_data(self, n: int) -> LanguageEval:
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
            out, patterns = run_with_patterns(model, chunk)
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


@dataclass
class LanguageWindows:
    """Next-token prediction on the synthetic language (:mod:`deviating.data.language`), for the
    small models of chapter 2's adjustable-heads widget.

    Documents are laid end to end, each followed by ``<eos>``, and cut into windows of
    ``n_ctx - 1`` tokens, each window prefixed with ``<bos>`` (the packing of
    :func:`deviating.data.language.pack`, done here on token ids because it is much faster).
    Each training batch packs fresh documents drawn with a seed from the training
    generator; the evaluation windows come from seed :data:`LANGUAGE_EVAL_SEED`.
    Token ids are those of :func:`deviating.data.language.tokenizer`.
    """

    n_ctx: int = 64
    seed_vocab: int = 0
    kind: str = "language_windows"
    version: str = "1"

    def __post_init__(self) -> None:
        self.lang = Language(self.seed_vocab)
        self._ids = {word: i for i, word in enumerate(self.lang.vocab)}

    @property
    def d_vocab(self) -> int:
        return len(self.lang.vocab)

    def tokenizer(self):
        return tokenizer(self.lang)

    def windows(self, n: int, seed: int) -> torch.Tensor:
        """``n`` packed windows ``(n, n_ctx)`` of documents sampled with ``seed``."""
        body = self.n_ctx - 1
        stream: list[int] = []
        n_docs = n * body // 30 + 4  # documents average ~42 tokens: enough, with room to spare
        while len(stream) < n * body:
            for doc in self.lang.sample(n_docs, seed=seed):
                stream += [self._ids[t] for t in doc.tokens] + [self._ids["<eos>"]]
            seed = -abs(seed) - 1_000_003 if seed < 0 else seed + 1_000_003  # rarely needed
        chunks = torch.tensor(stream[: n * body]).reshape(n, body)
        bos = torch.full((n, 1), self._ids["<bos>"])
        return torch.cat([bos, chunks], dim=1)  # (n, n_ctx)

    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, None]:
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        return self.windows(batch_size, seed), None

    def train_batches(self, batch_size: int, generator: torch.Generator):
        while True:
            yield self.train_batch(batch_size, generator)[0]

    def eval_data(self, n: int) -> torch.Tensor:
        return self.windows(n, seed=LANGUAGE_EVAL_SEED)

    @torch.no_grad()
    def evaluate(self, model: GPT, data: torch.Tensor) -> dict[str, Any]:
        """``val_loss``: mean next-token loss on the evaluation windows; ``previous_token``: per
        (layer, head), :func:`headlab.analysis.detect.previous_token_score` averaged over windows."""
        tokens = data.to(model.device)
        logits, patterns = run_with_patterns(model, tokens)
        prev = torch.stack([previous_token_score(p).mean(0) for p in patterns])  # (layer, head)
        return {
            "val_loss": float(next_token_loss(logits, tokens, reduction="mean")),
            "previous_token_best": float(prev.max()),
            "previous_token": [[round(float(v), 4) for v in row] for row in prev],
        }

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "n_ctx": self.n_ctx,
                "language": self.lang.describe()}
