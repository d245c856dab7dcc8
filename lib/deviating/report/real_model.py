"""A language model of real English for the chapters' "same code on a real model" cells: GPT-2
small where the Hugging Face hub is reachable (Colab), else the book's own ``brown-gpt``.

The cells run one code path on whichever model :func:`real_language_model` returns, and the
inputs come from held-out Brown Corpus text for either (:func:`english_inputs` re-tokenizes the
book's held-out sample for a model with another tokenizer). The path is tested offline on a
tiny random GPT-2 (``tests/test_real_model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import headlab
from deviating.data.brown_windows import BrownEval
from headlab.heads.loading import ModelUnavailable
from headlab.heads.model import HeadModel

__all__ = ["HUB_MODEL", "BOOK_MODEL", "LanguageModel", "real_language_model", "english_inputs"]

HUB_MODEL = "gpt2"  # GPT-2 small, 12 layers of 12 heads
BOOK_MODEL = "brown-gpt"  # 4 layers of 4 heads, trained by the book on the Brown Corpus


@dataclass(frozen=True)
class LanguageModel:
    """The model a cell measures and one line saying which it is and why."""

    hm: HeadModel
    note: str

    @property
    def name(self) -> str:
        return self.hm.name


def real_language_model(device: str = "cpu", *, hub: str = HUB_MODEL, fallback: str = BOOK_MODEL,
                        loader=None) -> LanguageModel:
    """``hub`` (GPT-2 small) when it can be loaded, else the book's ``fallback``. ``loader``
    (default :func:`headlab.load`) is what tests replace."""
    load = loader or headlab.load
    try:
        hm = load(hub, device=device)
        return LanguageModel(hm, f"{hub} from the Hugging Face hub: {hm.n_layers} layers of {hm.n_heads} heads")
    except ModelUnavailable:
        hm = load(fallback, device=device)
        return LanguageModel(hm, f"the hub cannot be reached from here, so this is the book's {fallback} "
                                 f"({hm.n_layers} layers of {hm.n_heads} heads, trained on the Brown Corpus); "
                                 f"in Colab the same cell measures {hub}")


def english_inputs(hm: HeadModel, held: BrownEval, brown_tokenizer, *, n: int = 64, half: int | None = None,
                   seed: int = 0) -> BrownEval:
    """``held`` (the book's held-out Brown sample) for ``hm``: itself when ``hm`` reads the Brown
    tokenizer's ids, else the same text re-tokenized by ``hm``'s tokenizer: ``n`` windows of
    ``held.windows.shape[1]`` tokens (cut to ``hm``'s context), repeated halves of ``half``
    tokens of them, and repeated random tokens, each row after the model's first token
    (its ``bos`` or ``eos``)."""
    tok = hm.tokenizer
    if tok is None:
        raise ValueError(f"{hm.name} has no tokenizer to read English with")
    if tok.get_vocab() == brown_tokenizer.get_vocab():
        return held
    width = min(held.windows.shape[1], hm.max_positions or held.windows.shape[1])
    half = half or (width - 1) // 2
    first = next(t for t in (tok.bos_token_id, tok.eos_token_id, 0) if t is not None)
    rows = []
    for row in held.windows:
        ids = tok(brown_tokenizer.decode(row[1:].tolist()), add_special_tokens=False)["input_ids"]
        if len(ids) >= width - 1:
            rows.append([first, *ids[:width - 1]])
        if len(rows) == n:
            break
    if len(rows) < 4:
        raise ValueError(f"only {len(rows)} held-out windows are {width} tokens long for {hm.name}; need 4")
    windows = torch.tensor(rows)
    body = windows[:, 1:half + 1]
    text_repeats = torch.cat([windows[:, :1], body, body], 1)
    g = torch.Generator().manual_seed(seed)
    vocab = int(hm.vocab_size)
    random = torch.stack([torch.randperm(vocab - 1, generator=g)[:half] + 1 for _ in rows])
    random_repeats = torch.cat([windows[:, :1], random, random], 1)
    return BrownEval(windows, text_repeats, random_repeats, half, held.chance, held.baselines)
