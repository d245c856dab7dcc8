"""The grammar's constructions and its probabilities (`LanguageConfig`): what both the
`Language` (:mod:`deviating.data.language.grammar`) and its document sampler
(:mod:`deviating.data.language.sampler`) read, below both of them."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["CONSTRUCTIONS", "PRONOUN_CONSTRUCTIONS", "LanguageConfig"]

CONSTRUCTIONS = ("simple", "pp", "subj_rel", "obj_rel", "pron_subj", "pron_obj")
PRONOUN_CONSTRUCTIONS = ("pron_subj", "pron_obj")


@dataclass(frozen=True)
class LanguageConfig:
    """Every probability of the grammar (see the docstring of `deviating.data.language`)."""

    min_sentences: int = 3
    max_sentences: int = 7
    # Construction weights (normalised; the first sentence of a document draws only from the
    # non-pronoun constructions).
    w_simple: float = 0.20
    w_pp: float = 0.16
    w_subj_rel: float = 0.14
    w_obj_rel: float = 0.14
    w_pron_subj: float = 0.20
    w_pron_obj: float = 0.16
    p_copy: float = 0.12
    p_front: float = 0.15
    p_front_adverb: float = 0.5
    p_plural: float = 0.5
    p_mismatch: float = 0.6
    p_subj_rel_transitive: float = 0.7
    p_rel_present: float = 0.5
    p_vp_intrans: float = 0.35
    p_vp_trans: float = 0.40
    p_obj_pp: float = 0.2
    p_one_adj: float = 0.3
    p_two_adj: float = 0.1
    p_det_the: float = 0.65
    p_det_indefinite: float = 0.25
    cast_size: int = 4
    p_cast: float = 0.3
    zipf_alpha: float = 1.2
    rare_threshold: float = 1e-4

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name.startswith(("p_", "w_")) and not (isinstance(v, (int, float)) and 0.0 <= v <= 1.0):
                raise ValueError(f"{f.name} must be a number in [0, 1], got {v!r}")
        if not (isinstance(self.min_sentences, int) and 1 <= self.min_sentences <= self.max_sentences):
            raise ValueError(f"need integers 1 <= min_sentences <= max_sentences, got "
                             f"{self.min_sentences!r} and {self.max_sentences!r}")
        if not isinstance(self.cast_size, int) or self.cast_size < 1:
            raise ValueError(f"cast_size must be a positive integer, got {self.cast_size!r}")
        if sum(getattr(self, f"w_{c}") for c in CONSTRUCTIONS if c not in PRONOUN_CONSTRUCTIONS) <= 0:
            raise ValueError("at least one non-pronoun construction needs a positive weight "
                             "(the first sentence of a document cannot contain a pronoun)")
        for a, b in (("p_vp_intrans", "p_vp_trans"), ("p_one_adj", "p_two_adj"),
                     ("p_det_the", "p_det_indefinite")):
            if getattr(self, a) + getattr(self, b) > 1.0:
                raise ValueError(f"{a} + {b} must be at most 1, got {getattr(self, a) + getattr(self, b)}")
        if not self.zipf_alpha > 0:
            raise ValueError(f"zipf_alpha must be positive, got {self.zipf_alpha!r}")
        if not 0 < self.rare_threshold < 1:
            raise ValueError(f"rare_threshold must be a probability in (0, 1), got {self.rare_threshold!r}")
