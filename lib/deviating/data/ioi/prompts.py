"""Batches of indirect-object prompts as tokens, with the ground truth in token positions, and
their corrupted twins.

:func:`make_prompts` draws ``n`` prompts (half ABBA, half BABA; names, templates, places and objects
drawn with ``seed``) and tokenizes them: every prompt starts with ``<|endoftext|>`` as the model's
training windows do, and is right-padded with it (id 0 in the book's tokenizers; GPT-2's own id
in GPT-2's, :func:`eot_id`). Because every name is one token, each of ``S1``,
``S2`` and ``IO`` is one position, found from the tokenizer's character offsets;
``END`` is the prompt's last token, where the next-token prediction should be the IO.

:func:`corrupt_abc` is the corrupted dataset of Wang et al. (2022), "ABC": the same template, place
and object, but the three name slots filled with three *different* names, so the prompt no longer
says which name was mentioned once. Its tokens have the same length and positions as the clean ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch

from deviating.data.ioi.sentences import IOI_TEMPLATES, OBJECTS, ORDERS, PLACES, IoiSentence, ioi_sentence

__all__ = ["EOT_ID", "POSITIONS", "IoiPrompts", "eot_id", "encode_with_offsets", "make_prompts", "corrupt_abc",
           "logit_diff"]

EOT_ID = 0
POSITIONS = ("S1", "IO", "S2", "END")


@dataclass
class IoiPrompts:
    """A batch of prompts and their ground truth.

    ``tokens`` ``(n, L)`` (EOT first, right-padded with EOT); ``pos[name]`` ``(n,)`` the token position
    of ``S1``, ``IO``, ``S2`` and ``END``; ``io_id`` / ``s_id`` ``(n,)`` the token of the answer
    (``" " + io``) and of the subject (``" " + s``); ``sentences`` the prompts in characters."""

    tokens: torch.Tensor
    pos: dict[str, torch.Tensor]
    io_id: torch.Tensor
    s_id: torch.Tensor
    sentences: list[IoiSentence] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def orders(self) -> list[str]:
        """``"ABBA"`` or ``"BABA"`` per prompt."""
        return [x.order for x in self.sentences]

    def subset(self, rows: Sequence[int] | torch.Tensor) -> "IoiPrompts":
        """The prompts at ``rows``."""
        idx = torch.as_tensor(rows, dtype=torch.long)
        return IoiPrompts(self.tokens[idx], {k: v[idx] for k, v in self.pos.items()}, self.io_id[idx],
                          self.s_id[idx], [self.sentences[i] for i in idx.tolist()])


def eot_id(tokenizer) -> int:
    """The id of ``<|endoftext|>`` in ``tokenizer`` (a ``tokenizers.Tokenizer`` or a Hugging Face
    fast tokenizer): :data:`EOT_ID` in the book's tokenizers, 50256 in GPT-2's. ``ValueError`` if
    it has none."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    found = backend.token_to_id("<|endoftext|>")
    if found is None:
        raise ValueError("the tokenizer has no <|endoftext|> token to start each prompt with; use a GPT-2-style "
                         "tokenizer (the book's or GPT-2's)")
    return int(found)


