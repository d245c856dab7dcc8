"""Chapters 1 and 2 on the two-relations task: one head against two (C1), narrower heads (C17).

The models are 1-layer attention-only GPTs trained on
:class:`~deviating.data.two_relations.TwoRelations` (recipes ``two-relations-*-s0..2``). Every
number here is measured on the same evaluation sequences, and every interval resamples
**sequences** (each holds several answers, which are not independent), never answers:

* :func:`answer_outcomes` -- per answer, right or wrong, with the sequence it belongs to;
* :func:`lead` -- the accuracy lead of one model over another on the same answers, with a
  paired bootstrap interval over sequences;
* :func:`error_rate` -- one model's share of wrong answers, with its interval;
* :func:`c1_row` -- claim C1 (a single head is a bottleneck): the lead of two heads over one
  head of the same width, per training seed, with and without LayerNorm;
* :func:`narrow_heads_row` -- claim C17 on this task: does a head of rank ``d_head`` fail it?
* :func:`order_blind_ceiling` -- the best accuracy of a reader that sees the two letters an
  answer depends on without their order, counted over every pair of letters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from headlab import stats
from deviating.data.two_relations import TwoRelations, TwoRelationsBatch
from headlab.stats import Estimate
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["NO_LEAD", "answer_outcomes", "lead", "error_rate", "c1_row", "narrow_heads_row",
           "order_blind_ceiling"]

#: An accuracy difference (or error rate) smaller than this, one percentage point, counts as none:
#: the no-effect band of the rows below.
NO_LEAD = 0.01
#: Bootstrap resamples of every interval here (over sequences).
RESAMPLES = 4999


def answer_outcomes(task: TwoRelations, model, data: TwoRelationsBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(correct, sequence)``: for every answer (every ``";"``, in row-major order), whether the
    model's top prediction is the answer, and the index of the sequence it belongs to."""
    correct = task.answers(model, data)["correct"].cpu().numpy().astype(float)
    sequence = torch.nonzero(data.query, as_tuple=True)[0].cpu().numpy()
    if correct.shape != sequence.shape:
        raise ValueError(f"{correct.size} answers but {sequence.size} ';' positions: the data and the task disagree")
    return correct, sequence


def lead(task: TwoRelations, model, baseline, data: TwoRelationsBatch, seed: int = 0) -> Estimate:
    """Accuracy of ``model`` minus that of ``baseline`` on the same answers, with a paired bootstrap
    interval that resamples whole sequences."""
    a, items = answer_outcomes(task, model, data)
    b, _ = answer_outcomes(task, baseline, data)
    return stats.paired_difference(a, b, items, n_resamples=RESAMPLES, seed=seed)


def error_rate(task: TwoRelations, model, data: TwoRelationsBatch, seed: int = 0) -> Estimate:
    """The share of wrong answers, with a bootstrap interval over sequences."""
    correct, items = answer_outcomes(task, model, data)
    return stats.bootstrap_mean(1.0 - correct, items, n_resamples=RESAMPLES, seed=seed)


def _headline(measurements: Sequence[Measurement], condition: str) -> Measurement:
    """The mean over seeds of one condition, with its t interval over seeds (what the ledger prints)."""
    chosen = [m for m in measurements if m.condition == condition]
    if len(chosen) < 2:
        return chosen[0]
    return Measurement.from_estimate(stats.over_seeds([m.effect for m in chosen]),
                                     f"{condition}, mean over {len(chosen)} seeds")


def c1_row(task: TwoRelations, models: Mapping[tuple[str, int], object], data: TwoRelationsBatch,
           seeds: Sequence[int]) -> ClaimRow:
    """Claim C1 from the trained models: ``models[stem, seed]`` for the stems
    ``two-relations-1h``, ``two-relations-2h`` and their ``-ln`` (LayerNorm) variants.

    One measurement per (condition, seed): the accuracy lead of the two-head model over the
    one-head model trained with the same seed, on the same answers. The claim predicts a lead
    (direction ``"greater"``); a lead inside ``±NO_LEAD`` counts as none.
    """
    conditions = {"no LayerNorm": "", "LayerNorm": "-ln"}
    measurements = []
    for condition, suffix in conditions.items():
        for seed in seeds:
            two, one = models[f"two-relations-2h{suffix}", seed], models[f"two-relations-1h{suffix}", seed]
            measurements.append(Measurement.from_estimate(lead(task, two, one, data), condition, seed))
    n_seq = int(data.tokens.shape[0])
    return ClaimRow(
        "C1", f"1-layer attention-only GPTs, d_model 32, on TwoRelations ({task.n_letters} letters); "
              f"{n_seq} evaluation sequences",
        "accuracy of 2 heads of d_head 16 minus 1 head of d_head 32 (same seed, same answers)",
        null=0.0, null_label="no lead", direction="greater", measurements=tuple(measurements), unit="accuracy",
        headline=_headline(measurements, "no LayerNorm"), no_effect=(-NO_LEAD, NO_LEAD),
        note=f"intervals: paired bootstrap over the {n_seq} sequences; a lead within ±{NO_LEAD:g} counts as none")


def narrow_heads_row(task: TwoRelations, models: Mapping[tuple[int, int], object], data: TwoRelationsBatch,
                     seeds: Sequence[int]) -> ClaimRow:
    """Claim C17 on the two-relations task: ``models[d_head, seed]`` are two-head models whose
    heads have ``d_head`` dimensions (rank at most ``d_head``).

    The claim predicts that a head with too little rank cannot do the job: an error rate above
    0 (direction ``"greater"``); an error rate within ``NO_LEAD`` counts as a solved task.
    """
    d_heads = sorted({d for d, _ in models})
    measurements = [Measurement.from_estimate(error_rate(task, models[d, s], data), f"d_head {d}", s)
                    for d in d_heads for s in seeds]
    n_seq = int(data.tokens.shape[0])
    return ClaimRow(
        "C17", f"1-layer attention-only GPTs with 2 heads, d_model 32, on TwoRelations ({task.n_letters} "
               f"letters); {n_seq} evaluation sequences",
        "error rate (1 - accuracy) of two heads of rank at most d_head",
        null=0.0, null_label="a solved task", direction="greater", measurements=tuple(measurements), unit="accuracy",
        headline=_headline(measurements, f"d_head {d_heads[0]}"), no_effect=(-NO_LEAD, NO_LEAD),
        note=f"intervals: bootstrap over the {n_seq} sequences; an error rate under {NO_LEAD:g} counts as solved; "
             "errors also come from training that stalls, whatever the rank")


def order_blind_ceiling(task: TwoRelations) -> float:
    """The accuracy of the best reader that knows the unordered pair ``{x, topic}`` but not which
    letter is which, counted over all ``n_letters**2`` equally likely pairs (no formula: for each
    unordered pair, the best guess is its most frequent answer)."""
    letters = torch.arange(task.n_letters)
    x, topic = torch.meshgrid(letters, letters, indexing="ij")
    answers = task.answer(x.reshape(-1), topic.reshape(-1)).tolist()
    by_pair: dict[tuple[int, int], Counter] = {}
    for a, b, y in zip(x.reshape(-1).tolist(), topic.reshape(-1).tolist(), answers):
        by_pair.setdefault((min(a, b), max(a, b)), Counter())[y] += 1
    right = sum(max(c.values()) for c in by_pair.values())
    return right / task.n_letters**2
