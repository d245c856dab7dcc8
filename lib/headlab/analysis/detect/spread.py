"""Broad heads: how evenly a head spreads its attention (normalised entropy)."""

from __future__ import annotations

import torch

from headlab.analysis.detect.base import allowed_keys, check_allowed, check_causal, check_pattern, mean_over


def entropy_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None, *, causal: bool,
                  on_empty: str = "raise") -> torch.Tensor:
    """Normalised attention entropy ``(batch, head)``, in [0, 1].

    For a real query ``i`` that may attend to ``n_i >= 2`` keys (real keys, and for a causal
    model only ``j <= i``), the row's entropy ``H_i = -sum_j p_ij log p_ij`` over those keys,
    divided by its largest possible value ``log n_i``. The score is the mean over such
    queries: 1 for uniform attention, 0 for attention on one key. Smoothing: none. A zero
    weight contributes exactly 0 (``0 log 0 = 0``, its limit, computed with
    ``torch.xlogy``), so there is no epsilon to choose; negative weights raise. Rows with a
    single allowed key (query 0 of a causal model) have no spread to measure and are left out.
    """
    real = check_pattern(pattern, attention_mask)
    if bool((pattern < 0).any()):
        raise ValueError("attention weights must be >= 0 to have an entropy")
    causal = check_causal(causal)
    allowed = allowed_keys(real, causal)  # (batch, q_pos, k_pos)
    check_allowed(pattern, real, allowed, causal)
    n_keys = allowed.sum(-1)  # (batch, q_pos)
    p = pattern * allowed[:, None]
    entropy = -torch.xlogy(p, p).sum(-1)  # (batch, head, q_pos)
    log_n = torch.log(n_keys.clamp(min=2).to(pattern.dtype))  # (batch, q_pos); rows with n < 2 are masked
    eligible = real & (n_keys >= 2)
    return mean_over(entropy / log_n[:, None, :], eligible, on_empty, "query with at least two keys to attend to")
