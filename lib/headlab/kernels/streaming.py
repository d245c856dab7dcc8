"""Attention with head statistics streamed in the same pass: O(n) memory instead of O(n^2).

:func:`fused_attention` returns ``(out, statistics)``: ``out`` equals ``attention(q, k, v,
...)[0]``, and ``statistics`` (:mod:`headlab.kernels.statistics`) replaces the pattern.
Backends: ``"triton"`` (:mod:`headlab.kernels.triton_attention`, one fused GPU kernel;
Triton's interpreter on CPU) and ``"tiled"`` (the same loop in torch ops, any device).

The online softmax keeps per row the running maximum ``m``, ``l = sum_j exp(s_j - m)`` and
``acc = sum_j exp(s_j - m) v_j``; a new maximum ``m'`` rescales them by ``alpha = exp(m - m')``.
A mass ``sum_{j in S} exp(s_j - m)`` rescales the same way and ends divided by ``l``. The
largest weight is ``1 / l`` at the end. The entropy is ``log l - t / l`` with ``t = sum_j
exp(s_j - m) (s_j - m)``, which a new maximum turns into ``alpha * (t + (m - m') l)``.
"""

from __future__ import annotations

import math

import torch

from headlab.kernels.checks import check_finite, scores_may_overflow
from headlab.kernels.keysets import key_set, key_set_mask, mass_names, statistic_names
from headlab.kernels.statistics import HeadStatistics, StatInputs

__all__ = ["BACKENDS", "KERNELS_EXTRA", "TritonUnavailable", "HeadStatistics", "fused_attention",
           "load_triton_kernel", "tiled_attention"]

BACKENDS = ("auto", "triton", "tiled")
KERNELS_EXTRA = "pip install headlab[kernels]"  # what installs triton


class TritonUnavailable(ImportError):
    """The Triton backend was asked for, but the ``triton`` package is not installed."""


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    key_mask: torch.Tensor | None = None, statistics: StatInputs | None = None,
                    scale: float | None = None, backend: str = "auto",
                    block_size: int | None = None) -> tuple[torch.Tensor, HeadStatistics | None]:
    """Scaled dot-product attention in one streamed pass; returns ``(out, statistics)``.

    Args:
        q: ``(batch, head, n_q, d)`` queries; ``d`` (d_head) from 1 to 256.
        k, v: ``(batch, kv_head, n_k, d)`` keys and values. Grouped-query attention:
            ``head`` may be any multiple of ``kv_head``; query head ``h`` reads kv head
            ``h // (head // kv_head)``.
        causal: key ``j`` only for query ``i >= j`` (top-left aligned, like SDPA's ``is_causal``).
        key_mask: ``(batch, n_k)`` bool, True for real keys (a key-padding mask); None: all real.
        statistics: from :func:`~headlab.kernels.statistics.statistic_inputs` (``n_q == n_k``,
            same ``causal``; its ``key_real`` is the key mask when ``key_mask`` is None);
            None: ``out`` only.
        backend: ``"triton"``, ``"tiled"`` or ``"auto"`` (Triton for CUDA tensors).
        block_size: rows and columns per tile (default: 64 for Triton, 128 tiled).

    Returns:
        ``out`` ``(batch, head, n_q, d)`` in q's dtype (float32 inside for half types), and a
        :class:`HeadStatistics` or None. A row with no allowed key gets a zero output row.
    """
    causal, key_mask = _check_inputs(q, k, v, causal, key_mask, statistics)
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {BACKENDS}")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1):
        raise ValueError(f"block_size must be a positive int (or None for the default), got {block_size!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))
                              or not math.isfinite(scale) or scale <= 0):
        raise ValueError(f"scale must be a positive finite number (or None for d ** -0.5), got {scale!r}")
    check_finite({"q": q, "k": k, "v": v}, "torch")
    if backend == "auto":
        backend = "triton" if q.is_cuda else "tiled"
    if statistics is not None:
        statistics = statistics.to(q.device)
    if scale is None:
        scale = q.shape[-1] ** -0.5
    if scores_may_overflow(q, k, scale):
        # finite inputs whose scores can pass the dtype's range (q * 1e30 in float32): the kernels
        # would take an infinite score for a row with no key. The same streamed algorithm in float64.
        out, stats = tiled_attention(q.double(), k.double(), v.double(), causal=causal, key_mask=key_mask,
                                     statistics=statistics, scale=scale, block_size=block_size or 128)
        out = out.to(q.dtype)
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"fused_attention overflows: the scores of these inputs exceed the largest {q.dtype} "
                             "even when computed in float64; scale q and k down")
        return out, stats
    if backend == "triton":
        triton_attention = load_triton_kernel()
        out, stats = triton_attention(q, k, v, causal=causal, key_mask=key_mask, statistics=statistics,
                                      scale=scale, block_size=block_size or 64)
    else:
        out, stats = tiled_attention(q, k, v, causal=causal, key_mask=key_mask, statistics=statistics,
                                     scale=scale, block_size=block_size or 128)
    return out, stats


