"""Every pattern score of every head of a model, in one pass of ``run_with_cache`` per batch.

:func:`head_scores` returns a :class:`HeadScores`: per-input scores beside uniform attention's.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.analysis.detect.base import uniform_pattern
from headlab.analysis.detect.copying import NotApplicable, dla_copying_score, unembedding
from headlab.analysis.detect.labels import DEFAULT_THRESHOLDS, HeadLabels, Thresholds, label_heads, lift
from headlab.analysis.detect.registry import BUILTIN_NAMES, ScoreInputs, pattern_score, pattern_scores, score
from headlab.kernels.statistics import DEFAULT_WINDOW, statistic_inputs

# Scores in [0, 1] computed from patterns (the built-in entries of the registry,
# headlab.analysis.detect.registry; registered ones are in pattern_scores()), and measures of what a head writes.
PATTERN_SCORES = BUILTIN_NAMES
WRITE_MEASURES = ("write_norm", "copying_dla")
LOCAL_WINDOW = DEFAULT_WINDOW
SENTENCE_END = frozenset({".", "!", "?"})
_SUBWORD_MARKERS = ("##", "\u0120", "\u2581")  # WordPiece continuation, GPT-2's space, SentencePiece's space


def _token_text(token: str) -> str:
    for marker in _SUBWORD_MARKERS:
        if token.startswith(marker):
            return token[len(marker):]
    return token


def is_punctuation(text: str) -> bool:
    """Non-empty and made only of Unicode punctuation characters (categories P*)."""
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def token_masks(tokenizer, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Key masks ``(batch, pos)`` read off the tokens.

    * ``separator``: the tokenizer's separator tokens (``sep_token``, ``eos_token``: ``[SEP]``,
      ``<eos>``, ``</s>``) and sentence-final punctuation (``.``, ``!``, ``?``);
    * ``punctuation``: non-special tokens whose text, without a sub-word marker (``##``,
      ``Ġ``, ``▁``), is made only of Unicode punctuation characters.
    """
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    separators = {i for i in (getattr(tokenizer, "sep_token_id", None), getattr(tokenizer, "eos_token_id", None))
                  if i is not None}
    kinds: dict[int, tuple[bool, bool]] = {}
    for i in torch.unique(input_ids).tolist():
        text = _token_text(tokenizer.convert_ids_to_tokens(i) or "")
        punct = i not in special and is_punctuation(text)
        kinds[i] = (i in separators or (punct and text in SENTENCE_END), punct)
    table = torch.zeros(max(kinds) + 1, 2, dtype=torch.bool)
    for i, (sep, punct) in kinds.items():
        table[i] = torch.tensor([sep, punct])
    flags = table[input_ids.cpu()]  # (batch, pos, 2)
    return {"separator": flags[..., 0], "punctuation": flags[..., 1]}


@dataclass
class HeadScores:
    """Scores of every head on a set of inputs.

    Attributes:
        per_input: name -> ``(n_inputs, n_layers, n_heads)``; NaN where undefined for an input.
        uniform: name -> ``(n_inputs,)``: the score of uniform attention on that input
            (the same for every head; NaN exactly where the score is).
        n_layers, n_heads: the model's geometry.
        notes: scores that were not computed, and why.
    """

    per_input: dict[str, torch.Tensor]
    uniform: dict[str, torch.Tensor]
    n_layers: int
    n_heads: int
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return list(self.per_input)

    @property
    def n_inputs(self) -> int:
        return next(iter(self.per_input.values())).shape[0] if self.per_input else 0

    def _get(self, name: str) -> torch.Tensor:
        if name not in self.per_input:
            why = self.notes.get(name, "it was not requested")
            raise KeyError(f"no {name!r} score: {why}. Computed: {', '.join(self.names)}")
        return self.per_input[name]

    def defined(self, name: str) -> bool:
        """Whether ``name`` is defined on at least one input."""
        return name in self.per_input and bool((~torch.isnan(self.per_input[name])).any())

    def mean(self, name: str) -> torch.Tensor:
        """``(n_layers, n_heads)``: the mean over the inputs on which the score is defined."""
        values = self._get(name)
        if not self.defined(name):
            raise ValueError(f"{name!r} is undefined on every input (e.g. induction needs a repeated "
                             "token); add inputs on which it is defined")
        return values.nanmean(dim=0)

    def uniform_mean(self, name: str) -> float:
        """The same mean for uniform attention on the same inputs."""
        self.mean(name)  # raises if undefined
        if name not in self.uniform:
            raise KeyError(f"{name!r} measures what a head writes; it has no uniform-attention reference")
        return float(self.uniform[name].nanmean())

    def lift(self, name: str) -> torch.Tensor:
        """``(n_layers, n_heads)``: the mean score's lift over uniform attention (see ``headlab.analysis.detect.labels``)."""
        return lift(self.mean(name), self.uniform_mean(name)).float()

    def means(self) -> dict[str, torch.Tensor]:
        """Every score defined on some input, as ``(n_layers, n_heads)`` means."""
        return {name: self.mean(name) for name in self.names if self.defined(name)}

    def labels(self, effects: torch.Tensor | None = None,
               thresholds: Thresholds = DEFAULT_THRESHOLDS) -> HeadLabels:
        """:func:`~headlab.analysis.detect.label_heads` on these scores."""
        means = {n: m for n, m in self.means().items() if n in pattern_scores()}
        uniform = {n: torch.full_like(m, self.uniform_mean(n)) for n, m in means.items()}
        return label_heads(means, effects, thresholds, uniform=uniform)


