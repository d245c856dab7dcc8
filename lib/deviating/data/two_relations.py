"""Two relations at once: the synthetic task of chapters 1 and 2, built so that one head's limit shows.

In :class:`TwoRelations` the answer depends on two tokens found by two different relations,
the previous token and the topic at the start of the sequence, combined asymmetrically. One
attention head that spreads its weight evenly over the two loses which token came from where;
two heads can keep them apart. (Chapter 2 retrains the two-head model with narrower heads.)

The task follows the task protocol of :class:`deviating.training.recipe.Task`, so a recipe of
:data:`deviating.training.recipes.RECIPES` trains it with ``python -m deviating train NAME``.
Sampling is deterministic given the ``torch.Generator`` passed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from deviating.data.head_scores import run_with_patterns
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT

__all__ = ["TWO_RELATIONS_EVAL_SEED", "TwoRelations", "TwoRelationsBatch", "word_tokenizer", "answer_metrics"]

TWO_RELATIONS_EVAL_SEED = 4321  # the evaluation data of TwoRelations is the same whatever the training seed


def word_tokenizer(words: list[str]):
    """A ``PreTrainedTokenizerFast`` with one id per word (in list order), split on whitespace.

    The list must contain ``"<bos>"`` and ``"<pad>"``; the tokenizer adds no special tokens,
    so a text must start with ``<bos>`` itself when the model expects one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if len(set(words)) != len(words):
        raise ValueError("the word list has duplicates")
    for special in ("<bos>", "<pad>"):
        if special not in words:
            raise ValueError(f"the word list needs the special token {special!r}")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=None))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", pad_token="<pad>",
                                   model_max_length=1_000_000, clean_up_tokenization_spaces=False)


def answer_metrics(logits: torch.Tensor, tokens: torch.Tensor, query: torch.Tensor) -> dict[str, torch.Tensor]:
    """Loss and correctness at the answer positions.

    ``query[b, i]`` marks positions whose *next* token is an answer (the prediction made at
    ``i`` of ``tokens[b, i + 1]``). Returns ``loss`` and ``correct``, each ``(n_answers,)``
    in row-major order of ``query``: the cross-entropy (nats) and whether the argmax of the
    logits is the answer.
    """
    losses = next_token_loss(logits, tokens, reduction="token")  # (batch, pos-1)
    at = query[:, :-1]  # (batch, pos-1): the prediction made at i of token i+1
    predicted = logits[:, :-1].argmax(-1)  # (batch, pos-1)
    return {"loss": losses[at], "correct": (predicted == tokens[:, 1:])[at]}


@dataclass
class TwoRelationsBatch:
    """A batch of :class:`TwoRelations` sequences and their ground truth.

    ``query[b, i]`` is True at the ``";"`` positions, whose next token is an answer;
    ``prev[b, i]`` (the position of the letter before the ``";"``) and ``topic`` (always
    position 1) are the two keys an answer depends on; ``same_case[b, i]`` says whether the
    letter before ``";"`` and the topic are both capitals or both lower-case (the answers
    that only an ordered reading of the pair gets right).
    """

    tokens: torch.Tensor  # (batch, n_ctx) int64
    query: torch.Tensor  # (batch, n_ctx) bool
    same_case: torch.Tensor  # (batch, n_ctx) bool, meaningful where query
    topic: int = 1


