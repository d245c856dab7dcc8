"""The per-input functions that metrics are built from: the next-token loss, pooling, the two
encoder scores, and the position a logit metric reads."""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

__all__ = ["next_token_loss", "mean_pool", "cosine_distance", "retrieval_loss", "positions"]


def next_token_loss(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    loss_mask: torch.Tensor | None = None,
    reduction: str = "input",
) -> torch.Tensor:
    """Cross-entropy of next-token prediction.

    Args:
        logits: ``(batch, pos, d_vocab)``.
        input_ids: ``(batch, pos)``.
        attention_mask: ``(batch, pos)``, 1 for real tokens (right padding).
        loss_mask: optional ``(batch, pos)`` bool; position ``t`` counts only if
            ``loss_mask[:, t]`` is True (the prediction *made at* ``t`` of token ``t+1``).
        reduction: ``"input"`` -> ``(batch,)`` mean over counted positions of each input;
            ``"token"`` -> ``(batch, pos - 1)`` with 0 where a position does not count;
            ``"mean"`` -> scalar mean over all counted positions.
    """
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}")
    # (batch, pos-1): loss of predicting input_ids[:, t+1] from logits[:, t]
    losses = F.cross_entropy(
        logits[:, :-1].transpose(1, 2).float(), input_ids[:, 1:], reduction="none"
    )
    counted = torch.ones_like(losses, dtype=torch.bool)
    if attention_mask is not None:
        # both the predicting position and the predicted token must be real
        counted &= attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()
    if loss_mask is not None:
        if loss_mask.shape != input_ids.shape:
            raise ValueError(f"loss_mask {tuple(loss_mask.shape)} must have the shape of input_ids {tuple(input_ids.shape)}")
        counted &= loss_mask[:, :-1].bool()
    losses = losses * counted
    if reduction == "token":
        return losses
    n = counted.sum(dim=1)
    if reduction == "mean":
        if n.sum() == 0:
            raise ValueError("no position counts towards the loss (all masked out)")
        return losses.sum() / n.sum()
    if reduction == "input":
        if (n == 0).any():
            bad = (n == 0).nonzero().flatten().tolist()
            raise ValueError(f"inputs {bad} have no position that counts towards the loss "
                             "(too short, or masked out by loss_mask)")
        return losses.sum(dim=1) / n
    raise ValueError(f"reduction must be 'input', 'token' or 'mean', not {reduction!r}")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``hidden`` ``(batch, pos, d_model)`` over real positions -> ``(batch, d_model)``.

    This is the pooling all-MiniLM-L6-v2 was trained with.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (batch, pos, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


def cosine_distance(embedding: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """1 - cos(embedding, clean) per input: ``(batch, d)`` x ``(batch, d)`` -> ``(batch,)``."""
    return 1.0 - F.cosine_similarity(embedding.float(), clean.float(), dim=-1)


def retrieval_loss(embedding: torch.Tensor, clean: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Self-retrieval InfoNCE loss per input.

    Input ``i``'s (possibly ablated) embedding scores every clean embedding of
    the batch by cosine similarity / ``temperature``; the loss is the
    cross-entropy of picking its own clean embedding ``i``. ``clean`` may hold
    more rows than ``embedding`` when the batch has been tiled: row ``i`` of
    ``embedding`` is matched to row ``i % len(clean)``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, not {temperature}")
    e = F.normalize(embedding.float(), dim=-1)
    c = F.normalize(clean.float(), dim=-1)
    logits = e @ c.T / temperature  # (batch, n_clean)
    target = torch.arange(len(e), device=e.device) % len(c)
    return F.cross_entropy(logits, target, reduction="none")




def positions(batch: Mapping[str, torch.Tensor], pos: int) -> torch.Tensor:
    """Position ``pos`` of each row of ``batch``, ``(rows,)``; ``-1`` is each row's last real token.

    Raises:
        ValueError: ``pos`` is not an int in ``-1 .. length - 1``, or a row has no real token
            (all padding), so it has no last real token to read.
    """
    rows, length = batch["input_ids"].shape
    if isinstance(pos, bool) or not isinstance(pos, int) or not -1 <= pos < length:
        raise ValueError(f"position {pos!r} is out of range for inputs of {length} positions "
                         "(give 0..pos-1, or -1 for each input's last real token)")
    mask = batch.get("attention_mask")
    if mask is None:
        return torch.full((rows,), length - 1 if pos == -1 else pos)
    real = mask.sum(dim=1)
    if pos == -1 and bool((real == 0).any()):
        raise ValueError(f"rows {(real == 0).nonzero().flatten().tolist()} hold only padding: they have no last "
                         "real token to read; drop the empty inputs")
    return real - 1 if pos == -1 else torch.full((rows,), pos)
