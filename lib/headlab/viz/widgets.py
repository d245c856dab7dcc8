"""The computation behind the live-ablation widget (``headlab.viz.live.ablation_widget``).

:class:`LiveAblation` recomputes what the widget shows for a set of ablated heads; tests and
benchmarks call it directly. The checks here (texts, ``top_k``, the mode) are the widget's too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import ABLATION_MODES, HeadModel
from headlab.metrics import mean_pool, next_token_loss

__all__ = ["LiveAblation", "AblationView", "check_texts", "check_top_k", "check_mode"]


def check_texts(texts) -> list[str]:  # noqa: ANN001
    """The non-blank texts of a list of strings; ValueError/TypeError naming what is wrong otherwise."""
    if isinstance(texts, str):
        raise TypeError(f"texts must be a list of strings, got one string {texts[:40]!r}: write [{texts[:40]!r}]")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__} {str(texts)[:40]}") from None
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings: text {i} is {type(text).__name__} {str(text)[:40]}; "
                            "give the words themselves, e.g. ['the dog sees the cat .']")
    kept = [t for t in items if t.strip()]
    if not kept:
        raise ValueError("give at least one non-empty text")
    return kept


def check_top_k(top_k, vocab: int | None = None) -> int:  # noqa: ANN001
    """``top_k`` as an int in 1..vocab; ValueError naming it otherwise."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer (how many next tokens to list), got {top_k!r}")
    if vocab is not None and top_k > vocab:
        raise ValueError(f"top_k={top_k} is more than the model's {vocab} tokens: give 1..{vocab} (e.g. 5)")
    return top_k


def check_mode(mode, modes: Sequence[str] = ABLATION_MODES) -> str:  # noqa: ANN001
    """``mode`` if it is one of ``modes``; ValueError naming it and the choices otherwise."""
    if mode not in modes:
        raise ValueError(f"unknown ablation mode {mode!r}: choose from {', '.join(modes)}")
    return mode


@dataclass
class AblationView:
    """Everything the live-ablation widget shows for one setting.

    Attributes:
        metric: per text, the ablated metric (next-token loss for causal LMs; 1 - cos of the
            pooled embedding to the clean one for encoders).
        clean: per text, the clean metric (zeros for encoders).
        top: for causal LMs, the top next-token predictions at the last real position of the
            first text, ``[(token, prob_clean, prob_ablated)]`` (clean ranking); ``[]`` for encoders.
        similarity: for encoders, the cosine similarity matrix of the texts' ablated embeddings;
            ``None`` for causal LMs.
        pattern: the selected head's pattern on the first text ``(pos, pos)`` (ablation applied
            to the heads below it), and ``tokens`` its labels.
        top_ablated: for causal LMs, the ablated model's own top next-token predictions at the
            same position, ``[(token, prob_clean, prob_ablated)]`` (ablated ranking).
        contrast, contrast_clean: per text with a pair ``(a, b)`` (:class:`LiveAblation`'s
            ``contrast``), logit(a) - logit(b) at its last token, ablated and clean; else ``None``.
    """

    metric: torch.Tensor
    clean: torch.Tensor
    top: list[tuple[str, float, float]]
    similarity: torch.Tensor | None
    pattern: torch.Tensor | None
    tokens: list[str]
    top_ablated: list[tuple[str, float, float]] = field(default_factory=list)
    contrast: list[float | None] = field(default_factory=list)
    contrast_clean: list[float | None] = field(default_factory=list)


