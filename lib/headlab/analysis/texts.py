"""Inputs any model can be scored on: repeated random tokens, whether a model reads English.

A model's limits come from its adapter: ``hm.max_positions`` and ``hm.vocab_size``.

None knows a particular corpus; one's own comes in through :class:`headlab.analysis.atlas.Corpus`.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch

__all__ = ["vocab_size", "token_pool", "repeated_tokens", "special_wrapping", "reads_english",
           "check_lengths"]


def vocab_size(hm) -> int:
    """The number of token ids of ``hm``: its tokenizer's length, else the model's (``hm.vocab_size``)."""
    return len(hm.tokenizer) if hm.tokenizer is not None else hm.vocab_size


def token_pool(hm) -> list[int]:
    """Ids to draw random tokens from: not special, not a placeholder like [unused3] or <extra>."""
    tok = hm.tokenizer
    n = vocab_size(hm)
    if tok is None:
        return list(range(n))
    special = set(tok.all_special_ids)
    tokens = tok.convert_ids_to_tokens(list(range(n)))
    pool = [i for i, t in enumerate(tokens) if i not in special and t is not None
            and not re.fullmatch(r"\[.*\]|<.*>", t)]
    if len(pool) < 2:
        raise ValueError(f"{hm.name}'s vocabulary has too few ordinary tokens to draw random sequences from")
    return pool


def repeated_tokens(pool: Sequence[int] | torch.Tensor, n: int, length: int, generator: torch.Generator,
                    prefix: Sequence[int] = (), suffix: Sequence[int] = ()) -> torch.Tensor:
    """``n`` rows ``prefix + span + span + suffix``, each ``span`` of ``length`` distinct ids from ``pool``.

    Each span is ``pool[torch.randperm(len(pool), generator=generator)[:length]]``, row after
    row; ``1 <= length <= len(pool)``. Returns int64 ids.
    """
    pool = torch.as_tensor(pool, dtype=torch.long)
    if n < 1:
        raise ValueError(f"need n >= 1 rows, got {n}")
    if not 1 <= length <= len(pool):
        raise ValueError(f"length must be in [1, {len(pool)}] (distinct tokens of a pool of {len(pool)}), got {length}")
    span = torch.stack([pool[torch.randperm(len(pool), generator=generator)[:length]] for _ in range(n)])
    before = torch.tensor(list(prefix), dtype=torch.long).expand(n, -1)
    after = torch.tensor(list(suffix), dtype=torch.long).expand(n, -1)
    return torch.cat([before, span, span, after], dim=1)


def _probe_token(tok) -> str:
    """A plain word the tokenizer knows: "a" if it has it, else its first alphabetic non-special token."""
    vocab = tok.get_vocab()
    if "a" in vocab:
        return "a"
    special = set(tok.all_special_tokens)
    words = sorted(t for t in vocab if t not in special)
    return next((t for t in words if t.isalpha()), words[0])


def special_wrapping(tok) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text (``[CLS]`` and ``[SEP]`` for BERT)."""
    probe = _probe_token(tok)
    plain = tok(probe, add_special_tokens=False)["input_ids"]
    wrapped = tok(probe)["input_ids"]
    for start in range(len(wrapped) - len(plain) + 1):
        if wrapped[start:start + len(plain)] == plain:
            return wrapped[:start], wrapped[start + len(plain):]
    return [], []


def reads_english(hm, texts: Sequence[str]) -> bool:
    """Whether ``hm``'s tokenizer reads ``texts`` with at most 5% unknown tokens (and without raising)."""
    tok = hm.tokenizer
    if tok is None:
        return False
    try:
        ids = [i for t in texts for i in tok(t)["input_ids"]]
    except Exception:  # noqa: BLE001 - a closed word-level vocabulary with no unknown token raises
        return False   # (the `tokenizers` library raises a bare Exception): it cannot read English
    if tok.unk_token_id is None:
        return True
    return sum(i == tok.unk_token_id for i in ids) <= 0.05 * len(ids)


def check_lengths(hm, texts) -> None:
    """Raise ``ValueError`` naming the first text longer, in tokens, than the model's maximum
    (a no-op for a token batch, or without a tokenizer or a stated maximum)."""
    limit = hm.max_positions
    if limit is None or not isinstance(texts, list) or hm.tokenizer is None:
        return
    for i, text in enumerate(texts):
        n = len(hm.tokenizer(text)["input_ids"])
        if n > limit:
            raise ValueError(f"text {i + 1} has {n} tokens, more than {hm.name}'s maximum of {limit}; "
                             "shorten or split it")
