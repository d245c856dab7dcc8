"""What every detector shares: validating a pattern, which keys a query may attend to, averaging
over eligible queries, and uniform attention (the reference every score is compared with)."""

from __future__ import annotations

import torch

ON_EMPTY = ("raise", "nan")

# A pattern may put at most this much weight on keys its row may not attend to
# (future keys of a causal model, padding keys) before the detectors refuse it.
DISALLOWED_MASS_TOL = 1e-3


def check_pattern(pattern: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Validate a pattern and return the ``(batch, pos)`` bool mask of real (non-padding) positions."""
    if not isinstance(pattern, torch.Tensor) or pattern.dim() != 4:
        raise ValueError(f"pattern must be a (batch, head, q_pos, k_pos) tensor, got "
                         f"{getattr(pattern, 'shape', type(pattern).__name__)}")
    batch, _, q_pos, k_pos = pattern.shape
    if q_pos != k_pos:
        raise ValueError(f"self-attention pattern needs q_pos == k_pos, got {q_pos} and {k_pos}")
    if not torch.is_floating_point(pattern):
        raise TypeError(f"pattern must hold floating-point weights, got {pattern.dtype}")
    if attention_mask is None:
        return torch.ones(batch, q_pos, dtype=torch.bool, device=pattern.device)
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (batch, q_pos):
        raise ValueError(f"attention_mask must be a (batch, pos) = {(batch, q_pos)} tensor, got "
                         f"{tuple(getattr(attention_mask, 'shape', ()))}")
    return attention_mask.to(pattern.device).bool()


def check_positions(name: str, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Validate a per-position tensor (tokens, key masks, frequencies) against the ``(batch, pos)`` mask."""
    if not isinstance(values, torch.Tensor) or tuple(values.shape) != tuple(real.shape):
        raise ValueError(f"{name} must be a (batch, pos) = {tuple(real.shape)} tensor, got "
                         f"{tuple(getattr(values, 'shape', ())) or type(values).__name__}")
    return values.to(real.device)


def check_causal(causal) -> bool:
    """``causal`` itself, refused unless it is a bool (what a query may attend to depends on it)."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True (a causal LM: query i sees keys j <= i) or False "
                        f"(an encoder: every real key), got {causal!r}")
    return causal


def allowed_keys(real: torch.Tensor, causal: bool) -> torch.Tensor:
    """``(batch, q_pos, k_pos)`` bool: key ``j`` may be attended from query ``i``.

    A key is allowed when it is a real position and, for a causal model, ``j <= i``.
    """
    pos = real.shape[-1]
    allowed = real[:, None, :].expand(-1, pos, -1)  # (batch, q_pos, k_pos)
    if causal:
        allowed = allowed & torch.ones(pos, pos, dtype=torch.bool, device=real.device).tril()
    return allowed


def check_allowed(pattern: torch.Tensor, real: torch.Tensor, allowed: torch.Tensor, causal: bool) -> None:
    """Refuse patterns that put weight on keys their (real) rows may not attend to."""
    outside = (pattern * ~allowed[:, None]).sum(-1)  # (batch, head, q_pos)
    outside = outside * real[:, None, :]
    worst = float(outside.max()) if outside.numel() else 0.0
    if worst > DISALLOWED_MASS_TOL:
        hint = ("future keys of a causal model (is the model an encoder? pass causal=False)" if causal
                else "padding keys (is the attention_mask the one the model ran with?)")
        raise ValueError(f"the pattern puts weight {worst:.3g} on keys its row may not attend to: {hint}")


def mean_over(weights: torch.Tensor, eligible: torch.Tensor, on_empty: str, what: str) -> torch.Tensor:
    """Mean of ``weights`` ``(batch, head, q_pos)`` over eligible query positions ``(batch, q_pos)``.

    Inputs with no eligible query raise (``on_empty="raise"``) or get NaN (``"nan"``).
    """
    if on_empty not in ON_EMPTY:
        raise ValueError(f"on_empty must be 'raise' or 'nan', got {on_empty!r}")
    eligible = eligible.to(weights.device)
    count = eligible.sum(dim=-1)  # (batch,)
    if on_empty == "raise" and bool((count == 0).any()):
        empty = torch.nonzero(count == 0).flatten().tolist()
        raise ValueError(f"inputs {empty} have no {what}, so the score is undefined for them; "
                         "pass on_empty='nan' to get NaN for those inputs")
    weights = torch.where(eligible[:, None, :], weights, torch.zeros((), dtype=weights.dtype,
                                                                      device=weights.device))
    total = weights.sum(dim=-1)  # (batch, head)
    return total / count[:, None]  # (batch, head); NaN where count == 0


def uniform_pattern(attention_mask: torch.Tensor, causal: bool, n_heads: int = 1,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Uniform attention ``(batch, n_heads, q_pos, k_pos)``: each row spreads its weight
    equally over the keys it may attend to (see :func:`allowed_keys`).

    It is the reference every score is compared with: a detector that "finds" something in
    uniform attention has found nothing. Rows with no allowed key (a padding query before
    any real key) are all zero.
    """
    real = attention_mask.bool()
    allowed = allowed_keys(real, check_causal(causal)).to(dtype)  # (batch, q_pos, k_pos)
    count = allowed.sum(-1, keepdim=True).clamp(min=1)
    return (allowed / count)[:, None].expand(-1, n_heads, -1, -1)