class LiveAblation:
    """Recompute the model's behaviour for a set of ablated heads (one forward pass).

    ``contrast`` (causal LMs): per text ``None`` or a pair of token ids ``(a, b)`` whose logit
    difference at the text's last token each view reports (:class:`AblationView`)."""

    def __init__(self, hm: HeadModel, texts: Sequence[str], reference: Sequence[str] | None = None,
                 top_k: int = 5, contrast: Sequence[tuple[int, int] | None] | None = None):
        self.hm = hm
        self.top_k = check_top_k(top_k)
        self.reference = check_texts(reference) if reference is not None else None
        self.set_texts(texts, contrast)
        if hm.causal:
            check_top_k(top_k, int(self._clean_out.shape[-1]))

    def set_texts(self, texts: Sequence[str], contrast: Sequence[tuple[int, int] | None] | None = None) -> None:
        texts = check_texts(texts)
        self.contrast = list(contrast) if contrast is not None else [None] * len(texts)
        if len(self.contrast) != len(texts) or (not self.hm.causal and any(self.contrast)):
            raise ValueError(f"contrast: give one token pair (a, b) or None per non-empty text of a causal LM, "
                             f"got {len(self.contrast)} for {len(texts)} texts of {self.hm.name}")
        self.texts = texts
        self.batch = self.hm.tokenize(texts)
        with torch.no_grad():
            out = self.hm(self.batch)
        if self.hm.causal:
            self._clean_out = out
            self._pooled = None
            self.clean = next_token_loss(out, self.batch["input_ids"], self.batch["attention_mask"])
            self.contrast_clean = self._contrast(out)
        else:
            self._pooled = mean_pool(out, self.batch["attention_mask"])
            self.clean = torch.zeros(len(texts))
        first = self.batch["input_ids"][0][self.batch["attention_mask"][0].bool()]
        tok = self.hm.tokenizer
        self.tokens = tok.convert_ids_to_tokens(first.tolist()) if tok is not None else [str(int(i)) for i in first]

    def view(self, ablated: Sequence[Head] = (), mode: str = "zero", selected: Head | None = None) -> AblationView:
        hm, batch = self.hm, self.batch
        check_mode(mode)
        if selected is not None:
            try:
                selected = hm.check_heads([selected])[0]
            except (TypeError, ValueError) as err:
                raise ValueError(f"selected={selected!r}: {err}") from None
        reference = None if mode == "zero" else (self.reference or self.texts)
        n = int(batch["attention_mask"][0].sum())
        names = ("pattern",) if selected is not None else ()
        layers = [selected[0]] if selected is not None else None
        with torch.no_grad(), hm.capture(names, layers=layers) as cache:
            if ablated:
                with hm.ablate(list(ablated), Ablation(mode, reference=reference)):
                    out = hm(batch)
            else:
                out = hm(batch)
        pattern = None
        if selected is not None:
            pattern = cache.pattern(selected[0])[0, selected[1], :n, :n]
        if hm.causal:
            metric = next_token_loss(out, batch["input_ids"], batch["attention_mask"])
            last = n - 1
            p_clean = torch.softmax(self._clean_out[0, last].float(), -1)
            p_abl = torch.softmax(out[0, last].float(), -1)
            tok = hm.tokenizer

            def top(p: torch.Tensor) -> list[tuple[str, float, float]]:  # the top_k of p, with both probabilities
                ids = torch.topk(p, self.top_k).indices.tolist()
                names_ = tok.convert_ids_to_tokens(ids) if tok is not None else [str(i) for i in ids]
                return [(name, float(p_clean[i]), float(p_abl[i])) for name, i in zip(names_, ids)]

            return AblationView(metric, self.clean, top(p_clean), None, pattern, self.tokens, top(p_abl),
                                self._contrast(out), self.contrast_clean)
        pooled = mean_pool(out, batch["attention_mask"])
        metric = 1 - torch.nn.functional.cosine_similarity(pooled, self._pooled, dim=-1)
        e = torch.nn.functional.normalize(pooled, dim=-1)
        return AblationView(metric, self.clean, [], e @ e.T, pattern, self.tokens)


    def _contrast(self, logits: torch.Tensor) -> list[float | None]:
        mask = self.batch["attention_mask"]
        last = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(1).tolist()  # right or left padding
        rows = logits[list(range(len(last))), last].float()  # (texts, vocab): each text's last token
        return [None if p is None else float(rows[i, p[0]] - rows[i, p[1]]) for i, p in enumerate(self.contrast)]
