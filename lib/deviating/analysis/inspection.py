"""Inspecting attention for hijacked heads: can a trigger be seen in the attention pattern?

The attack is in :mod:`deviating.analysis.adversarial`. An inspector looks at the attention rows at
the query position (:func:`query_rows`) and asks whether a head puts an unusual amount of weight on a *single*
key. :func:`peak_weight` is that largest weight on one key, leaving out keys the model parks
attention on in every input (position 0, ``<bos>``). Two inspectors:

* **per head**: an input is flagged when some head's peak exceeds ``x``;
* **mean**: an input is flagged when the peak of some layer's *mean* pattern over heads
  exceeds ``x`` (what one sees from a head-averaged attention map).

Raw peaks differ from head to head (a previous-token head always peaks near 1), so
:func:`suspicion` also gives each input a calibrated score: the largest z-score of a peak
against the same head's (or layer's) peaks on clean calibration inputs; :func:`detection_rates`
then reports, at a threshold that flags a chosen fraction of the calibration inputs, the
fraction of attacked inputs flagged (detection rate) and of *other* clean inputs flagged
(false-positive rate).

Two inspectors compared at *different* false-positive rates cannot be ranked: one may flag more
attacks only because it flags more of everything. :func:`inspector_scores` gives every input a
calibrated score under either inspector (``"peak"``: the peak weight; ``"before"``: the weight
before the query's sentence, :func:`weight_before`), per head or on the layers' mean patterns;
:func:`roc_auc` compares attacked with clean inputs at every threshold at once, and
:func:`tpr_at_fpr` reads the detection rate at one matched false-positive rate;
:func:`auc_difference` gives the paired difference of two inspectors' AUCs with a bootstrap
interval over items.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from scipy import stats as sps

from headlab.heads.model import HeadModel
from headlab.stats.results import Estimate

__all__ = ["query_rows", "peak_weight", "flag_inputs", "suspicion", "detection_rates", "weight_before",
           "rates_from_scores", "INSPECTORS", "inspector_scores", "roc_auc", "tpr_at_fpr", "auc_difference"]

INSPECTORS = ("peak", "before")  # the peak weight on one key; the weight before the query's sentence


def query_rows(hm: HeadModel, ids: torch.Tensor, queries: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """``(n, n_layers, n_heads, pos)``: every head's attention row at each input's query position."""
    out = []
    for start in range(0, len(ids), batch_size):
        sl = slice(start, start + batch_size)
        _, cache = hm.run_with_cache(ids[sl].to(hm.device), names=("pattern",))
        q = queries[sl].to(hm.device)
        rows = [cache.pattern(l)[torch.arange(len(q)), :, q] for l in range(hm.n_layers)]  # (b, head, k_pos)
        out.append(torch.stack(rows, 1).float().cpu())
    return torch.cat(out)


def peak_weight(rows: torch.Tensor, ignore: Sequence[int] = (0,)) -> torch.Tensor:
    """The largest weight a row puts on one key, ignoring the keys ``ignore`` (default: position 0,
    the sink). ``rows``: ``(..., pos)`` -> ``(...)``."""
    r = rows.clone()
    if len(ignore):
        r[..., list(ignore)] = 0.0
    return r.max(dim=-1).values


def flag_inputs(rows: torch.Tensor, x: float, mode: str = "per_head", ignore: Sequence[int] = (0,)) -> torch.Tensor:
    """``(n,)`` bool: flag the inputs on which some head (``mode="per_head"``) or some layer's mean
    over heads (``mode="mean"``) puts more than ``x`` on a single key. ``rows``: ``(n, layer, head, pos)``."""
    if mode == "per_head":
        return (peak_weight(rows, ignore) > x).flatten(1).any(dim=1)
    if mode == "mean":
        return (peak_weight(rows.mean(dim=2), ignore) > x).any(dim=1)
    raise ValueError(f"mode must be 'per_head' or 'mean', not {mode!r}")


def suspicion(rows: torch.Tensor, calibration: torch.Tensor, mode: str = "per_head",
              ignore: Sequence[int] = (0,)) -> torch.Tensor:
    """``(n,)`` calibrated score: the largest z-score, over heads (``per_head``) or layers (``mean``),
    of the input's peak weight against the peaks of the same head (layer) on clean ``calibration``
    rows ``(m, layer, head, pos)``."""
    if mode == "per_head":
        peak, ref = peak_weight(rows, ignore), peak_weight(calibration, ignore)  # (n|m, layer, head)
    elif mode == "mean":
        peak, ref = peak_weight(rows.mean(2), ignore), peak_weight(calibration.mean(2), ignore)  # (n|m, layer)
    else:
        raise ValueError(f"mode must be 'per_head' or 'mean', not {mode!r}")
    if len(ref) < 2:
        raise ValueError("calibration needs at least two clean inputs")
    z = (peak - ref.mean(0)) / ref.std(0).clamp_min(1e-6)
    return z.flatten(1).max(dim=1).values


def detection_rates(calibration: torch.Tensor, clean: torch.Tensor, attacked: torch.Tensor,
                    mode: str = "per_head", calibration_rate: float = 0.05,
                    ignore: Sequence[int] = (0,)) -> dict[str, float]:
    """Calibrate a threshold on clean ``calibration`` rows so that it flags ``calibration_rate`` of
    them, then report the fraction of held-out ``clean`` inputs flagged (false positives) and of
    ``attacked`` inputs flagged (detections). All three are ``(n, layer, head, pos)`` rows."""
    if not 0 < calibration_rate < 1:
        raise ValueError(f"calibration_rate must be in (0, 1), got {calibration_rate}")
    ref = suspicion(calibration, calibration, mode, ignore)
    threshold = float(torch.quantile(ref, 1 - calibration_rate))
    return {"threshold": threshold,
            "false_positive_rate": float((suspicion(clean, calibration, mode, ignore) > threshold).float().mean()),
            "detection_rate": float((suspicion(attacked, calibration, mode, ignore) > threshold).float().mean())}


def weight_before(rows: torch.Tensor, boundary: torch.Tensor, ignore: Sequence[int] = (0,)) -> torch.Tensor:
    """The total weight each row puts on keys ``1 .. boundary[i]`` (e.g. everything before the
    query's own sentence), leaving out the keys ``ignore``. ``rows``: ``(n, ..., pos)``,
    ``boundary``: ``(n,)`` -> ``(n, ...)``."""
    if boundary.shape != (rows.shape[0],):
        raise ValueError(f"boundary must hold one position per input ({rows.shape[0]}), got {tuple(boundary.shape)}")
    keys = torch.arange(rows.shape[-1])
    mask = keys[None, :] <= boundary[:, None]  # (n, pos)
    if len(ignore):
        mask[:, list(ignore)] = False
    mask = mask.view(rows.shape[0], *([1] * (rows.dim() - 2)), rows.shape[-1])
    return (rows * mask).sum(-1)


def rates_from_scores(calibration: torch.Tensor, clean: torch.Tensor, attacked: torch.Tensor,
                      calibration_rate: float = 0.05) -> dict[str, float]:
    """Detection and false-positive rates for any per-unit score ``(n, ...)`` (a unit: a head, or a
    layer's mean): each input's suspicion is its largest z-score against the units' scores on the
    clean ``calibration`` inputs; the threshold flags ``calibration_rate`` of those."""
    if not 0 < calibration_rate < 1:
        raise ValueError(f"calibration_rate must be in (0, 1), got {calibration_rate}")
    if len(calibration) < 2:
        raise ValueError("calibration needs at least two clean inputs")
    mu, sd = calibration.mean(0), calibration.std(0).clamp_min(1e-6)

    def z(x):
        return ((x - mu) / sd).flatten(1).max(dim=1).values

    threshold = float(torch.quantile(z(calibration), 1 - calibration_rate))
    return {"threshold": threshold, "false_positive_rate": float((z(clean) > threshold).float().mean()),
            "detection_rate": float((z(attacked) > threshold).float().mean())}


def inspector_scores(rows: torch.Tensor, boundary: torch.Tensor, calibration: torch.Tensor,
                     calibration_boundary: torch.Tensor, inspector: str = "before", mode: str = "per_head",
                     ignore: Sequence[int] = (0,)) -> torch.Tensor:
    """``(n,)`` calibrated suspicion of each input under one inspector: the largest z-score, over
    heads (``mode="per_head"``) or over the layers' mean patterns (``"mean"``), of the input's
    ``inspector`` statistic against the same unit's on clean ``calibration`` rows.

    Args:
        rows: ``(n, layer, head, pos)`` query rows of the inputs.
        boundary: ``(n,)`` the last key before each input's own sentence (for ``"before"``).
        calibration: ``(m, layer, head, pos)`` query rows of clean inputs (same width).
        calibration_boundary: ``(m,)`` their boundaries.
        inspector: ``"peak"`` (:func:`peak_weight`) or ``"before"`` (:func:`weight_before`).
        mode: ``"per_head"`` or ``"mean"``.
        ignore: keys left out (the sink at position 0).
    """
    if inspector not in INSPECTORS:
        raise ValueError(f"inspector must be one of {INSPECTORS} (peak weight, weight before the sentence); "
                         f"got {inspector!r}")
    if mode not in ("per_head", "mean"):
        raise ValueError(f"mode must be 'per_head' or 'mean', not {mode!r}")
    if len(calibration) < 2:
        raise ValueError("calibration needs at least two clean inputs")
    if rows.shape[-1] != calibration.shape[-1]:
        raise ValueError(f"rows ({rows.shape[-1]} keys) and calibration ({calibration.shape[-1]} keys) must have "
                         "the same width: pad the shorter with zeros")
    r, c = (rows, calibration) if mode == "per_head" else (rows.mean(2), calibration.mean(2))
    if inspector == "peak":
        stat, ref = peak_weight(r, ignore), peak_weight(c, ignore)
    else:
        stat, ref = weight_before(r, boundary, ignore), weight_before(c, calibration_boundary, ignore)
    z = (stat - ref.mean(0)) / ref.std(0).clamp_min(1e-6)
    return z.flatten(1).max(dim=1).values


def _scores(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    if a.size == 0 or not np.isfinite(a).all():
        raise ValueError(f"{name} must hold at least one finite score")
    return a


def roc_auc(positive, negative) -> float:
    """Area under the ROC curve: the probability that a positive (attacked) input scores above a
    negative (clean) one, ties counting one half (the Mann-Whitney statistic over
    ``len(positive) * len(negative)``). 0.5: the inspector cannot tell them apart."""
    pos, neg = _scores(positive, "positive"), _scores(negative, "negative")
    ranks = sps.rankdata(np.concatenate([pos, neg]))
    return float((ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def tpr_at_fpr(positive, negative, fpr: float = 0.05) -> float:
    """The share of positives flagged at the threshold that flags at most ``fpr`` of the
    negatives (the ROC curve read at one false-positive rate: two inspectors compared at the
    same rate)."""
    if not 0 <= fpr < 1:
        raise ValueError(f"fpr must be in [0, 1), got {fpr}")
    pos, neg = _scores(positive, "positive"), _scores(negative, "negative")
    values = np.sort(neg)[::-1]
    allowed = int(np.floor(fpr * neg.size))  # negatives that may lie above the threshold
    threshold = values[allowed] if allowed < neg.size else -np.inf
    return float(np.mean(pos > threshold))


def auc_difference(clean_a, attacked_a, clean_b, attacked_b, positive, *, n_resamples: int = 2000,
                   seed: int = 0, level: float = 0.95) -> Estimate:
    """``AUC(a) - AUC(b)`` of two inspectors on the same items, with a percentile bootstrap
    interval that resamples items (each item keeps its clean score, its attacked score and
    whether the attack succeeded, for both inspectors: paired).

    Args:
        clean_a, attacked_a: ``(n,)`` inspector a's scores of each item's clean and attacked input.
        clean_b, attacked_b: the same for inspector b.
        positive: ``(n,)`` bool, the items whose attack succeeded (their attacked inputs are
            the positives; every item's clean input is a negative).
        n_resamples: bootstrap resamples.
        seed: seed of the resampling.
        level: confidence level.
    """
    ca, aa, cb, ab = (_scores(x, n) for x, n in ((clean_a, "clean_a"), (attacked_a, "attacked_a"),
                                                  (clean_b, "clean_b"), (attacked_b, "attacked_b")))
    pos = np.asarray(positive, dtype=bool).ravel()
    if not (ca.size == aa.size == cb.size == ab.size == pos.size):
        raise ValueError("every score array and positive must hold one value per item")
    if pos.sum() < 2:
        raise ValueError(f"only {int(pos.sum())} successful attacks: an AUC needs at least two positives")
    if n_resamples < 100:
        raise ValueError(f"n_resamples must be at least 100; got {n_resamples}")
    value = roc_auc(aa[pos], ca) - roc_auc(ab[pos], cb)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_resamples):
        i = rng.integers(0, pos.size, pos.size)
        p = pos[i]
        if p.sum() == 0:
            continue
        draws.append(roc_auc(aa[i][p], ca[i]) - roc_auc(ab[i][p], cb[i]))
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(value), float(low), float(high), int(pos.size), level,
                    f"percentile bootstrap over {pos.size} items ({len(draws)} resamples)")
