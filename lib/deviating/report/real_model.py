"""A language model of real English for the chapters' "same code on a real model" cells: the book's
own ``brown-gpt``, everywhere, unless a reader asks for GPT-2 small.

A chapter's default cells run ``brown-gpt`` on the site, in Colab and on a laptop alike, so the
prose beside them describes what every reader sees. GPT-2 small is an explicit opt-in
(``real_language_model(device, gpt2=True)``) in the chapters' optional GPT-2 sections, whose prose
is written for GPT-2 (what the literature reports, what to look for); it needs the Hugging Face
hub, which Colab reaches and this book's build machine does not. The cells run one code path on
either model, and the inputs come from held-out Brown Corpus text for either
(:func:`english_inputs` re-tokenizes the book's held-out sample for a model with another
tokenizer). The GPT-2 path is tested offline on a tiny random GPT-2 (``tests/test_real_model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import headlab
from deviating.data.brown_windows import BrownEval
from headlab.heads.loading import ModelUnavailable
from headlab.heads.model import HeadModel

__all__ = ["HUB_MODEL", "BOOK_MODEL", "WANG2022_GPT2_HEADS", "reported_heads", "LanguageModel", "real_language_model",
           "english_inputs"]

HUB_MODEL = "gpt2"  # GPT-2 small, 12 layers of 12 heads
BOOK_MODEL = "brown-gpt"  # 4 layers of 4 heads, trained by the book on the Brown Corpus

# The heads of GPT-2 small that Wang et al. (2022) place in three classes of their indirect-object circuit,
# by their own tests on their own sentences, as (layer, head). (The circuit as the ACDC repository
# records it, acdc/ioi/utils.py.) What the chapters' optional GPT-2 sections compare the book's rules with.
WANG2022_GPT2_HEADS: dict[str, tuple[tuple[int, int], ...]] = {
    "previous-token": ((2, 2), (4, 11)),
    "duplicate-token": ((0, 1), (0, 10), (3, 0)),
    "induction": ((5, 5), (5, 8), (5, 9), (6, 9)),
}


def reported_heads(kind: str) -> str:
    """The heads of :data:`WANG2022_GPT2_HEADS` of ``kind``, written as the book writes heads: ``"2.2 and 4.11"``."""
    if kind not in WANG2022_GPT2_HEADS:
        raise ValueError(f"kind must be one of {sorted(WANG2022_GPT2_HEADS)}, got {kind!r}")
    names = [f"{layer}.{head}" for layer, head in WANG2022_GPT2_HEADS[kind]]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class LanguageModel:
    """The model a cell measures and one line saying which it is and why."""

    hm: HeadModel
    note: str

    @property
    def name(self) -> str:
        return self.hm.name


def real_language_model(device: str = "cpu", *, gpt2: bool = False, hub: str = HUB_MODEL,
                        book: str = BOOK_MODEL, loader=None) -> LanguageModel:
    """The book's ``brown-gpt`` (``book``); GPT-2 small (``hub``) only when ``gpt2=True``.

    Asking for GPT-2 where the hub cannot be reached is an error that says so, not a quiet
    change of model. ``loader`` (default :func:`headlab.load`) is what tests replace.
    """
    if not isinstance(gpt2, bool):
        raise TypeError(f"gpt2 must be True or False, got {gpt2!r}")
    load = loader or headlab.load
    if not gpt2:
        hm = load(book, device=device)
        return LanguageModel(hm, f"the book's {book}: {hm.n_layers} layers of {hm.n_heads} heads, trained on the "
                                 "Brown Corpus (the same model on the site, in Colab and on a laptop)")
    try:
        hm = load(hub, device=device)
    except ModelUnavailable as err:
        raise ModelUnavailable(f"GPT-2 small ({hub!r}) needs the Hugging Face hub, which cannot be reached from "
                               f"here ({err}). Run this optional section in Colab, or leave it: the chapter's "
                               f"other cells use the book's {book}.") from err
    return LanguageModel(hm, f"{hub} from the Hugging Face hub: {hm.n_layers} layers of {hm.n_heads} heads")


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
