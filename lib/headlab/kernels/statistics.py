"""Head statistics per query, defined once: what the fused kernels stream and what a pattern shows.

The streaming kernels return these columns per (input, head, query ``i``) without holding
the ``n x n`` pattern; ``pattern_statistics`` computes them from a pattern (the reference).
``p[i, j]`` is query ``i``'s weight on key ``j``; the keys **allowed** to ``i`` are the real
keys, and for a causal model only ``j <= i``. Keys not allowed weigh exactly 0.

========================  ==================================================================
``entropy``               ``-sum_j p[i, j] log p[i, j]`` over allowed keys, in nats (0 log 0 = 0)
``max_weight``            ``max_j p[i, j]``
``previous_token``        ``p[i, i - 1]`` (0 when ``i = 0`` or key ``i - 1`` is not allowed)
``next_token``            ``p[i, i + 1]`` (0 for a causal model, or past the last position)
``self``                  ``p[i, i]``
``first_token``           ``p[i, first]``, ``first`` = the input's first real position
``local``                 ``sum p[i, j]`` over ``|i - j| <= window``
``duplicate_token``       ``sum p[i, j]`` over ``j < i`` whose token equals query ``i``'s token
``induction``             ``p[i, t_i]``, ``t_i`` = the position after the most recent earlier
                          occurrence ``j < i - 1`` of query ``i``'s token (0 when there is none)
``separator``             ``sum p[i, j]`` over keys flagged as separators
``punctuation``           ``sum p[i, j]`` over keys flagged as punctuation
``rare_token``            ``sum p[i, j]`` over keys ``j != i`` of the rarest frequency class among
                          the keys ``j != i`` allowed to query ``i`` (0 when there is no such key)
``argmax`` (int)          the first allowed key with the largest weight (score); -1 if none
========================  ==================================================================

Each mass is one :class:`~headlab.kernels.keysets.KeySet`; :func:`~headlab.kernels.keysets.register_statistic`
adds one, which every backend then streams. Padding queries get statistics like any row, but no
score counts them. A row with no allowed key gets 0 in every column and ``argmax = -1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from headlab.kernels.keysets import (
    BUILTIN_KEY_SETS, NON_MASS, PUNCTUATION_BIT, SEPARATOR_BIT, key_set, key_set_mask, statistic_names,
)

#: The built-in float columns of the statistics tensor ``(batch, head, q_pos, n_statistics)``, in
#: order (registered statistics follow them: :func:`~headlab.kernels.keysets.statistic_names`).
STATISTICS = NON_MASS + tuple(BUILTIN_KEY_SETS)
#: The integer statistic, returned as its own ``(batch, head, q_pos)`` int64 tensor.
ARGMAX = "argmax"
#: :attr:`StatInputs.rare_class` of a key that is never rare; :attr:`StatInputs.rare_target` of a
#: query with no candidate. Distinct, so that "none" never matches "never rare".
NEVER_RARE, NO_TARGET = -2, -1
DEFAULT_WINDOW = 2


@dataclass
class StatInputs:
    """What the statistics need besides q, k and v: a few integers per position, O(n).

    Attributes:
        key_real: ``(batch, n)`` bool, True for real (non-padding) positions.
        window: the half-width of ``local``.
        tokens: ``(batch, n)`` int64 token ids, padding replaced by distinct negative ids.
        first: ``(batch,)`` int64, the first real position of each input.
        key_flags: ``(batch, n)`` int64 bit field: ``SEPARATOR_BIT``, ``PUNCTUATION_BIT``.
        rare_class: ``(batch, n)`` int64, the rank of each key's frequency among the distinct
            finite frequencies of the batch (0 = rarest); ``NEVER_RARE`` for the rest.
        rare_target: ``(batch, n)`` int64, per query, the smallest ``rare_class`` among the
            allowed keys ``j != i`` (``NO_TARGET`` when there is none).
        induction_target: ``(batch, n)`` int64, per query, the key after the most recent
            earlier occurrence ``j < i - 1`` of its token; -1 when there is none.
    """

    key_real: torch.Tensor
    causal: bool
    window: int
    tokens: torch.Tensor
    first: torch.Tensor
    key_flags: torch.Tensor
    rare_class: torch.Tensor
    rare_target: torch.Tensor
    induction_target: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.key_real.shape)

    def to(self, device) -> "StatInputs":
        moved = {name: getattr(self, name).to(device) for name in _TENSOR_FIELDS}
        return StatInputs(causal=self.causal, window=self.window, **moved)

    def allowed(self) -> torch.Tensor:
        """``(batch, q_pos, k_pos)`` bool: the keys allowed to each query (O(n^2): for references)."""
        n = self.key_real.shape[1]
        allowed = self.key_real[:, None, :].expand(-1, n, -1)
        if self.causal:
            allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=allowed.device).tril()
        return allowed


_TENSOR_FIELDS = ("key_real", "tokens", "first", "key_flags", "rare_class", "rare_target", "induction_target")


def statistic_inputs(attention_mask: torch.Tensor, *, causal: bool, tokens: torch.Tensor | None = None,
                     separator: torch.Tensor | None = None, punctuation: torch.Tensor | None = None,
                     frequency: torch.Tensor | None = None, window: int = DEFAULT_WINDOW) -> StatInputs:
    """Build :class:`StatInputs` from ``(batch, n)`` per-position tensors, in O(n log n) time and O(n) memory.

    Args:
        attention_mask: ``(batch, n)``, 1 (or True) for real positions, 0 for padding.
        tokens: ``(batch, n)`` token ids; None: every position its own token.
        separator, punctuation: ``(batch, n)`` bool key flags; None: no such key.
        frequency: ``(batch, n)`` expected frequency of each position's token, ``inf`` for
            tokens never rare; None: no key is ever rare.
    """
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be a (batch, n) tensor, got "
                         f"{getattr(attention_mask, 'shape', type(attention_mask).__name__)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    real = attention_mask.bool()
    batch, n = real.shape
    device = real.device
    pos = torch.arange(n, device=device)

    def per_position(name, x, dtype):
        if x is None:
            return None
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != (batch, n):
            raise ValueError(f"{name} must be a (batch, n) = {(batch, n)} tensor, got "
                             f"{tuple(getattr(x, 'shape', ())) or type(x).__name__}")
        return x.to(device=device, dtype=dtype)

    tokens = per_position("tokens", tokens, torch.int64)
    distinct = -1 - pos.expand(batch, n)  # padding (and missing tokens) never match anything
    tokens = distinct if tokens is None else torch.where(real, tokens, distinct)
    flags = torch.zeros(batch, n, dtype=torch.int64, device=device)
    for bit, name, mask in ((SEPARATOR_BIT, "separator", separator), (PUNCTUATION_BIT, "punctuation", punctuation)):
        mask = per_position(name, mask, torch.bool)
        if mask is not None:
            flags |= mask.to(torch.int64) * bit
    rare_class, rare_target = _rare_classes(per_position("frequency", frequency, torch.float64), real, causal)
    first = real.to(torch.int8).argmax(dim=1)  # (batch,): the first real position (0 if none)
    earlier = previous_occurrence_sorted(tokens)
    return StatInputs(real, causal, window, tokens, first, flags, rare_class, rare_target,
                      torch.where(earlier >= 0, earlier + 1, -1))


def earlier_occurrence(tokens: torch.Tensor) -> torch.Tensor:
    """``(batch, n)``: the most recent ``j < i`` with ``tokens[j] == tokens[i]``, else -1; O(n log n)."""
    order = torch.sort(tokens, dim=-1, stable=True).indices  # (batch, n): positions grouped by token
    grouped = tokens.gather(-1, order)
    same = grouped[:, 1:] == grouped[:, :-1]
    pred = torch.where(same, order[:, :-1], torch.full_like(order[:, 1:], -1))
    pred = torch.cat([torch.full_like(order[:, :1], -1), pred], dim=-1)  # predecessor, in sorted order
    return torch.empty_like(pred).scatter_(-1, order, pred)  # back to positions


def previous_occurrence_sorted(tokens: torch.Tensor) -> torch.Tensor:
    """The same as :func:`headlab.analysis.detect.previous_occurrence` (the most recent
    ``j < i - 1`` with the same token, else -1), in O(n log n) instead of O(n^2)."""
    pred = earlier_occurrence(tokens)
    before_pred = pred.gather(-1, pred.clamp(min=0))
    before_pred = torch.where(pred >= 0, before_pred, -1)
    pos = torch.arange(tokens.shape[-1], device=tokens.device)
    return torch.where(pred == pos - 1, before_pred, pred)


def _rare_classes(freq: torch.Tensor | None, real: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Frequency classes of the keys and each query's rarest class in view (excluding itself)."""
    batch, n = real.shape
    if freq is None:
        none = torch.full((batch, n), NEVER_RARE, dtype=torch.int64, device=real.device)
        return none, torch.full_like(none, NO_TARGET)
    if bool(torch.isnan(freq).any()) or bool((freq < 0).any()):
        raise ValueError("frequency must be >= 0 (inf for tokens that are never rare), without NaN")
    candidate = real & torch.isfinite(freq)
    _, ranks = torch.unique(torch.where(candidate, freq, 0.0), sorted=True, return_inverse=True)
    big = n + 1 + int(ranks.max()) if ranks.numel() else n + 1
    rank = torch.where(candidate, ranks, big)  # (batch, n); big = not a candidate
    rare_class = torch.where(candidate, ranks, NEVER_RARE)
    low = in_view(rank, causal, largest=False, fill=big)  # the rarest class among the keys j != i in view
    return rare_class, torch.where(low < big, low, NO_TARGET)


