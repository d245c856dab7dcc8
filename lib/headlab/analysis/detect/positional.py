"""Positional heads: attention to a fixed offset (previous token, next token, ...) or a local window."""

from __future__ import annotations

import torch

from headlab.analysis.detect.base import check_pattern, mean_over


def offset_score(pattern: torch.Tensor, offset: int, attention_mask: torch.Tensor | None = None,
                 on_empty: str = "raise") -> torch.Tensor:
    """Fixed-offset score ``(batch, head)``.

    The mean, over real queries ``i`` whose key ``i + offset`` is real, of the weight on key
    ``i + offset`` (-1: the previous token).
    """
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise TypeError(f"offset must be an int (-1 = previous token), got {offset!r}")
    real = check_pattern(pattern, attention_mask)
    pos = real.shape[1]
    if abs(offset) >= pos:
        eligible = torch.zeros_like(real)
        weights = torch.zeros(*pattern.shape[:3], dtype=pattern.dtype, device=pattern.device)
        return mean_over(weights, eligible, on_empty, f"query i with a real key i{offset:+d}")
    diag = pattern.diagonal(offset=offset, dim1=-2, dim2=-1)  # (batch, head, pos - |offset|): [i, i+offset]
    if offset >= 0:
        eligible = real[:, : pos - offset] & real[:, offset:]  # queries i = 0 .. pos-1-offset
    else:
        eligible = real[:, -offset:] & real[:, : pos + offset]  # queries i = -offset .. pos-1
    return mean_over(diag, eligible, on_empty, f"query i with a real key i{offset:+d}")


def previous_token_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         on_empty: str = "raise") -> torch.Tensor:
    """Previous-token score ``(batch, head)``.

    :func:`offset_score` at -1; uniform causal attention scores the mean of ``1 / (i + 1)``.
    """
    return offset_score(pattern, -1, attention_mask, on_empty)


def next_token_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     on_empty: str = "raise") -> torch.Tensor:
    """Next-token score ``(batch, head)``.

    :func:`offset_score` at +1 (0 for every head of a causal model).
    """
    return offset_score(pattern, 1, attention_mask, on_empty)


def local_score(pattern: torch.Tensor, window: int, attention_mask: torch.Tensor | None = None,
                on_empty: str = "raise") -> torch.Tensor:
    """Local-window score ``(batch, head)``.

    The mean, over real queries ``i``, of the total weight on real keys ``|i - j| <= window``
    (itself included).
    """
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    real = check_pattern(pattern, attention_mask)
    pos = real.shape[1]
    idx = torch.arange(pos, device=pattern.device)
    near = (idx[:, None] - idx[None, :]).abs() <= window  # (q_pos, k_pos)
    keys = near[None] & real[:, None, :]  # (batch, q_pos, k_pos)
    weights = (pattern * keys[:, None]).sum(-1)  # (batch, head, q_pos)
    return mean_over(weights, real, on_empty, "real query position")
