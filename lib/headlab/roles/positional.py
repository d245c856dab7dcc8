"""Previous-token heads (and the other fixed-key heads): the one definition the book uses.

**Definition.** A head attends to a fixed key -- the previous token (offset -1), the next one
(+1, encoders only), the first position (``[CLS]``, ``<bos>``) -- when:

* **Score and baseline**: its weight on that key, averaged over the eligible queries of a text,
  is compared with the weight uniform attention puts there on the same text: the *lift*
  ``(s - u) / (1 - u)`` of ``headlab.analysis.detect.labels`` (0: like uniform attention,
  1: every row on that key), taken over the mean of the texts as the atlas takes it.
* **Threshold, from a null and a share**: the lift must exceed what heads reach by accident --
  the null is the lift of every head of the same model on *decoy* keys, fixed offsets and
  positions no family is about (``headlab.analysis.detect.calibration.decoy_lifts``), and
  its 99% quantile (``headlab.analysis.detect.calibration.NULL_LEVEL``, on the selection
  texts) is ``FixedKeyHeads.null_threshold`` -- and it must reach the share that names a head,
  ``min_lift`` (0.4 of the free weight, ``LABEL_LIFT``: the same bar at which the atlas labels a head
  ``previous_token``). The threshold is the larger of the two.
* **Selection split**: candidates are the heads whose lift on the *selection* texts exceeds the
  null threshold; each is then measured on the *measurement* texts only, with a bootstrap interval
  over texts (the texts, never the tokens, are resampled; the uniform reference is held at its
  measurement-text mean).
* A head **is** a previous-token head when the 95% interval of its measured lift lies above the
  threshold (:attr:`FixedKeyHead.is_role`).

:func:`previous_token_heads` is the role the book names; :func:`fixed_key_heads` is the same
rule for any offset or position. Both take the model and its texts (texts or a token batch) and
return every head's numbers, so a notebook or the checklist report can print or judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from headlab.analysis.detect.calibration import NULL_LEVEL, OffsetScores, decoy_lifts, null_lift, offset_scores
from headlab.analysis.detect.labels import LABEL_LIFT
from headlab.stats import Estimate, Split, bootstrap_mean, split_items

__all__ = ["FixedKeyHead", "FixedKeyHeads", "fixed_key_heads", "previous_token_heads", "first_token_heads"]


@dataclass(frozen=True)
class FixedKeyHead:
    """One head's lift on a fixed key, chosen on one split and measured on the other.

    Attributes:
        head: ``(layer, head)``.
        select_lift: its lift on the selection texts.
        lift: its lift on the measurement texts, with a bootstrap interval over texts.
        threshold: the null threshold it must exceed.
    """

    head: tuple[int, int]
    select_lift: float
    lift: Estimate
    threshold: float

    @property
    def is_role(self) -> bool:
        """Whether the whole interval of the measured lift lies above the threshold."""
        return self.lift.low > self.threshold


@dataclass(frozen=True)
class FixedKeyHeads:
    """Every candidate head for one fixed key, and the null they were judged against.

    Attributes:
        key: the key set, e.g. ``"offset -1"``.
        threshold: the threshold a head must exceed: the larger of ``null_threshold`` and ``min_lift``.
        null_level: the quantile of the decoy lifts taken as the null threshold.
        candidates: heads whose selection lift exceeds the threshold, by measured lift (largest
            first; ties by head index).
        select_lifts: ``(n_layers, n_heads)`` every head's lift on the selection texts.
        n_select: selection texts.
        n_measure: measurement texts.
    """

    key: str
    threshold: float
    null_level: float
    candidates: tuple[FixedKeyHead, ...]
    select_lifts: np.ndarray = field(repr=False)
    n_select: int = 0
    n_measure: int = 0
    null_threshold: float = float("nan")
    min_lift: float = LABEL_LIFT

    @property
    def heads(self) -> tuple[FixedKeyHead, ...]:
        """The heads that play the role (measured interval above the threshold)."""
        return tuple(c for c in self.candidates if c.is_role)

    @property
    def best(self) -> FixedKeyHead | None:
        """The candidate with the largest selection lift (chosen before measuring), or None."""
        if not self.candidates:
            return None
        return max(self.candidates, key=lambda c: (c.select_lift, -c.head[0], -c.head[1]))

    @property
    def beyond_null(self) -> tuple[FixedKeyHead, ...]:
        """The candidates whose measured interval lies above the null threshold alone."""
        return tuple(c for c in self.candidates if c.lift.low > self.null_threshold)


def fixed_key_heads(hm, inputs, *, offset: int | None = None, position: int | None = None,
                    split: Split | None = None, null_level: float = NULL_LEVEL, min_lift: float = LABEL_LIFT,
                    level: float = 0.95, null: OffsetScores | None = None,
                    n_resamples: int = 9999, seed: int = 0, batch_size: int = 32) -> FixedKeyHeads:
    """The heads of ``hm`` that attend to a fixed offset or a fixed position, by the module's rule.

    Args:
        hm: the model.
        inputs: its texts (a list of strings) or a token batch.
        offset: the offset (``-1``: the previous token); or give ``position``.
        position: an absolute position (``0``: the first token).
        split: texts to select on and to measure on (positions into ``inputs``); default
            ``headlab.stats.split_items(n_texts)``.
        null_level: the quantile of the decoy lifts used as the null threshold.
        min_lift: the share of the free weight that names a head (the threshold is the larger).
        level, n_resamples, seed: of the bootstrap intervals.
        null: the decoy lifts ``decoy_lifts(hm, inputs)``, when they are already computed (they
            depend only on the model and the texts); default: computed here, one more forward pass.
        batch_size: texts per forward pass.
    """
    if (offset is None) == (position is None):
        raise ValueError("give exactly one of offset= (e.g. -1, the previous token) or position= (e.g. 0)")
    if offset is not None and offset > 0 and hm.causal:
        raise ValueError(f"{hm.name} is causal: its queries cannot attend to offset {offset:+d}")
    scores = offset_scores(hm, inputs, () if offset is None else (offset,), () if position is None else (position,),
                           batch_size=batch_size)
    n = scores.scores.shape[0]
    split = split_items(n) if split is None else split
    if null is None:
        null = decoy_lifts(hm, inputs, batch_size=batch_size)
    elif not isinstance(null, OffsetScores) or null.scores.shape[0] != n:
        got = f"{null.scores.shape[0]} texts" if isinstance(null, OffsetScores) else type(null).__name__
        raise ValueError(f"null= must be decoy_lifts(hm, inputs) on the same {n} texts; got {got}")
    null_t = null_lift(null, split.select, level=null_level)
    threshold = max(null_t, float(min_lift))
    select = scores.lifts(split.select)[0].numpy()  # (n_layers, n_heads)
    meas = torch.as_tensor(split.measure, dtype=torch.long)
    s, u = scores.scores[meas, 0], scores.uniform[meas, 0]  # (n_measure, L, H), (n_measure,)
    defined = ~torch.isnan(u)
    room = 1 - float(u[defined].mean())
    candidates = []
    order = sorted(np.ndindex(*select.shape), key=lambda lh: (-round(float(select[lh]), 9), lh))
    for lh in order:
        if not select[lh] > null_t:  # candidates: beyond the null on the selection texts
            continue
        excess = (s[defined][:, lh[0], lh[1]] - u[defined]).numpy()
        est = bootstrap_mean(excess, level=level, n_resamples=n_resamples, seed=seed)
        lift = Estimate(est.value / room, est.low / room, est.high / room, est.n, est.level,
                        f"{est.method}, divided by 1 - uniform")
        candidates.append(FixedKeyHead((int(lh[0]), int(lh[1])), float(select[lh]), lift, threshold))
    candidates.sort(key=lambda c: (-round(c.lift.value, 9), c.head))
    return FixedKeyHeads(scores.keys[0], threshold, null_level, tuple(candidates), select,
                         int(len(split.select)), int(len(split.measure)), null_t, float(min_lift))


def previous_token_heads(hm, inputs, **kwargs) -> FixedKeyHeads:
    """The previous-token heads of ``hm`` on ``inputs``: :func:`fixed_key_heads` at offset -1."""
    return fixed_key_heads(hm, inputs, offset=-1, **kwargs)


def first_token_heads(hm, inputs, **kwargs) -> FixedKeyHeads:
    """The heads that park their attention on the first position (the sink): :func:`fixed_key_heads`
    at position 0."""
    return fixed_key_heads(hm, inputs, position=0, **kwargs)