def in_view(values: torch.Tensor, causal: bool, *, largest: bool, fill: int) -> torch.Tensor:
    """``(batch, n)``: for each query ``i``, the min (or max) of ``values[j]`` over ``j != i`` it may see.

    ``fill`` stands for "no such key" and must lose every comparison. O(n).
    """
    scan = (lambda x: x.cummax(dim=1).values) if largest else (lambda x: x.cummin(dim=1).values)
    pad = torch.full_like(values[:, :1], fill)
    before = scan(torch.cat([pad, values[:, :-1]], dim=1))
    if causal:
        return before
    after = scan(torch.cat([values[:, 1:], pad], dim=1).flip(1)).flip(1)
    return torch.maximum(before, after) if largest else torch.minimum(before, after)


@dataclass(frozen=True)
class HeadStatistics:
    """Streamed statistics of every (input, head, query).

    Attributes:
        values: ``(batch, head, q_pos, len(names))`` float32, one column per statistic.
        argmax: ``(batch, head, q_pos)`` int64, the first allowed key with the largest weight.
        names: the columns of ``values``, in order (default: every statistic registered now,
            :func:`~headlab.kernels.keysets.statistic_names`).
    """

    values: torch.Tensor
    argmax: torch.Tensor
    names: tuple[str, ...] = field(default_factory=statistic_names)

    def __getitem__(self, name: str) -> torch.Tensor:
        """One statistic by name: ``(batch, head, q_pos)``."""
        if name == ARGMAX:
            return self.argmax
        if name not in self.names:
            raise KeyError(f"unknown statistic {name!r}; choose from {self.names + (ARGMAX,)}")
        return self.values[..., self.names.index(name)]