@dataclass
class TwoRelations:
    """Letters after a topic; after each ``letter ;`` comes the winner of letter and topic.

    A sequence is ``<bos> T  x1 ; y1  x2 ; y2  ...`` with ``n_triples`` triples. The topic
    ``T`` and every ``x`` are letters drawn uniformly from ``n_letters`` letters, half of
    them capitals (``A, B, ...``) and half lower-case (``a, b, ...``). The answer is::

        y = T  if T is a capital  else  x

    so at the ``";"`` the model needs two tokens found by two different relations: the
    previous token ``x`` (a fixed offset) and the topic (a fixed absolute position). The
    rule is asymmetric: swapping ``x`` and ``T`` changes the answer whenever both are
    capitals or both are lower-case. A model that reads the unordered pair ``{x, T}``
    knows the answer only when exactly one of them is a capital (then the answer is the
    capital, whichever it is), so it is right on half the answers plus a coin flip on the
    other half: about 75%.

    Token ids: the capitals, then the lower-case letters, then ``;``, ``<bos>``, ``<pad>``.
    """

    n_letters: int = 16
    n_triples: int = 8
    kind: str = "two_relations"
    version: str = "1"

    def __post_init__(self) -> None:
        if self.n_letters < 4 or self.n_letters % 2 or self.n_letters > 52:
            raise ValueError(f"n_letters must be even and in [4, 52], got {self.n_letters}")
        if self.n_triples < 1:
            raise ValueError(f"n_triples must be >= 1, got {self.n_triples}")

    @property
    def n_ctx(self) -> int:
        return 2 + 3 * self.n_triples

    @property
    def words(self) -> list[str]:
        half = self.n_letters // 2
        capitals = [chr(ord("A") + i) for i in range(half)]
        return capitals + [c.lower() for c in capitals] + [";", "<bos>", "<pad>"]

    @property
    def sep_id(self) -> int:
        return self.n_letters

    @property
    def bos_id(self) -> int:
        return self.n_letters + 1

    @property
    def d_vocab(self) -> int:
        return self.n_letters + 3

    def is_capital(self, ids: torch.Tensor) -> torch.Tensor:
        """True for the ids of capital letters."""
        return ids < self.n_letters // 2

    def answer(self, x: torch.Tensor, topic: torch.Tensor) -> torch.Tensor:
        """The rule: the topic if it is a capital, else the letter before ``;``."""
        return torch.where(self.is_capital(topic), topic, x)

    def sample(self, batch_size: int, generator: torch.Generator) -> TwoRelationsBatch:
        """Draw ``batch_size`` sequences of ``n_ctx`` tokens (see the class docstring)."""
        B, T = batch_size, self.n_triples
        topic = torch.randint(0, self.n_letters, (B, 1), generator=generator)  # (batch, 1)
        x = torch.randint(0, self.n_letters, (B, T), generator=generator)  # (batch, triple)
        y = self.answer(x, topic)  # (batch, triple)
        sep = torch.full_like(x, self.sep_id)
        triples = torch.stack([x, sep, y], dim=-1).reshape(B, 3 * T)  # (batch, 3 * triple)
        bos = torch.full((B, 1), self.bos_id)
        tokens = torch.cat([bos, topic, triples], dim=1)  # (batch, n_ctx)
        query = tokens == self.sep_id  # (batch, n_ctx): the ';' positions
        capital = self.is_capital(tokens)  # (batch, n_ctx)
        prev_capital = torch.cat([capital[:, :1], capital[:, :-1]], dim=1)  # capital[i - 1]
        same_case = prev_capital == self.is_capital(topic)  # (batch, n_ctx)
        return TwoRelationsBatch(tokens, query, same_case & query)

    def tokenizer(self):
        return word_tokenizer(self.words)

    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, None]:
        return self.sample(batch_size, generator).tokens, None

    def train_batches(self, batch_size: int, generator: torch.Generator):
        while True:
            yield self.sample(batch_size, generator).tokens

    def eval_data(self, n: int) -> TwoRelationsBatch:
        return self.sample(n, torch.Generator().manual_seed(TWO_RELATIONS_EVAL_SEED))

    @torch.no_grad()
    def answers(self, model: GPT, data: TwoRelationsBatch, layer: int = 0) -> dict[str, torch.Tensor]:
        """One row per answer (per ``";"``), in row-major order of ``data.query``.

        ``x``/``topic``: the two letters the answer depends on; ``correct``: the argmax
        prediction is the answer; ``loss``: its cross-entropy (nats); ``same_case``: both
        letters capitals or both lower-case; ``prev_weight``/``topic_weight``:
        ``(n_answers, n_heads)``, the attention weight of each head of ``layer`` from the
        ``";"`` to the previous token and to the topic.
        """
        tokens = data.tokens.to(model.device)
        logits, patterns = run_with_patterns(model, tokens)
        query = data.query.to(tokens.device)
        m = answer_metrics(logits, tokens, query)
        qb, qi = torch.nonzero(query, as_tuple=True)  # the ';' positions
        p = patterns[layer]  # (batch, head, q_pos, k_pos)
        return {
            "x": tokens[qb, qi - 1], "topic": tokens[qb, data.topic], "correct": m["correct"],
            "loss": m["loss"], "same_case": data.same_case.to(tokens.device)[qb, qi],
            "prev_weight": p[qb, :, qi, qi - 1], "topic_weight": p[qb, :, qi, data.topic],
        }

    def weight_table(self, answers: dict[str, torch.Tensor], head: int = 0) -> torch.Tensor:
        """``(n_letters, n_letters)``: the mean weight a head puts on the previous letter, for
        each (previous letter, topic) pair (rows, columns), from :meth:`answers`; NaN for a
        pair that does not occur."""
        n = self.n_letters
        flat = answers["x"] * n + answers["topic"]  # (n_answers,)
        total = torch.zeros(n * n).index_add_(0, flat.cpu(), answers["prev_weight"][:, head].float().cpu())
        count = torch.zeros(n * n).index_add_(0, flat.cpu(), torch.ones(len(flat)))
        return (total / count).reshape(n, n)  # 0 / 0 = NaN where a pair never occurs

    @torch.no_grad()
    def evaluate(self, model: GPT, data: TwoRelationsBatch) -> dict[str, Any]:
        """Loss and accuracy on the answers, split by case, and what each head attends to.

        ``loss``/``accuracy``: over every answer. ``accuracy_same_case``: over answers where
        the letter and the topic are both capitals or both lower-case (the order matters);
        ``accuracy_mixed_case``: the others. ``prev_weight``/``topic_weight``: per
        (layer, head), the mean attention weight from the ``";"`` queries to the previous
        token and to the topic.
        """
        layers = range(len(model.blocks))
        per_layer = [self.answers(model, data, layer) for layer in layers]
        a = per_layer[0]
        correct, same = a["correct"].float(), a["same_case"]
        return {
            "loss": float(a["loss"].mean()),
            "accuracy": float(correct.mean()),
            "accuracy_same_case": float(correct[same].mean()),
            "accuracy_mixed_case": float(correct[~same].mean()),
            "prev_weight": [[round(float(v), 4) for v in r["prev_weight"].mean(0)] for r in per_layer],
            "topic_weight": [[round(float(v), 4) for v in r["topic_weight"].mean(0)] for r in per_layer],
        }

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
