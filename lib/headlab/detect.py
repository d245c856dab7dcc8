"""Detectors: scores that say how much a head's attention pattern looks like a known behaviour.

Every detector takes attention patterns ``(batch, head, q_pos, k_pos)`` (rows
are distributions over keys) and returns one score per input and per head,
``(batch, head)``; average over the batch yourself if you want one number.

An input with no query position the score is defined on (a one-token input,
or no repeated token for :func:`induction_score`) has no score: by default
that is an error naming the inputs; ``on_empty="nan"`` returns NaN for them
instead (use ``torch.nanmean`` to average).
"""

from __future__ import annotations

import torch


def _check(pattern: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Validate a pattern and return the (batch, pos) bool mask of real positions."""
    if not isinstance(pattern, torch.Tensor) or pattern.dim() != 4:
        raise ValueError(f"pattern must be a (batch, head, q_pos, k_pos) tensor, got "
                         f"{getattr(pattern, 'shape', type(pattern).__name__)}")
    batch, _, q_pos, k_pos = pattern.shape
    if q_pos != k_pos:
        raise ValueError(f"self-attention pattern needs q_pos == k_pos, got {q_pos} and {k_pos}")
    if attention_mask is None:
        return torch.ones(batch, q_pos, dtype=torch.bool, device=pattern.device)
    if tuple(attention_mask.shape) != (batch, q_pos):
        raise ValueError(f"attention_mask must be (batch, pos) = {(batch, q_pos)}, got {tuple(attention_mask.shape)}")
    return attention_mask.to(pattern.device).bool()


def _mean_over(weights: torch.Tensor, eligible: torch.Tensor, on_empty: str, what: str) -> torch.Tensor:
    """Mean of weights (batch, head, q_pos) over eligible query positions (batch, q_pos)."""
    if on_empty not in ("raise", "nan"):
        raise ValueError(f"on_empty must be 'raise' or 'nan', got {on_empty!r}")
    count = eligible.sum(dim=-1)  # (batch,)
    if on_empty == "raise" and bool((count == 0).any()):
        empty = torch.nonzero(count == 0).flatten().tolist()
        raise ValueError(f"inputs {empty} have no {what}, so the score is undefined for them; "
                         "pass on_empty='nan' to get NaN for those inputs")
    total = (weights * eligible[:, None, :]).sum(dim=-1)  # (batch, head)
    return total / count[:, None]  # (batch, head); NaN where count == 0


def previous_token_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         on_empty: str = "raise") -> torch.Tensor:
    """Previous-token score ``(batch, head)``.

    For each input and head: the mean, over real query positions ``i >= 1``,
    of the attention weight from query ``i`` to key ``i - 1``. A perfect
    previous-token head scores 1; uniform causal attention scores the mean
    of ``1 / (i + 1)``.
    """
    real = _check(pattern, attention_mask)
    weights = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)  # (batch, head, q_pos - 1): pattern[..., i, i-1]
    eligible = real[:, 1:]  # (batch, q_pos - 1), query i >= 1
    return _mean_over(weights, eligible, on_empty, "real query position i >= 1")


def previous_occurrence(tokens: torch.Tensor) -> torch.Tensor:
    """For each position ``i``, the most recent ``j < i - 1`` with ``tokens[j] == tokens[i]``, else -1.

    ``tokens`` is ``(batch, pos)``; the result has the same shape (int64).
    ``j = i - 1`` is excluded: an immediately repeated token points at itself.
    """
    pos = tokens.shape[-1]
    idx = torch.arange(pos, device=tokens.device)
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, q_pos, k_pos)
    earlier = idx[None, :] < idx[:, None] - 1  # (q_pos, k_pos): k <= q - 2
    candidates = torch.where(same & earlier, idx, torch.full_like(idx, -1))  # (batch, q_pos, k_pos)
    return candidates.max(dim=-1).values  # (batch, q_pos)


def induction_score(pattern: torch.Tensor, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    on_empty: str = "raise") -> torch.Tensor:
    """Induction score ``(batch, head)``.

    A query position ``i`` is eligible when it is a real token that appeared
    earlier at some ``j < i - 1`` (take the most recent such ``j``, see
    :func:`previous_occurrence`). The score is the mean, over eligible
    queries, of the attention weight from ``i`` to key ``j + 1``: the token
    that followed the earlier occurrence, i.e. what an induction head copies.
    """
    real = _check(pattern, attention_mask)
    if tuple(tokens.shape) != tuple(real.shape):
        raise ValueError(f"tokens must be (batch, pos) = {tuple(real.shape)}, got {tuple(tokens.shape)}")
    tokens = tokens.to(pattern.device)
    # Padding tokens never match anything: give them distinct negative ids.
    pos = tokens.shape[1]
    distinct_pad = -1 - torch.arange(pos, device=tokens.device).expand_as(tokens)
    tokens = torch.where(real, tokens, distinct_pad)
    prev = previous_occurrence(tokens)  # (batch, q_pos)
    eligible = real & (prev >= 0)  # (batch, q_pos)
    target = (prev + 1).clamp(min=0)  # (batch, q_pos), key j + 1 (dummy 0 when ineligible)
    index = target[:, None, :, None].expand(-1, pattern.shape[1], -1, 1)  # (batch, head, q_pos, 1)
    weights = pattern.gather(-1, index).squeeze(-1)  # (batch, head, q_pos)
    return _mean_over(weights, eligible, on_empty, "repeated token (a token seen earlier at j < i - 1)")
