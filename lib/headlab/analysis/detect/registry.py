"""The one registry of head scores: each pattern score is one :class:`Score` entry.

An entry holds its **definition** (written into every atlas); the **queries it averages
over** (``eligible``, from the :class:`~headlab.kernels.statistics.StatInputs`); the
**streamed statistic** it is the mean of, a built-in one (``statistic``) or a new mass over a
:class:`~headlab.kernels.keysets.KeySet` (``keys``); its **label family** (``"named"``,
``"broad"`` or None) and atlas **colour**; optionally a **detector** for the materialized
path (else the key set's mass on the pattern). Materialized and streamed scoring both read
:func:`pattern_scores`: adding a score is one :func:`register_score` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from headlab.analysis.detect.positional import local_score, next_token_score, previous_token_score
from headlab.analysis.detect.spread import entropy_score
from headlab.analysis.detect.tokens import (
    duplicate_token_score, first_token_score, induction_score, punctuation_score, rare_token_score,
    separator_score,
)
from headlab.kernels.keysets import (
    NON_MASS, PUNCTUATION_BIT, SEPARATOR_BIT, KeySet, key_set, key_set_mask, mass_names, register_statistic,
    unregister_statistic,
)
from headlab.kernels.statistics import DEFAULT_WINDOW, NO_TARGET, StatInputs, earlier_occurrence, in_view

__all__ = ["Score", "ScoreInputs", "FAMILY_KINDS", "NEEDS", "register_score", "unregister_score", "score",
           "scores", "pattern_scores", "families", "broad_families", "score_colours", "n_keys", "has_key_at",
           "score_from_per_query", "pattern_score"]

FAMILY_KINDS = ("named", "broad")
NEEDS = ("tokenizer", "token_frequency")


@dataclass
class ScoreInputs:
    """What a detector reads besides the pattern, for one batch (``masks``: those of
    :func:`~headlab.analysis.detect.token_masks`; ``freq``: per position, or None)."""

    ids: torch.Tensor
    mask: torch.Tensor
    causal: bool
    window: int
    masks: dict[str, torch.Tensor]
    freq: torch.Tensor | None
    statistics: StatInputs


@dataclass(frozen=True)
class Score:
    """One head score (see the module docstring for each field's reader)."""

    name: str
    definition: str
    eligible: Callable[[StatInputs], torch.Tensor]
    statistic: str | None = None
    keys: KeySet | None = None
    family: str | None = None
    colour: str | None = None
    short: str | None = None  # the atlas grid's cell label (default: the name's first five letters)
    needs: tuple[str, ...] = ()
    detector: Callable[[torch.Tensor, ScoreInputs], torch.Tensor] | None = None
    per_query: Callable[[torch.Tensor, StatInputs], torch.Tensor] | None = None
    on_repeats: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a score's name must be an identifier, got {self.name!r}")
        if (self.statistic is None) == (self.keys is None):
            raise ValueError(f"score {self.name!r}: give statistic= (an existing one) or keys= (a new mass), not both")
        if self.family not in (None, *FAMILY_KINDS):
            raise ValueError(f"score {self.name!r}: family must be None or one of {FAMILY_KINDS}, got {self.family!r}")
        if self.family is not None and not self.colour:
            raise ValueError(f"score {self.name!r} names a label family, so it needs a colour for the atlas figure")
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"score {self.name!r}: unknown needs {unknown}; choose from {NEEDS}")
        if not callable(self.eligible):
            raise TypeError(f"score {self.name!r}: eligible must be a function of the StatInputs")

    @property
    def stream(self) -> str:
        """The streamed statistic this score is the mean of."""
        return self.statistic if self.statistic is not None else self.name


# --------------------------------------------------------------------------- eligibility


def n_keys(inputs: StatInputs) -> torch.Tensor:
    """``(batch, n)``: how many keys each query may attend to."""
    real = inputs.key_real
    return real.cumsum(1) if inputs.causal else real.sum(1, keepdim=True).expand(-1, real.shape[1])


def has_key_at(offset: int) -> Callable[[StatInputs], torch.Tensor]:
    """Eligibility: real queries ``i`` whose key ``i + offset`` is real (e.g. -1: the previous token)."""
    def eligible(inputs: StatInputs) -> torch.Tensor:
        real = inputs.key_real
        shifted = torch.zeros_like(real)
        if offset >= 0:
            shifted[:, :real.shape[1] - offset] = real[:, offset:]
        else:
            shifted[:, -offset:] = real[:, :offset]
        return real & shifted
    return eligible


