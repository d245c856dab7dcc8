"""How large a lift names a head, and how stable a label is: the label rule calibrated against a null.

* **Decoy keys** (:func:`decoy_lifts`): key sets no family is about, a fixed offset
  ``3 <= |k| <= 6`` or a fixed position 2 to 5. Their lifts are what a head reaches by accident.
* **The calibrated threshold** (:func:`calibrated_thresholds`): the larger of the ``level``
  quantile of the decoy lifts over every head (:func:`null_lift`) and the rule's own 0.4.
  Compute it on the selection half of the texts, label on the other.
* **Stability** (:func:`label_stability`): a label is printed only when it comes back in at
  least ``threshold`` of bootstrap resamples of the texts, otherwise ``"unstable"``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from headlab.analysis.detect.base import uniform_pattern
from headlab.analysis.detect.labels import DEFAULT_THRESHOLDS, Thresholds, label_heads, lift
from headlab.analysis.detect.positional import offset_score
from headlab.analysis.detect.registry import pattern_scores
from headlab.analysis.detect.scores import HeadScores
from headlab.analysis.detect.tokens import key_mass_score
from headlab.stats import UNSTABLE, null_threshold

__all__ = ["DECOY_OFFSETS", "DECOY_POSITIONS", "NULL_LEVEL", "OffsetScores", "offset_scores", "decoy_lifts",
           "null_lift", "calibrated_thresholds", "StableLabels", "label_stability"]

DECOY_OFFSETS = (3, 4, 5, 6)      # |k|: fixed offsets beyond the local window (LOCAL_WINDOW = 2)
DECOY_POSITIONS = (2, 3, 4, 5)    # fixed absolute positions after the first two
NULL_LEVEL = 0.99                 # share of the decoy lifts the calibrated threshold must cover


@dataclass(frozen=True)
class OffsetScores:
    """Per-text weight on fixed offsets and fixed positions, beside uniform attention's.

    Attributes:
        keys: the key sets, e.g. ``"offset -1"``, ``"position 3"``.
        scores: ``(n_texts, n_keys, n_layers, n_heads)``: mean weight over the eligible queries of
            each text; NaN where a text has none (a text shorter than the offset).
        uniform: ``(n_texts, n_keys)``: the same for uniform attention.
    """

    keys: tuple[str, ...]
    scores: torch.Tensor
    uniform: torch.Tensor

    def lifts(self, texts=None) -> torch.Tensor:
        """``(n_keys, n_layers, n_heads)``: the lift of the mean over ``texts`` (positions; default
        all), as the atlas computes it: ``(mean s - mean u) / (1 - mean u)``."""
        idx = slice(None) if texts is None else torch.as_tensor(np.asarray(texts), dtype=torch.long)
        s, u = self.scores[idx], self.uniform[idx]
        return lift(s.nanmean(0), u.nanmean(0)[:, None, None]).float()


def _key_sets(causal: bool, offsets, positions) -> list[tuple[str, str, int]]:
    sets = [("offset", f"offset {k:+d}", k) for k in offsets]
    sets += [("position", f"position {j}", j) for j in positions]
    if causal and any(k > 0 for k in offsets):
        raise ValueError(f"a causal model cannot attend to offsets > 0; got {tuple(offsets)}")
    return sets


def offset_scores(hm, inputs, offsets, positions=(), *, batch_size: int = 32) -> OffsetScores:
    """Every head's weight on fixed offsets (``offsets``, e.g. ``(-1,)``) and fixed absolute positions
    (``positions``), per text, with uniform attention's on the same texts.

    ``inputs``: texts or a token batch, as :func:`headlab.analysis.detect.head_scores` takes them.
    """
    sets = _key_sets(hm.causal, offsets, positions)
    if not sets:
        raise ValueError("give at least one offset or position")
    scores, uniform = [], []
    for batch in hm.batches(inputs, batch_size):
        _, cache = hm.run_with_cache(batch, names=("pattern",))
        mask = cache.attention_mask.cpu()
        flat = uniform_pattern(mask, hm.causal)
        keys_at = {}
        for kind, _, k in sets:
            if kind == "position":
                at = torch.zeros_like(mask, dtype=torch.bool)
                if k < at.shape[1]:
                    at[:, k] = mask[:, k].bool()
                keys_at[k] = at
        per_layer = []
        for layer in range(hm.n_layers):
            p = cache.pattern(layer).float().cpu()
            per_layer.append(torch.stack([_score(p, mask, kind, k, keys_at, hm.causal) for kind, _, k in sets], 1))
        scores.append(torch.stack(per_layer, 2))  # (batch, n_keys, n_layers, n_heads)
        uniform.append(torch.stack([_score(flat, mask, kind, k, keys_at, hm.causal)[:, 0] for kind, _, k in sets], 1))
    return OffsetScores(tuple(name for _, name, _ in sets), torch.cat(scores).double(), torch.cat(uniform).double())


def _score(pattern, mask, kind, k, keys_at, causal) -> torch.Tensor:
    if kind == "offset":
        return offset_score(pattern, k, mask, on_empty="nan")
    return key_mass_score(pattern, keys_at[k], mask, causal=causal, on_empty="nan")


def decoy_lifts(hm, inputs, *, offsets=DECOY_OFFSETS, positions=DECOY_POSITIONS, batch_size: int = 32) -> OffsetScores:
    """The null of the label rule: every head's weight on decoy key sets (module docstring), per text.

    ``offsets`` are distances ``|k|``: an encoder gets ``-k`` and ``+k``, a causal model ``-k`` only.
    Read the lifts with :meth:`OffsetScores.lifts`.
    """
    if any(k < 1 for k in offsets):
        raise ValueError(f"decoy offsets are distances >= 1, e.g. {DECOY_OFFSETS}; got {tuple(offsets)}")
    signed = [-k for k in offsets] + ([] if hm.causal else list(offsets))
    return offset_scores(hm, inputs, signed, positions, batch_size=batch_size)


def null_lift(null: OffsetScores, texts=None, *, level: float = NULL_LEVEL) -> float:
    """The ``level`` quantile of the decoy lifts of ``null`` over every decoy and head (only on
    ``texts``, positions into the texts, when given: pass the selection half), rounded to 4 places."""
    lifts = null.lifts(texts)
    values = lifts[torch.isfinite(lifts)]
    if values.numel() == 0:
        raise ValueError("no decoy lift is defined on these texts (are they shorter than every decoy offset?)")
    return round(null_threshold(values.numpy(), level=level), 4)


def calibrated_thresholds(null: OffsetScores, texts=None, *, level: float = NULL_LEVEL,
                          base: Thresholds = DEFAULT_THRESHOLDS) -> Thresholds:
    """``base`` with its ``lift`` raised to :func:`null_lift` when the null reaches higher (never
    lowered below the rule's share); the other constants of the rule are kept."""
    return replace(base, lift=max(base.lift, null_lift(null, texts, level=level)))


@dataclass(frozen=True)
class StableLabels:
    """Labels that survive resampling the texts.

    Attributes:
        labels: ``[layer][head]`` the rule's label on all texts.
        shares: ``(n_layers, n_heads)``: share of resamples giving that label.
        threshold: the share needed to print the label.
    """

    labels: list[list[str]]
    shares: np.ndarray
    threshold: float
    n_resamples: int

    def printed(self, head: tuple[int, int]) -> str:
        """The label when stable, else ``"unstable"``."""
        layer, h = head
        return self.labels[layer][h] if self.shares[layer, h] >= self.threshold else UNSTABLE

    def counts(self) -> dict[str, int]:
        """How many heads print each label (``"unstable"`` included), most common first, ties by name."""
        found: dict[str, int] = {}
        for layer in range(len(self.labels)):
            for h in range(len(self.labels[layer])):
                name = self.printed((layer, h))
                found[name] = found.get(name, 0) + 1
        return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def _labels(scores: HeadScores, idx, effects, eidx, thresholds) -> list[list[str]]:
    means, uniform = {}, {}
    for name in pattern_scores():
        if name in scores.per_input and name in scores.uniform and scores.defined(name):
            values = scores.per_input[name][idx]
            m = values.nanmean(0)
            if bool(torch.isnan(m).all()):
                continue
            means[name] = m
            uniform[name] = torch.full_like(m, float(scores.uniform[name][idx].nanmean()))
    eff = None if effects is None else effects[..., eidx].mean(-1)
    return label_heads(means, eff, thresholds, uniform=uniform).labels


def label_stability(scores: HeadScores, thresholds: Thresholds = DEFAULT_THRESHOLDS, effects=None, *,
                    n_resamples: int = 200, threshold: float = 0.9, seed: int = 0) -> StableLabels:
    """Each head's label on all texts, and the share of bootstrap resamples of the texts that give it.

    Args:
        scores: per-text pattern scores (:func:`headlab.analysis.detect.head_scores`).
        effects: optional ``(n_layers, n_heads, n_effect_texts)`` per-text absolute effects;
            its texts are resampled too, independently.
        threshold: the share a label needs to be printed.
    """
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    n = scores.n_inputs
    if n < 2:
        raise ValueError(f"label stability needs at least two texts; got {n}")
    eff = None if effects is None else torch.as_tensor(effects, dtype=torch.float64)
    m = 0 if eff is None else eff.shape[-1]
    full = _labels(scores, slice(None), eff, slice(None), thresholds)
    rng = np.random.default_rng(seed)
    same = np.zeros((scores.n_layers, scores.n_heads))
    for _ in range(n_resamples):
        idx = torch.as_tensor(rng.integers(0, n, n))
        eidx = None if eff is None else torch.as_tensor(rng.integers(0, m, m))
        again = _labels(scores, idx, eff, eidx, thresholds)
        same += np.array([[a == b for a, b in zip(r1, r2)] for r1, r2 in zip(full, again)])
    return StableLabels(full, same / n_resamples, threshold, n_resamples)