# --------------------------------------------------------------- the reference: from a pattern


def pattern_statistics(pattern: torch.Tensor, inputs: StatInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Every statistic (:func:`~headlab.kernels.keysets.statistic_names`, registered ones included)
    and the argmax, from a materialized pattern.

    Returns ``(stats (batch, head, q_pos, n_statistics), argmax (batch, head, q_pos))``, in
    float32 (float64 for float64 patterns). O(n^2) memory: the kernels' reference.
    """
    batch, heads, n, _ = pattern.shape
    if tuple(pattern.shape[-1:]) != (n,) or inputs.shape != (batch, n):
        raise ValueError(f"pattern {tuple(pattern.shape)} does not match the inputs' (batch, n) = {inputs.shape}")
    dtype = torch.float64 if pattern.dtype == torch.float64 else torch.float32
    allowed = inputs.allowed()[:, None]  # (batch, 1, q_pos, k_pos)
    p = torch.where(allowed, pattern.to(dtype), 0.0)
    columns = [-torch.xlogy(p, p).sum(-1), p.amax(-1)]  # entropy, max_weight (NON_MASS order)
    positions = torch.arange(n, device=p.device)
    for name in statistic_names()[len(NON_MASS):]:
        where = key_set_mask(key_set(name), inputs, positions, positions)  # (batch or 1, q, k)
        columns.append((p * where[:, None]).sum(-1))
    stats = torch.stack(columns, dim=-1)
    scores = torch.where(allowed, pattern.to(dtype), -torch.inf)
    argmax = torch.where(allowed.any(-1), scores.argmax(-1), -1)
    return stats, argmax