def encode_with_offsets(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids and character offsets of ``text``, ``<|endoftext|>`` first (added if ``tokenizer``,
    a ``tokenizers.Tokenizer`` or a Hugging Face fast tokenizer, does not add it)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    enc, eot = backend.encode(text), eot_id(tokenizer)
    ids, offsets = list(enc.ids), [tuple(o) for o in enc.offsets]
    if not ids or ids[0] != eot:
        ids, offsets = [eot] + ids, [(0, 0)] + offsets
    return ids, offsets


def _token_at(offsets: list[tuple[int, int]], span: tuple[int, int], what: str, text: str) -> int:
    hits = [i for i, (a, b) in enumerate(offsets) if b > a and a <= span[0] and b >= span[1]]
    if len(hits) != 1 or offsets[hits[0]][1] != span[1]:
        raise ValueError(f"{what} ({text[span[0]:span[1]]!r}) is not one token in {text!r}: use a tokenizer "
                         "that keeps the names whole (deviating.data.ioi.names.name_tokenizer)")
    return hits[0]


def _batch(tokenizer, sentences: list[IoiSentence]) -> IoiPrompts:
    rows, pos = [], {k: [] for k in POSITIONS}
    for x in sentences:
        ids, offsets = encode_with_offsets(tokenizer, x.text)
        rows.append(ids)
        for name in ("S1", "IO", "S2"):
            pos[name].append(_token_at(offsets, x.spans[name], name, x.text))
        pos["END"].append(len(ids) - 1)
    tokens = torch.full((len(rows), max(map(len, rows))), eot_id(tokenizer), dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = torch.tensor(r)
    answer = {}
    for who in ("io", "s"):
        ids = [encode_with_offsets(tokenizer, " " + getattr(x, who))[0][1:] for x in sentences]
        if any(len(i) != 1 for i in ids):
            raise ValueError("an answer name is not one token; use the indirect-object model's tokenizer")
        answer[who] = torch.tensor([i[0] for i in ids])
    return IoiPrompts(tokens, {k: torch.tensor(v) for k, v in pos.items()}, answer["io"], answer["s"], sentences)


def make_prompts(tokenizer, names: Sequence[str], templates: Sequence[int], n: int, seed: int) -> IoiPrompts:
    """``n`` prompts (``n`` even: half ABBA, half BABA, in random order) from ``templates`` (indices of
    :data:`~deviating.data.ioi.sentences.IOI_TEMPLATES`) with two distinct names of ``names`` each;
    deterministic given ``seed``."""
    if not isinstance(n, int) or n < 2 or n % 2:
        raise ValueError(f"n must be an even int >= 2 (half ABBA, half BABA), got {n!r}")
    if len(set(names)) < 2:
        raise ValueError(f"need at least 2 distinct names, got {list(names)}")
    bad = [t for t in templates if not 0 <= t < len(IOI_TEMPLATES)]
    if not templates or bad:
        raise ValueError(f"templates must be indices of IOI_TEMPLATES (0..{len(IOI_TEMPLATES) - 1}), got {list(templates)}")
    rng = random.Random(seed)
    names, templates = list(names), list(templates)
    orders = [ORDERS[i % 2] for i in range(n)]
    rng.shuffle(orders)
    sentences = []
    for order in orders:
        io, s = rng.sample(names, 2)
        sentences.append(ioi_sentence(rng.choice(templates), io, s, order, rng.choice(PLACES),
                                      rng.choice(OBJECTS)))
    return _batch(tokenizer, sentences)


def corrupt_abc(tokenizer, prompts: IoiPrompts, names: Sequence[str], seed: int) -> IoiPrompts:
    """The ABC twin of each prompt: same template, place and object; the slots of S1, IO and S2
    filled with three distinct names drawn from ``names`` (deterministic given ``seed``). The
    twin's ``io_id`` / ``s_id`` stay the clean prompt's (the metric reads the clean answer)."""
    if len(set(names)) < 3:
        raise ValueError(f"the ABC dataset needs at least 3 distinct names, got {list(names)}")
    rng = random.Random(seed)
    out = []
    for x in prompts.sentences:
        a, b, c = rng.sample(list(names), 3)
        first, second = (a, b)  # the opening pair
        text, spans, shift = x.text, {}, 0
        order = sorted(x.spans.items(), key=lambda kv: kv[1][0])
        fill = {}
        fill[order[0][0]], fill[order[1][0]], fill["S2"] = first, second, c
        for name, (start, end) in order:
            start, end = start + shift, end + shift
            text = text[:start] + fill[name] + text[end:]
            spans[name] = (start, start + len(fill[name]))
            shift += len(fill[name]) - (end - start)
        out.append(replace(x, text=text, spans=spans))
    twin = _batch(tokenizer, out)
    if twin.tokens.shape != prompts.tokens.shape or any(not torch.equal(twin.pos[k], prompts.pos[k]) for k in POSITIONS):
        raise RuntimeError("the ABC twins do not line up with the clean prompts token for token")
    twin.io_id, twin.s_id = prompts.io_id.clone(), prompts.s_id.clone()
    return twin


def logit_diff(logits: torch.Tensor, prompts: IoiPrompts) -> torch.Tensor:
    """``logit(IO) - logit(S)`` at each prompt's END: ``(n,)`` from ``logits`` ``(n, L, d_vocab)``."""
    if logits.dim() != 3 or logits.shape[0] != len(prompts):
        raise ValueError(f"logits must be (n_prompts={len(prompts)}, pos, d_vocab), got {tuple(logits.shape)}")
    rows = torch.arange(len(prompts))
    end = logits[rows, prompts.pos["END"].to(logits.device)]
    return end[rows, prompts.io_id.to(logits.device)] - end[rows, prompts.s_id.to(logits.device)]
