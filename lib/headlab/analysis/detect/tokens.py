"""Heads defined by *which* keys they read: the first token, separators, punctuation, earlier
copies of the current token (duplicate and induction heads) and rare words."""

from __future__ import annotations

import torch

from headlab.analysis.detect.base import (
    allowed_keys, check_allowed, check_causal, check_pattern, check_positions, mean_over,
)


def first_token_score(pattern: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      on_empty: str = "raise") -> torch.Tensor:
    """First-token (sink, [CLS], ``<bos>``) score ``(batch, head)``.

    The mean, over real queries, of the weight on the input's first real position.
    """
    real = check_pattern(pattern, attention_mask)
    first = real.to(torch.int8).argmax(dim=1)  # (batch,): index of the first real position
    index = first[:, None, None, None].expand(-1, pattern.shape[1], pattern.shape[2], 1)
    weights = pattern.gather(-1, index).squeeze(-1)  # (batch, head, q_pos)
    return mean_over(weights, real, on_empty, "real query position")


KEY_MASS_QUERIES = ("seeing", "all")


def key_mass_score(pattern: torch.Tensor, key_mask: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   *, causal: bool, on_empty: str = "raise", queries: str = "seeing") -> torch.Tensor:
    """Attention mass on a set of key positions ``(batch, head)``.

    The mean, over eligible queries, of the total weight on the keys ``key_mask`` ``(batch,
    pos)`` marks. ``queries="seeing"``: real queries that may attend to a marked key;
    ``"all"``: every real query (one that sees none counts 0).
    """
    if queries not in KEY_MASS_QUERIES:
        raise ValueError(f"queries must be 'seeing' (queries that can see a marked key) or 'all' (every real "
                         f"query), got {queries!r}")
    real = check_pattern(pattern, attention_mask)
    key_mask = check_positions("key_mask", key_mask, real).bool()
    causal = check_causal(causal)
    allowed = allowed_keys(real, causal)  # (batch, q_pos, k_pos)
    check_allowed(pattern, real, allowed, causal)
    marked = allowed & key_mask[:, None, :]  # (batch, q_pos, k_pos)
    weights = (pattern * marked[:, None]).sum(-1)  # (batch, head, q_pos)
    if queries == "all":
        return mean_over(weights, real, on_empty, "real query position")
    eligible = real & marked.any(-1)
    return mean_over(weights, eligible, on_empty, "query that can see a marked key")


def separator_score(pattern: torch.Tensor, separator_mask: torch.Tensor,
                    attention_mask: torch.Tensor | None = None, *, causal: bool,
                    on_empty: str = "raise") -> torch.Tensor:
    """Separator score ``(batch, head)``: :func:`key_mass_score` on separator keys
    (``[SEP]``, ``<eos>``, sentence-final punctuation; see ``headlab.analysis.detect.token_masks``)."""
    return key_mass_score(pattern, separator_mask, attention_mask, causal=causal, on_empty=on_empty)


def punctuation_score(pattern: torch.Tensor, punctuation_mask: torch.Tensor,
                      attention_mask: torch.Tensor | None = None, *, causal: bool,
                      on_empty: str = "raise") -> torch.Tensor:
    """Punctuation score ``(batch, head)``: :func:`key_mass_score` on punctuation keys."""
    return key_mass_score(pattern, punctuation_mask, attention_mask, causal=causal, on_empty=on_empty)


def _distinct_padding(tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Tokens with padding replaced by distinct negative ids, so padding never matches anything."""
    pos = tokens.shape[1]
    distinct_pad = -1 - torch.arange(pos, device=tokens.device).expand_as(tokens)
    return torch.where(real, tokens, distinct_pad)


def duplicate_token_score(pattern: torch.Tensor, tokens: torch.Tensor,
                          attention_mask: torch.Tensor | None = None, on_empty: str = "raise") -> torch.Tensor:
    """Duplicate-token score ``(batch, head)``.

    The mean, over real queries whose token occurred earlier, of the total weight on those
    earlier occurrences.
    """
    real = check_pattern(pattern, attention_mask)
    tokens = _distinct_padding(check_positions("tokens", tokens, real), real)
    pos = tokens.shape[1]
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, q_pos, k_pos)
    earlier = torch.ones(pos, pos, dtype=torch.bool, device=tokens.device).tril(-1)  # k < q
    copies = same & earlier  # (batch, q_pos, k_pos)
    weights = (pattern * copies[:, None]).sum(-1)  # (batch, head, q_pos)
    eligible = real & copies.any(-1)
    return mean_over(weights, eligible, on_empty, "repeated token (a token seen earlier)")


def previous_occurrence(tokens: torch.Tensor) -> torch.Tensor:
    """For each position ``i``, the most recent ``j < i - 1`` with ``tokens[j] == tokens[i]``, else -1.

    ``(batch, pos)`` int64. ``j = i - 1`` is excluded: an immediate repeat points at itself.
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

    The mean, over real queries ``i`` with an earlier occurrence ``j`` (:func:`previous_occurrence`),
    of the weight on key ``j + 1``, the token that followed it.
    """
    real = check_pattern(pattern, attention_mask)
    tokens = _distinct_padding(check_positions("tokens", tokens, real), real)
    prev = previous_occurrence(tokens)  # (batch, q_pos)
    eligible = real & (prev >= 0)  # (batch, q_pos)
    target = (prev + 1).clamp(min=0)  # (batch, q_pos), key j + 1 (dummy 0 when ineligible)
    index = target[:, None, :, None].expand(-1, pattern.shape[1], -1, 1)  # (batch, head, q_pos, 1)
    weights = pattern.gather(-1, index).squeeze(-1)  # (batch, head, q_pos)
    return mean_over(weights, eligible, on_empty, "repeated token (a token seen earlier at j < i - 1)")


def rare_token_score(pattern: torch.Tensor, frequencies: torch.Tensor,
                     attention_mask: torch.Tensor | None = None, *, causal: bool,
                     on_empty: str = "raise") -> torch.Tensor:
    """Rare-token score ``(batch, head)``.

    ``frequencies`` ``(batch, pos)``: each token's expected frequency (``inf``: never rare).
    Candidates: the keys a query may attend to, other than itself, with finite frequency. The
    mean, over queries whose candidates differ in frequency, of the weight on the rarest.
    """
    real = check_pattern(pattern, attention_mask)
    freq = check_positions("frequencies", frequencies, real).to(torch.float64)
    if bool((freq < 0).any()) or bool(torch.isnan(freq).any()):
        raise ValueError("frequencies must be >= 0 (inf for tokens that are never rare), without NaN")
    causal = check_causal(causal)
    allowed = allowed_keys(real, causal)
    check_allowed(pattern, real, allowed, causal)
    pos = real.shape[1]
    not_self = ~torch.eye(pos, dtype=torch.bool, device=real.device)
    candidates = allowed & not_self & torch.isfinite(freq)[:, None, :]  # (batch, q_pos, k_pos)
    inf = torch.tensor(float("inf"), dtype=freq.dtype, device=freq.device)
    f = torch.where(candidates, freq[:, None, :], inf)  # (batch, q_pos, k_pos)
    low = f.min(-1, keepdim=True).values  # (batch, q_pos, 1)
    high = torch.where(candidates, freq[:, None, :], -inf).max(-1, keepdim=True).values
    rarest = candidates & (f == low)  # (batch, q_pos, k_pos)
    weights = (pattern * rarest[:, None]).sum(-1)  # (batch, head, q_pos)
    eligible = real & (low < high).squeeze(-1)
    return mean_over(weights, eligible, on_empty, "query with words of different frequencies in view")
