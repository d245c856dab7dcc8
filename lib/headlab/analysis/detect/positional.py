"""Positional heads: attention to a fixed offset (previous token, next token, ...) or a local window."""

from __future__ import annotations

import torch

from headlab.analysis.detect.base import check_pattern, mean_over


def offset_score(pattern: torch.Tensor, offset: int, attention_mask: torch.Tensor | None = None,
                 on_empty: str = "raise") -> torch.Tensor:
    """Fixed-offset score ``(batch, head)``.

    For each input and head: the mean, over real query positions ``i`` whose key
    ``i + offset`` is also a real position, of the attention weight from query ``i`` to key
    ``i + offset``. ``offset = -1`` is the previous token, ``+1`` the next token, ``0`` the
    token itself. A head that always attends exactly there scores 1.
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

    For each input and head: the mean, over real query positions ``i >= 1``,
    of the attention weight from query ``i`` to key ``i - 1``. A perfect
    previous-token head scores 1; uniform causal attention scores the mean
    of ``1 / (i + 1)``.
    """
    return offset_score(pattern, -1, attention_mask, on_empty)


def next_token_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     on_empty: str = "raise") -> torch.Tensor:
    """Next-token score ``(batch, head)``.

    For each input and head: the mean, over real query positions ``i`` before the last real
    position, of the attention weight from query ``i`` to key ``i + 1``. A causal model
    cannot attend forward, so its heads all score 0.
    """
    return offset_score(pattern, 1, attention_mask, on_empty)


def local_score(pattern: torch.Tensor, window: int, attention_mask: torch.Tensor | None = None,
                on_empty: str = "raise") -> torch.Tensor:
    """Local-window score ``(batch, head)``.

    For each input and head: the mean, over real query positions ``i``, of the total
    attention weight on real keys ``j`` with ``|i - j| <= window`` (the token itself
    included). A head that only looks at its neighbourhood scores 1; note that every
    previous-token head is also local, which is why labels prefer the specific offsets.
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
