"""Chapter 2's language models split into 1, 2, 4 or 8 heads: claim C16 (narrow heads underperform).

The ``heads-N`` recipes (``heads-N-s1``, ``heads-N-s2`` for training seeds 1 and 2) are 2-layer
GPTs on the synthetic language that differ only in how ``d_model = 64`` is split: ``N`` heads of
``d_head = 64 / N`` per layer. A model is judged by its validation loss on fixed evaluation
windows (:func:`window_losses`: one mean loss per window, the unit an interval resamples), and
a narrow split against a wider one by the difference of their losses on the same windows
(:func:`c16_row`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from headlab import stats
from headlab.metrics import next_token_loss
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["NO_LOSS_GAP", "window_losses", "c16_row"]

#: A loss difference smaller than this (nats per token, about 1% in perplexity) counts as none.
NO_LOSS_GAP = 0.01
RESAMPLES = 4999


@torch.no_grad()
def window_losses(model, ids: torch.Tensor, batch_size: int = 128) -> np.ndarray:
    """``(n_windows,)``: the mean next-token loss (nats) of ``model`` on each window of ``ids``
    ``(n_windows, n_ctx)``."""
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be (n_windows, n_ctx) with n_ctx >= 2, got {tuple(ids.shape)}")
    device = next(model.parameters()).device
    losses = [next_token_loss(model(chunk.to(device)), chunk.to(device), reduction="input").cpu()
              for chunk in ids.split(batch_size)]
    return torch.cat(losses).double().numpy()


def c16_row(losses: Mapping[tuple[int, int], np.ndarray], d_model: int, seeds: Sequence[int],
            reference: int, narrow: Sequence[int], model: str) -> ClaimRow:
    """Claim C16 from per-window losses: ``losses[n_heads, seed]`` (from :func:`window_losses`, the
    same windows for every model).

    One measurement per (narrow head count, seed): the loss of the model with ``n_heads`` heads
    minus that of the ``reference`` head count trained with the same seed, paired over windows.
    The claim predicts the narrow split is worse (a positive difference, direction ``"greater"``);
    a difference within ``±NO_LOSS_GAP`` nats counts as none.
    """
    ref_d = d_model // reference
    measurements = []
    for h in narrow:
        condition = f"d_head {d_model // h} ({h} heads) vs {ref_d} ({reference})"
        for s in seeds:
            est = stats.paired_difference(losses[h, s], losses[reference, s], n_resamples=RESAMPLES, seed=0)
            measurements.append(Measurement.from_estimate(est, condition, s))
    first = measurements[0].condition
    per_seed = [m.effect for m in measurements if m.condition == first]
    headline = measurements[0] if len(per_seed) < 2 else Measurement.from_estimate(
        stats.over_seeds(per_seed), f"{first}, mean over {len(per_seed)} seeds")
    n_windows = len(next(iter(losses.values())))
    return ClaimRow(
        "C16", model, f"validation loss (nats per token) minus that of d_head {ref_d}, same seed, same windows",
        null=0.0, null_label="no difference", direction="greater", measurements=tuple(measurements),
        headline=headline, no_effect=(-NO_LOSS_GAP, NO_LOSS_GAP), unit="nats",
        note=f"intervals: paired bootstrap over {n_windows} windows; a gap within ±{NO_LOSS_GAP:g} nats counts "
             "as none; small models on a synthetic language, not the large models the claim is about")