def _marked_in_view(bit: int) -> Callable[[StatInputs], torch.Tensor]:
    def eligible(inputs: StatInputs) -> torch.Tensor:  # some allowed key (self included) carries the bit
        real, n = inputs.key_real, inputs.key_real.shape[1]
        marked = ((inputs.key_flags & bit) != 0) & real
        seen = marked.cumsum(1) > 0 if inputs.causal else marked.any(1, keepdim=True).expand(-1, n)
        return real & seen
    return eligible


def _rare_eligible(inputs: StatInputs) -> torch.Tensor:
    rare_class = inputs.rare_class
    highest = in_view(torch.where(rare_class >= 0, rare_class, -1), inputs.causal, largest=True, fill=-1)
    return inputs.key_real & (inputs.rare_target != NO_TARGET) & (highest > inputs.rare_target)


def _normalised_entropy(per_query: torch.Tensor, inputs: StatInputs) -> torch.Tensor:
    return per_query / torch.log(n_keys(inputs).clamp(min=2).to(per_query.dtype))[:, None, :]


# --------------------------------------------------------------------------- the registry

_BUILTIN = (
    Score("previous_token", "mean over texts of the mean, over real queries i >= 1, of the weight on key i-1",
          has_key_at(-1), statistic="previous_token", family="named", colour="#1f77b4", short="prev",
          detector=lambda p, x: previous_token_score(p, x.mask, on_empty="nan")),
    Score("next_token", "the same for key i+1, over real queries before the last real position",
          has_key_at(1), statistic="next_token", family="named", colour="#17becf", short="next",
          detector=lambda p, x: next_token_score(p, x.mask, on_empty="nan")),
    Score("first_token", "mean over real queries of the weight on the first real position ([CLS], <bos>)",
          lambda x: x.key_real, statistic="first_token", family="named", colour="#9467bd", short="first",
          detector=lambda p, x: first_token_score(p, x.mask, on_empty="nan")),
    Score("separator", "weight on [SEP]/<eos>/sentence-final punctuation, over queries that can see one",
          _marked_in_view(SEPARATOR_BIT), statistic="separator", family="named", colour="#8c564b", short="sep",
          needs=("tokenizer",), detector=lambda p, x: separator_score(p, x.masks["separator"], x.mask,
                                                                      causal=x.causal, on_empty="nan")),
    Score("punctuation", "weight on punctuation tokens, over queries that can see one",
          _marked_in_view(PUNCTUATION_BIT), statistic="punctuation", family="named", colour="#e377c2", short="punct",
          needs=("tokenizer",), detector=lambda p, x: punctuation_score(p, x.masks["punctuation"], x.mask,
                                                                        causal=x.causal, on_empty="nan")),
    Score("local", f"weight on keys j with |i - j| <= {DEFAULT_WINDOW}", lambda x: x.key_real, statistic="local",
          family="broad", colour="#6baed6", short="local", detector=lambda p, x: local_score(p, x.window, x.mask, on_empty="nan")),
    Score("entropy", "row entropy / log(number of keys the row may attend to), rows with >= 2 keys",
          lambda x: x.key_real & (n_keys(x) >= 2), statistic="entropy", per_query=_normalised_entropy,
          detector=lambda p, x: entropy_score(p, x.mask, causal=x.causal, on_empty="nan")),
    Score("duplicate_token", "weight on earlier occurrences of the query's token, over queries that have one",
          lambda x: x.key_real & (earlier_occurrence(x.tokens) >= 0), statistic="duplicate_token",
          family="named", colour="#bcbd22", short="dup", detector=lambda p, x: duplicate_token_score(p, x.ids, x.mask,
                                                                                        on_empty="nan")),
    Score("induction", "on repeated random sequences: weight on the token after the query token's previous "
          "occurrence", lambda x: x.key_real & (x.induction_target >= 0), statistic="induction", family="named",
          colour="#d62728", short="ind", on_repeats=True,
          detector=lambda p, x: induction_score(p, x.ids, x.mask, on_empty="nan")),
    Score("rare_token", "weight on the least frequent word in view (synthetic language only)", _rare_eligible,
          statistic="rare_token", family="named", colour="#ff7f0e", short="rare", needs=("token_frequency",),
          detector=lambda p, x: rare_token_score(p, x.freq, x.mask, causal=x.causal, on_empty="nan")),
)
BUILTIN_NAMES = tuple(s.name for s in _BUILTIN)
_SCORES: dict[str, Score] = {s.name: s for s in _BUILTIN}


