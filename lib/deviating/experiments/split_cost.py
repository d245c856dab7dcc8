"""What splitting into heads costs (claim C2): exact operation counts, and wall time measured.

* :func:`attention_work` counts the operations of one multi-head self-attention layer: an
  exact number, the same on every machine;
* :func:`round_ratio` turns the per-round time ratios of ``benchmarks/kernels.py`` (section 3:
  every head count timed in each round) into a ratio with an interval over rounds;
* :func:`c2_row` judges C2 on both: the counts as exact measurements (an interval of zero
  width, since nothing was sampled), the times as measurements with their spread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from headlab import stats
from headlab.stats import Estimate
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["NEAR", "KERNEL_LABELS", "attention_work", "round_ratio", "c2_row"]

#: How much more a split may cost and still count as "near" the cost of fewer heads (the null).
NEAR = 1.5
#: The benchmark's kernels, in the words the book uses.
KERNEL_LABELS = {"sdpa": "fused kernel (SDPA)", "torch_ref": "reference kernel (torch)",
                 "numpy_ref": "reference kernel (numpy)"}


def attention_work(n: int, d_model: int, n_heads: int) -> dict[str, int]:
    """Operation counts of one multi-head self-attention layer on ``n`` positions (no batch, no mask).

    ``projections``, ``scores`` and ``mixing`` are multiply-adds (of the four ``d_model x d_model``
    projections; of every head's ``Q K^T``; of every head's pattern times ``V``), ``softmax_exps``
    the exponentials, one per entry of every head's ``n x n`` pattern.
    """
    for name, value in (("n", n), ("d_model", d_model), ("n_heads", n_heads)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_model % n_heads:
        raise ValueError(f"d_model = {d_model} does not split into {n_heads} heads of equal width")
    d_head = d_model // n_heads
    return {"projections": 4 * n * d_model * d_model, "scores": n_heads * n * n * d_head,
            "mixing": n_heads * n * n * d_head, "softmax_exps": n_heads * n * n}


def round_ratio(ratios) -> Estimate:
    """The typical ratio of paired times: the geometric mean of per-round ratios, with a Student t
    interval over rounds (on their logarithms, so it stays positive; ``n - 1`` degrees of freedom,
    which :func:`c2_row` stores with the measurement)."""
    r = np.asarray(ratios, dtype=float)
    if r.ndim != 1 or r.size < 2 or not np.all(r > 0):
        raise ValueError(f"need at least two positive per-round ratios, got {r.tolist()}")
    est = stats.over_seeds(np.log(r))
    return Estimate(math.exp(est.value), math.exp(est.low), math.exp(est.high), est.n,
                    method=f"geometric mean of per-round ratios, t interval over {r.size} rounds on the logs")


def c2_row(benchmark: Mapping, n: int, d_model: int, heads: int, base: int) -> ClaimRow:
    """Claim C2 at ``heads`` against ``base`` heads, from the counts and from a stored run of
    ``benchmarks/kernels.py`` (its ``"heads"`` section, timed at ``n`` positions and ``d_model``).

    Every head count ran in each round of the benchmark, so the time at ``heads`` over the time
    at ``base`` in one round is a paired ratio. The quantity is the cost at ``heads`` heads over
    the cost at ``base`` heads. The claim says
    the split keeps the cost near that of fewer heads; the row measures wall time on one CPU thread
    (not operations: those are counted exactly, and shown beside it). The null is ``NEAR`` and the claim
    predicts a ratio below it (direction ``"less"``). Only the times are conditions: the counts of
    :func:`attention_work` are arithmetic (the same multiply-adds, ``heads / base`` times the
    exponentials), so they could not fail; the chapter shows them beside the row.
    """
    measurements = []
    times = benchmark["heads"]["times"]
    for key, label in KERNEL_LABELS.items():
        if key in times[str(heads)]:
            ratios = [t / b for t, b in zip(times[str(heads)][key]["times_s"], times[str(base)][key]["times_s"])]
            measurements.append(Measurement.from_estimate(round_ratio(ratios), f"wall time, {label}",
                                                          df=len(ratios) - 1))
    return ClaimRow(
        "C2", f"one attention layer, d_model {d_model}, n {n}; times from benchmarks/kernels.py "
              f"({benchmark['machine']['device']}, {benchmark['machine']['torch_threads']} thread)",
        f"wall time with {heads} heads over the wall time with {base} heads", null=NEAR,
        null_label=f"{NEAR:g} times the cost (no longer near)", direction="less",
        measurements=tuple(measurements), unit="ratio", items="rounds",
        note="times: geometric mean of per-round ratios with a t interval over rounds, on one machine (rounds "
             "share the machine's state, so they are not independent draws); "
             "the counts are arithmetic and not judged")

