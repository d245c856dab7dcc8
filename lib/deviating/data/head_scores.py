"""What every training task's evaluation shares: a model's logits and attention patterns in one
pass, and its induction and previous-token scores per input and per (layer, head).

The tasks (:mod:`~deviating.data.spans`, :mod:`~deviating.data.windows`,
:mod:`~deviating.data.two_relations`) record these scores beside their losses at every
evaluation, so that a training curve shows when the heads form.
"""

from __future__ import annotations

from typing import Any

import torch

from headlab.analysis.detect import induction_score, previous_token_score
from headlab.heads.model import HeadModel

__all__ = ["run_with_patterns", "per_input_head_scores", "summarize_head_scores"]


def run_with_patterns(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits ``(batch, pos, d_vocab)`` and each layer's pattern ``(batch, head, q_pos, k_pos)``, in one
    forward pass through the head interface, without gradients.

    Args:
        model: a model :class:`~headlab.heads.model.HeadModel` can wrap (the book's GPT, in
            the training tasks); its train/eval mode is left as it was.
        tokens: ``(batch, pos)`` token ids, full windows (no padding).
    """
    was_training = model.training
    try:
        hm = HeadModel(model)  # puts the model in eval mode
        logits, cache = hm.run_with_cache(tokens, names=["pattern"])
    finally:
        model.train(was_training)
    return logits, [cache.pattern(layer) for layer in range(hm.n_layers)]


def per_input_head_scores(patterns: list[torch.Tensor], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Induction and previous-token scores ``(batch, layer, head)`` of each layer's pattern
    (NaN induction score for an input with no repeated token)."""
    return {"induction": torch.stack([induction_score(p, tokens, on_empty="nan") for p in patterns], 1),
            "previous_token": torch.stack([previous_token_score(p) for p in patterns], 1)}


def summarize_head_scores(scores: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Batch means per (layer, head) and the best head of each score.

    Returns:
        For each score name: ``name`` (an ``n_layers x n_heads`` list, 4 digits), ``name_best``
        (the largest mean) and ``name_best_head`` (its ``[layer, head]``).
    """
    out: dict[str, Any] = {}
    for name, per_input in scores.items():
        mean = per_input.nanmean(0)  # (layer, head)
        out[f"{name}_best"] = float(mean.max())
        out[f"{name}_best_head"] = list(divmod(int(mean.argmax()), mean.shape[1]))
        out[name] = [[round(float(x), 4) for x in row] for row in mean]
    return out