def scores_to_compute(hm, scores: Sequence[str] | None, token_frequency=None, *,
                      default: Sequence[str] | None = None,
                      unavailable: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The scores a run of :func:`head_scores` (or its streamed twin) computes, and why each
    asked-for score it leaves out is left out: ``(wanted, notes)``.

    ``scores=None`` asks for ``default`` (None: every registered pattern score and
    :data:`WRITE_MEASURES`); an unknown name raises. Scores whose ``needs`` are missing, and
    those in ``unavailable`` (name -> reason), are left out.
    """
    known = pattern_scores() + WRITE_MEASURES
    wanted = list(known if default is None else default) if scores is None else list(scores)
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise ValueError(f"unknown score(s) {unknown}; choose from {known}")
    reasons = dict(unavailable or {})
    for name in wanted:
        needs = score(name).needs if name in pattern_scores() else ()
        if "tokenizer" in needs and hm.tokenizer is None:
            reasons[name] = f"{hm.name} has no tokenizer to tell which tokens are separators or punctuation"
        if "token_frequency" in needs and token_frequency is None:
            reasons[name] = ("no token frequencies given (token_frequency=...); for English there is no "
                             "frequency list offline, so rare words are scored on the synthetic language only")
    notes = {name: why for name, why in reasons.items() if name in wanted}
    return [s for s in wanted if s not in notes], notes


def head_scores(hm, inputs, *, scores: Sequence[str] | None = None, batch_size: int = 32,
                window: int = LOCAL_WINDOW, token_frequency: torch.Tensor | None = None) -> HeadScores:
    """Score every head of ``hm`` on ``inputs`` (texts, or token ids / a batch dict).

    Args:
        scores: registered pattern scores and :data:`WRITE_MEASURES` (default: all that
            apply); those that cannot be computed are in ``HeadScores.notes``, with the reason.
        token_frequency: ``(d_vocab,)`` expected frequency of each id (``inf`` = never rare).

    ``write_norm``: the mean over real positions of the norm of ``cache.result``.
    """
    wanted, notes = scores_to_compute(hm, scores, token_frequency)
    unembed = None
    if "copying_dla" in wanted:
        try:
            unembed = unembedding(hm)
        except NotApplicable as err:
            wanted.remove("copying_dla")
            notes["copying_dla"] = f"not applicable: {err}"
    per_input: dict[str, list[torch.Tensor]] = {name: [] for name in wanted}
    entries = {name: score(name) for name in wanted if name in pattern_scores()}
    uniform: dict[str, list[torch.Tensor]] = {name: [] for name in entries}
    need_z = any(name in WRITE_MEASURES for name in wanted)
    for batch in hm.batches(inputs, batch_size):
        _, cache = hm.run_with_cache(batch, names=("pattern", "z") if need_z else ("pattern",))
        ids, mask = cache.input_ids.cpu(), cache.attention_mask.cpu()
        masks = token_masks(hm.tokenizer, ids) if hm.tokenizer is not None else {}
        freq = None if token_frequency is None else torch.as_tensor(token_frequency, dtype=torch.float64)[ids]
        ctx = ScoreInputs(ids, mask, hm.causal, window, masks, freq,
                          statistic_inputs(mask, causal=hm.causal, tokens=ids, window=window, frequency=freq,
                                           separator=masks.get("separator"), punctuation=masks.get("punctuation")))
        layers: dict[str, list[torch.Tensor]] = {name: [] for name in wanted}
        for layer in range(hm.n_layers):
            pattern = cache.pattern(layer).float().cpu()  # (batch, head, q_pos, k_pos)
            result = cache.result(layer).float().cpu() if need_z else None  # (batch, pos, head, d_model)
            for name in wanted:
                if name in entries:
                    layers[name].append(pattern_score(entries[name], pattern, ctx))
                elif name == "write_norm":
                    norms = result.norm(dim=-1).transpose(1, 2)  # (batch, head, pos)
                    layers[name].append((norms * mask[:, None]).sum(-1) / mask.sum(-1, keepdim=True))
                elif name == "copying_dla":
                    layers[name].append(dla_copying_score(pattern, result, ids, unembed, mask, on_empty="nan"))
        flat = uniform_pattern(mask, hm.causal)  # (batch, 1, q_pos, k_pos)
        for name in wanted:
            per_input[name].append(torch.stack(layers[name], dim=1))  # (batch, n_layers, n_heads)
            if name in uniform:
                uniform[name].append(pattern_score(entries[name], flat, ctx)[:, 0])  # (batch,)
    return HeadScores({n: torch.cat(v) for n, v in per_input.items()},
                      {n: torch.cat(v).double() for n, v in uniform.items()},
                      hm.n_layers, hm.n_heads, notes)