def load_triton_kernel():
    """:func:`headlab.kernels.triton_attention.triton_attention`, or one clear error naming the install."""
    try:
        from headlab.kernels.triton_attention import triton_attention
    except ImportError as err:
        if "triton" not in str(err):
            raise
        raise TritonUnavailable(
            f"the fused Triton kernel needs the triton package, which is not installed here: "
            f"{KERNELS_EXTRA} (Colab's CUDA build of torch already brings it). Without it, "
            "backend='tiled' runs the same streamed algorithm in torch ops.") from err
    return triton_attention


def _check_inputs(q, k, v, causal, key_mask, statistics):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a (batch, head, n, d) tensor, got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} must be floating point, got {x.dtype} (convert with {name}.float())")
        if x.dtype != q.dtype or x.device != q.device:
            raise ValueError(f"q, k and v must share one dtype and device; {name} is {x.dtype} on {x.device}, "
                             f"q is {q.dtype} on {q.device}")
    (batch, heads, n_q, d), (kb, kv_heads, n_k, kd) = q.shape, k.shape
    if kb != batch or tuple(v.shape[:3]) != (batch, kv_heads, n_k) or kd != d:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
                         "need q (batch, head, n_q, d), k and v (batch, kv_head, n_k, d)")
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"grouped-query attention needs head = a multiple of kv_head; got {heads} query "
                         f"heads and {kv_heads} key/value heads")
    if not 1 <= d <= 256 or v.shape[-1] != d:
        raise ValueError(f"d_head must be 1..256 and the same for q, k and v; got q {d}, v {v.shape[-1]}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if statistics is not None:
        if not isinstance(statistics, StatInputs):
            raise TypeError("statistics must be the StatInputs of headlab.kernels.statistics.statistic_inputs, "
                            f"got {type(statistics).__name__}")
        if n_q != n_k or statistics.shape != (batch, n_k):
            raise ValueError(f"statistics are defined for self-attention: need n_q == n_k and StatInputs of "
                             f"(batch, n) = {(batch, n_k)}; got n_q={n_q}, n_k={n_k}, {statistics.shape}")
        if statistics.causal != causal:
            raise ValueError(f"causal={causal} but the StatInputs were built with causal={statistics.causal}")
        if key_mask is None:
            key_mask = statistics.key_real
    if key_mask is not None:
        if not isinstance(key_mask, torch.Tensor) or tuple(key_mask.shape) != (batch, n_k):
            raise ValueError(f"key_mask must be a (batch, n_k) = {(batch, n_k)} bool tensor, got "
                             f"{tuple(getattr(key_mask, 'shape', ())) or type(key_mask).__name__}")
        key_mask = key_mask.to(device=q.device, dtype=torch.bool)
    return causal, key_mask


# ------------------------------------------------------------------------ the tiled torch path


def tiled_attention(q, k, v, *, causal: bool, key_mask: torch.Tensor | None, statistics: StatInputs | None,
                    scale: float, block_size: int = 128) -> tuple[torch.Tensor, HeadStatistics | None]:
    """The streamed algorithm in torch ops; arguments as :func:`fused_attention` (checked there).

    Loops over query tiles and key tiles as the Triton kernel does; holds one
    ``(batch, head, block, block)`` tile.
    """
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    dtype = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
    group = heads // kv_heads
    # (batch, kv_head, group, n, d): each kv head serves `group` query heads without a copy
    qg = q.to(dtype).reshape(batch, kv_heads, group, n_q, d)
    kg, vg = k.to(dtype)[:, :, None], v.to(dtype)[:, :, None]
    real = torch.ones(batch, n_k, dtype=torch.bool, device=q.device) if key_mask is None else key_mask
    out = torch.empty(batch, kv_heads, group, n_q, d, dtype=dtype, device=q.device)
    want = statistics is not None
    names, masses = statistic_names(), mass_names()  # the columns, read once per call
    if want:
        values = torch.empty(batch, kv_heads, group, n_q, len(names), dtype=dtype, device=q.device)
        argmax = torch.empty(batch, kv_heads, group, n_q, dtype=torch.int64, device=q.device)
    for i0 in range(0, n_q, block_size):
        i1 = min(i0 + block_size, n_q)
        rows = torch.arange(i0, i1, device=q.device)
        q_tile = qg[..., i0:i1, :] * scale  # (batch, kv_head, group, bq, d)
        state = _RowState.start(q_tile.shape[:-1], d, len(masses) if want else 0, dtype, q.device)
        stop = min(n_k, i1) if causal else n_k  # causal: keys after the tile's last row are never allowed
        for j0 in range(0, stop, block_size):
            j1 = min(j0 + block_size, stop)
            cols = torch.arange(j0, j1, device=q.device)
            s = q_tile @ kg[..., j0:j1, :].transpose(-1, -2)  # (batch, kv_head, group, bq, bk): one tile
            allowed = real[:, None, None, None, j0:j1]  # (batch, 1, 1, 1, bk)
            if causal:
                allowed = allowed & (cols[None, :] <= rows[:, None])  # (batch, 1, 1, bq, bk)
            s = s.masked_fill(~allowed, -torch.inf)
            sets = _mass_sets(statistics, masses, rows, cols) if want else ()
            state.update(s, allowed, vg[..., j0:j1, :], cols, sets)
        out[..., i0:i1, :] = state.output()
        if want:
            values[..., i0:i1, :], argmax[..., i0:i1] = state.statistics()
    out = out.reshape(batch, heads, n_q, d).to(q.dtype)
    if not want:
        return out, None
    return out, HeadStatistics(values.reshape(batch, heads, n_q, -1).float(), argmax.reshape(batch, heads, n_q), names)


def _mass_sets(inputs: StatInputs, masses: tuple[str, ...], rows: torch.Tensor, cols: torch.Tensor) -> list:
    """For one tile, the keys each mass sums over: bool masks broadcastable to ``(batch, 1, 1, bq, bk)``."""
    return [key_set_mask(key_set(name), inputs, rows, cols)[:, None, None] for name in masses]


class _RowState:
    """The running sums of one tile of query rows (shape ``rows = (..., bq)``)."""

    def __init__(self, m, l, t, acc, masses, best):
        self.m, self.l, self.t, self.acc, self.masses, self.best = m, l, t, acc, masses, best

    @classmethod
    def start(cls, rows: torch.Size, d: int, n_masses: int, dtype, device) -> "_RowState":
        zeros = torch.zeros(rows, dtype=dtype, device=device)
        return cls(m=torch.full(rows, -torch.inf, dtype=dtype, device=device), l=zeros, t=zeros.clone(),
                   acc=torch.zeros(*rows, d, dtype=dtype, device=device),
                   masses=torch.zeros(*rows, n_masses, dtype=dtype, device=device),
                   best=torch.full(rows, -1, dtype=torch.int64, device=device))

    def update(self, s, allowed, v, cols, sets) -> None:
        """Fold one tile of scores ``s`` ``(..., bq, bk)`` (``-inf`` where not allowed) into the sums."""
        tile_max = s.amax(-1)  # (..., bq)
        m_new = torch.maximum(self.m, tile_max)
        m_safe = torch.where(torch.isfinite(m_new), m_new, 0.0)  # rows with no allowed key yet
        alpha = torch.exp(self.m - m_safe)  # rescales the old sums (0 on the first tile)
        p = torch.exp(s - m_safe[..., None])  # (..., bq, bk): 0 where not allowed
        if sets:  # the entropy term (only when statistics are wanted)
            shift = torch.where(self.l > 0, self.m - m_safe, 0.0)
            centred = p * torch.where(allowed, s - m_safe[..., None], 0.0)
            self.t = alpha * (self.t + shift * self.l) + centred.sum(-1)
        self.l = alpha * self.l + p.sum(-1)
        self.acc = alpha[..., None] * self.acc + p @ v
        if sets:
            tile_masses = torch.stack([(p * where).sum(-1) for where in sets], dim=-1)
            self.masses = alpha[..., None] * self.masses + tile_masses
        # the first key reaching the tile's max; it replaces the best only on a strict increase
        first_at_max = torch.where(s == tile_max[..., None], cols, cols[-1] + 1).amin(-1)
        self.best = torch.where(tile_max > self.m, first_at_max, self.best)
        self.m = m_new

    def output(self) -> torch.Tensor:
        l = torch.where(self.l > 0, self.l, 1.0)  # rows with no allowed key: acc = 0 -> out = 0
        return self.acc / l[..., None]

    def statistics(self) -> tuple[torch.Tensor, torch.Tensor]:
        has = self.l > 0
        l = torch.where(has, self.l, 1.0)
        entropy = torch.where(has, torch.log(l) - self.t / l, 0.0)
        max_weight = torch.where(has, 1.0 / l, 0.0)
        values = torch.cat([entropy[..., None], max_weight[..., None], self.masses / l[..., None]], dim=-1)
        return values, self.best
