"""One label per head, by a written rule, from pattern scores *and* effects.

Every pattern score ``s`` is compared with the score ``u`` of **uniform attention** on the
same inputs: ``lift = (s - u) / (1 - u)`` (0 for uniform attention, 1 for a perfect
specialist; 0 where ``u = 1``).

The rule (:func:`label_heads`), for each head:

1. **A named family** if the lift of one of the named families (:data:`FAMILIES`, and any
   registered with :func:`headlab.analysis.detect.registry.register_score`) reaches its bar:
   ``thresholds.induction_lift`` for ``induction``, ``thresholds.lift`` for the others. Of the
   families that do, the one with the largest lift names the head; ties go to the family listed
   first (the more specific one, e.g. ``separator`` before ``punctuation``). Strength: that lift.
2. Else **local** if the ``local`` lift (weight within a small window) reaches
   ``thresholds.lift``: it is checked second because every previous-token head is local too.
3. Else, with effects given, **orphan** if the head's effect is at least
   ``thresholds.orphan_effect`` times the mean effect over all heads: no pattern stands out,
   yet removing it matters (strength: effect / largest effect).
4. Else **diffuse** if its normalised entropy is at least ``thresholds.diffuse_entropy``
   (strength: the entropy).
5. Else **inactive** (effects given: an unnamed pattern with no measurable effect; strength:
   effect / largest effect) or **unlabelled** (no effects given; strength: the best lift,
   clipped at 0).

The thresholds are named constants below and travel with every atlas.

**One definition per role.** The bars are the roles' own (:mod:`headlab.roles`): the label
``previous_token`` reads the lift the previous-token role requires at least
(``LABEL_LIFT``, :func:`headlab.roles.positional.previous_token_heads`'s ``min_lift``), and the
label ``induction`` the lift of the induction role's attention half (``INDUCTION_LIFT``,
:func:`headlab.roles.induction.induction_heads`). A label is the role's test on the atlas's texts,
in sample; the role adds what makes it a claim: the held-out split and its interval, the decoy
null (previous-token) and the copying half (induction).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Mapping

import torch

from headlab.analysis.detect.registry import broad_families, families

# The built-in families a head can be named after, in order of precedence on ties (each is a
# registry entry with family "named" or "broad"; label_heads reads the registry itself).
FAMILIES = families()
BROAD_FAMILIES = broad_families()
OTHER_LABELS = ("orphan", "diffuse", "inactive", "unlabelled")
LABELS = FAMILIES + BROAD_FAMILIES + OTHER_LABELS

LABEL_LIFT = 0.4        # a family names a head when its lift over uniform attention reaches 0.4 ...
INDUCTION_LIFT = 0.3    # ... the induction family at 0.3: the induction role's attention half
INDUCTION = "induction"  # the family (and role) whose bar is INDUCTION_LIFT
DIFFUSE_ENTROPY = 0.8   # normalised entropy at or above which an unnamed head is "diffuse"
ORPHAN_EFFECT = 1.0     # an unnamed head is an orphan when its effect is >= this x the mean head effect


@dataclass(frozen=True)
class Thresholds:
    """The constants of the labelling rule (see the module docstring)."""

    lift: float = LABEL_LIFT
    diffuse_entropy: float = DIFFUSE_ENTROPY
    orphan_effect: float = ORPHAN_EFFECT
    induction_lift: float = INDUCTION_LIFT

    def bar(self, family: str) -> float:
        """The lift that names a head after ``family``: ``induction_lift`` for induction, else ``lift``."""
        return self.induction_lift if family == INDUCTION else self.lift

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_THRESHOLDS = Thresholds()


def lift(score: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """``(score - uniform) / (1 - uniform)``; 0 where ``uniform`` is 1 (nothing to tell apart)."""
    score, uniform = torch.as_tensor(score, dtype=torch.float64), torch.as_tensor(uniform, dtype=torch.float64)
    room = 1 - uniform
    safe = torch.where(room > 1e-9, room, torch.ones_like(room))
    return torch.where(room > 1e-9, (score - uniform) / safe, torch.zeros_like(room))


@dataclass
class HeadLabels:
    """Labels and strengths of every head.

    ``labels[layer][head]`` is a string of :data:`LABELS`; ``strength`` ``(n_layers,
    n_heads)`` in [0, 1] says how strongly (see the rule); ``lifts`` are the family lifts the
    rule compared; ``relative_effect`` is effect / mean effect (None without effects).
    """

    labels: list[list[str]]
    strength: torch.Tensor
    lifts: dict[str, torch.Tensor]
    relative_effect: torch.Tensor | None

    def __getitem__(self, head: tuple[int, int]) -> str:
        layer, h = head
        return self.labels[layer][h]

    def counts(self) -> Counter:
        return Counter(label for row in self.labels for label in row)


def _as_grid(name: str, value, shape=None) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float64)
    if t.dim() != 2:
        raise ValueError(f"{name} must be (n_layers, n_heads), got shape {tuple(t.shape)}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, but the other scores are {shape}")
    return t


def label_heads(scores: Mapping[str, torch.Tensor], effects: torch.Tensor | None = None,
                thresholds: Thresholds = DEFAULT_THRESHOLDS, *,
                uniform: Mapping[str, torch.Tensor]) -> HeadLabels:
    """Label every head by the rule in the module docstring.

    Args:
        scores: name -> ``(n_layers, n_heads)`` mean scores; the registry's families and
            ``"entropy"`` are used, others ignored; NaN takes no part.
        effects: ``(n_layers, n_heads)``, >= 0 (e.g. mean absolute ablation effects), or None.
        uniform: name -> the same score for uniform attention, for every family in ``scores``.
    """
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a headlab.analysis.detect.Thresholds, got {type(thresholds).__name__}")
    named, broad = families(), broad_families()
    names = [n for n in named + broad if n in scores]
    if not names and "entropy" not in scores:
        raise ValueError(f"no score to label with: give some of {named + broad + ('entropy',)}")
    shape = None
    lifts = {}
    for name in names:
        if name not in uniform:
            raise ValueError(f"uniform[{name!r}] is missing: every family score needs its uniform-attention "
                             "value (headlab.analysis.detect.HeadScores carries them)")
        s = _as_grid(name, scores[name], shape)
        shape = tuple(s.shape)
        lifts[name] = lift(s, _as_grid(f"uniform[{name!r}]", uniform[name], shape))
    entropy = None
    if "entropy" in scores:
        entropy = _as_grid("entropy", scores["entropy"], shape)
        shape = tuple(entropy.shape)
    relative = peak = None
    if effects is not None:
        eff = _as_grid("effects", effects, shape)
        shape = tuple(eff.shape)
        if not bool(torch.isfinite(eff).all()) or bool((eff < 0).any()):
            raise ValueError("effects must be finite and >= 0 (use absolute effects)")
        mean = float(eff.mean())
        relative = eff / mean if mean > 0 else torch.zeros_like(eff)
        peak = eff / float(eff.max()) if float(eff.max()) > 0 else torch.zeros_like(eff)

    n_layers, n_heads = shape
    neg = torch.tensor(float("-inf"), dtype=torch.float64)
    labels = [["" for _ in range(n_heads)] for _ in range(n_layers)]
    strength = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        for head in range(n_heads):
            best_name, best, top = None, neg, neg  # the best family that reaches its bar; the best lift
            for name in named:
                if name in lifts:
                    value = lifts[name][layer, head]
                    if torch.isnan(value):
                        continue
                    top = torch.maximum(top, value)
                    if value >= thresholds.bar(name) and value > best:
                        best_name, best = name, value
            wide = [(lifts[n][layer, head], n) for n in broad
                    if n in lifts and not torch.isnan(lifts[n][layer, head])]
            wide_value, wide_name = max(wide, key=lambda vn: vn[0]) if wide else (None, None)
            if best_name is not None:
                label, value = best_name, best
            elif wide_value is not None and wide_value >= thresholds.lift:
                label, value = wide_name, wide_value
            elif relative is not None and relative[layer, head] >= thresholds.orphan_effect:
                label, value = "orphan", peak[layer, head]
            elif entropy is not None and entropy[layer, head] >= thresholds.diffuse_entropy:
                label, value = "diffuse", entropy[layer, head]
            elif relative is not None:
                label, value = "inactive", peak[layer, head]
            else:
                label, value = "unlabelled", top if bool(top > neg) else torch.tensor(0.0)
            labels[layer][head] = label
            strength[layer, head] = float(value)
    return HeadLabels(labels, strength.clamp(0, 1), lifts, relative)