def register_score(entry: Score) -> None:
    """Add a pattern score: the materialized and both streamed paths compute it from now on, the
    atlas lists it, and a ``"named"`` family can label heads. A score with ``keys`` registers its
    mass with the kernels (:func:`~headlab.kernels.keysets.register_statistic`) under its name.

    Raises:
        ValueError: the name is taken, or ``statistic`` names no streamed statistic.
    """
    if not isinstance(entry, Score):
        raise TypeError(f"register_score takes a headlab.analysis.detect.registry.Score, got {type(entry).__name__}")
    if entry.name in _SCORES:
        raise ValueError(f"a score named {entry.name!r} is registered already; unregister_score it first")
    if entry.statistic is not None and entry.statistic not in NON_MASS + mass_names():
        raise ValueError(f"score {entry.name!r}: no streamed statistic {entry.statistic!r}; give keys= for a new one")
    if entry.keys is not None:
        register_statistic(entry.name, entry.keys)
    _SCORES[entry.name] = entry


def unregister_score(name: str) -> None:
    """Remove a score added by :func:`register_score` (and the mass it registered)."""
    if name in BUILTIN_NAMES:
        raise ValueError(f"{name!r} is a built-in score; it cannot be removed")
    entry = _SCORES.pop(name, None)
    if entry is None:
        raise KeyError(f"no registered score {name!r}")
    if entry.keys is not None:
        unregister_statistic(name)


def score(name: str) -> Score:
    """The entry of the pattern score ``name``."""
    if name not in _SCORES:
        raise KeyError(f"no pattern score {name!r}; the scores are {', '.join(_SCORES)}")
    return _SCORES[name]


def scores() -> tuple[Score, ...]:
    """Every registered score, built-ins first, in registration order."""
    return tuple(_SCORES.values())


def pattern_scores() -> tuple[str, ...]:
    """The names of every registered pattern score."""
    return tuple(_SCORES)


def families() -> tuple[str, ...]:
    """The named label families, in order of precedence on ties (registration order)."""
    return tuple(s.name for s in _SCORES.values() if s.family == "named")


def broad_families() -> tuple[str, ...]:
    """The broad label families (checked after every named one)."""
    return tuple(s.name for s in _SCORES.values() if s.family == "broad")


def score_colours() -> dict[str, str]:
    """Label family -> its colour in the atlas figure."""
    return {s.name: s.colour for s in _SCORES.values() if s.family is not None}


# --------------------------------------------------------------------------- computing a score


def score_from_per_query(entry: Score, per_query: torch.Tensor, inputs: StatInputs) -> torch.Tensor:
    """``(batch, head)``: the score's mean over each input's eligible queries of its statistic
    ``per_query`` ``(batch, head, n)``; NaN for an input with no eligible query."""
    if entry.per_query is not None:
        per_query = entry.per_query(per_query, inputs)
    eligible = entry.eligible(inputs).to(per_query.device)  # (batch, n)
    total = torch.where(eligible[:, None, :], per_query, 0.0).sum(-1)
    return total / eligible.sum(-1, keepdim=True)  # NaN (0 / 0) where no query is eligible


def pattern_score(entry: Score, pattern: torch.Tensor, x: ScoreInputs) -> torch.Tensor:
    """``(batch, head)``: the score on a materialized pattern ``(batch, head, q_pos, k_pos)``: its
    detector when it has one, else its statistic read off the pattern and averaged as streamed."""
    if entry.detector is not None:
        return entry.detector(pattern, x)
    inputs = x.statistics
    p = torch.where(inputs.allowed()[:, None], pattern, 0.0)
    if entry.stream == "entropy":
        per_query = -torch.xlogy(p, p).sum(-1)
    elif entry.stream == "max_weight":
        per_query = p.amax(-1)
    else:
        positions = torch.arange(p.shape[-1], device=p.device)
        per_query = (p * key_set_mask(key_set(entry.stream), inputs, positions, positions)[:, None]).sum(-1)
    return score_from_per_query(entry, per_query, inputs)
