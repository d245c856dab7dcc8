"""Fused attention in Triton that measures every head as it runs.

The tiled loop of :func:`deviating.kernels.flash_attention` as one GPU kernel: one program per
(query tile, batch element x head) runs the loop over key tiles; no ``n x n`` tensor is
written. The online softmax and every statistic are updated per tile as
:mod:`headlab.kernels.streaming` explains. The kernel names no statistic: each mass is one
row of ``Spec`` (:func:`~headlab.kernels.keysets.spec_table`), whose conditions on ``(i, j)``
it evaluates. Under grouped-query attention query head ``h`` reads kv head ``h // group``.

On CPU tensors it runs in Triton's interpreter (exact, slow), switched on by
``TRITON_INTERPRET=1`` set before anything imports ``triton``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from headlab.kernels.keysets import MATCH_FIELDS, NON_MASS, SPEC_COLUMNS, mass_names, spec_table, statistic_names
from headlab.kernels.statistics import HeadStatistics, StatInputs

# Rows of the per-position side input ``side`` (batch, N_SIDE, n), int32: the key mask, the
# flags, then one row per match field (MATCH_FIELDS order) and a row of zeros ("no match").
# Compiled kernels may read only constexpr globals, hence tl.constexpr (ints on the Python side).
KEY_REAL, FLAGS = tl.constexpr(0), tl.constexpr(1)
FIELD_ROW = tl.constexpr(2)  # the row of MATCH_FIELDS[0]; spec_table's field index f is row FIELD_ROW + f
N_SIDE = tl.constexpr(2 + len(MATCH_FIELDS) + 1)
N_SPEC = tl.constexpr(len(SPEC_COLUMNS))


@triton.jit
def _mass(p, where):
    """``sum_j p[:, j]`` over the keys where ``where`` holds: one statistic's share of a tile."""
    return tl.sum(tl.where(where, p, 0.0), 1)


def _attention_kernel(  # jitted below
    Q, K, V, Out, Stats, Argmax, Side, Spec,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    n_heads, n_q, n_k, d, group, scale,
    CAUSAL: tl.constexpr, STATS: tl.constexpr, WINDOW: tl.constexpr,
    N_MASS: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr,
):
    # 1. which tile: query rows i0 .. i0 + BLOCK_M of one (batch element, head)
    i0 = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)  # 64-bit offsets: batch x heads x n x d passes 2^31 at long n
    b, h = bh // n_heads, bh % n_heads
    h_kv = h // group  # grouped-query attention: `group` query heads share one kv head
    rows = i0 + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    dims = tl.arange(0, BLOCK_D)  # (BLOCK_D,): d padded to a power of two, masked
    side = Side + b * N_SIDE * n_k  # this batch element's per-position integers
    in_q = rows < n_q

    # 2. the query tile, loaded once
    q_ptrs = Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :]
    q_blk = tl.load(q_ptrs, mask=(rows[:, None] < n_q) & (dims[None, :] < d), other=0.0)
    if UPCAST:  # the interpreter's tl.dot mishandles bfloat16 (see triton_attention's docstring)
        q_blk = q_blk.to(tl.float32)

    row_max = tl.full([BLOCK_M], float("-inf"), tl.float32)  # m
    row_sum = tl.zeros([BLOCK_M], tl.float32)  # l = sum_j exp(s_j - m)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # sum_j exp(s_j - m) v_j
    # the statistics' running sums, each relative to the same m as row_sum
    t = tl.zeros([BLOCK_M], tl.float32)  # sum_j exp(s_j - m) (s_j - m), for the entropy
    best = tl.full([BLOCK_M], -1, tl.int32)  # the key where m was reached
    slots = tl.arange(0, BLOCK_S)  # one column per mass statistic (N_MASS of them)
    masses = tl.zeros([BLOCK_M, BLOCK_S], tl.float32)

    # 3. the loop over key tiles; a causal tile stops at its last row
    stop = n_k
    if CAUSAL:
        stop = tl.minimum(n_k, i0 + BLOCK_M)
    for j0 in range(0, stop, BLOCK_N):
        cols = j0 + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        in_k = cols < n_k
        kv_mask = in_k[:, None] & (dims[None, :] < d)
        k_at = (K + b * stride_kb + h_kv * stride_kh
                + cols[:, None] * stride_kn + dims[None, :])
        v_at = (V + b * stride_vb + h_kv * stride_vh
                + cols[:, None] * stride_vn + dims[None, :])
        k_blk = tl.load(k_at, mask=kv_mask, other=0.0)
        v_blk = tl.load(v_at, mask=kv_mask, other=0.0)
        if UPCAST:
            k_blk, v_blk = k_blk.to(tl.float32), v_blk.to(tl.float32)

        # 4. one tile of scores, -inf where the key is not allowed
        if IEEE:
            s = tl.dot(q_blk, tl.trans(k_blk),
                       input_precision="ieee") * scale  # (BLOCK_M, BLOCK_N)
        else:
            s = tl.dot(q_blk, tl.trans(k_blk)) * scale
        real_k = tl.load(side + KEY_REAL * n_k + cols, mask=in_k,
                         other=0) != 0
        allowed = real_k[None, :]  # (1, BLOCK_N), broadcast over the rows
        if CAUSAL:
            allowed = allowed & (cols[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))

        # 5. the online softmax: a new maximum rescales the sums so far
        tile_max = tl.max(s, 1)
        m_new = tl.maximum(row_max, tile_max)
        # 0 for a row with no allowed key yet
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(row_max - m_safe)  # 0 on a row's first allowed tile
        p = tl.exp(s - m_safe[:, None])  # (BLOCK_M, BLOCK_N); 0 if masked

        # 6. the statistics, rescaled like row_sum, plus the tile's share
        if STATS:
            shift = tl.where(row_sum > 0, row_max - m_safe, 0.0)
            s_rel = tl.where(allowed, s - m_safe[:, None], 0.0)
            t = alpha * (t + shift * row_sum) + tl.sum(p * s_rel, 1)
            at_max = tl.min(tl.where(s == tile_max[:, None], cols[None, :],
                                     n_k), 1)
            best = tl.where(tile_max > row_max, at_max, best)
            offset = cols[None, :] - rows[:, None]  # j - i
            flags = tl.load(side + FLAGS * n_k + cols, mask=in_k, other=0)
            masses = masses * alpha[:, None]
            for c in tl.static_range(N_MASS):  # each mass: its row of Spec
                spec = Spec + c * N_SPEC  # lo, hi, window, not self, flag, ...
                lo, hi = tl.load(spec), tl.load(spec + 1)
                keys = ((offset >= lo) & (offset <= hi)
                        & ((tl.load(spec + 2) == 0)
                           | ((offset <= WINDOW) & (offset >= -WINDOW)))
                        & ((tl.load(spec + 3) == 0) | (offset != 0)))
                bit = tl.load(spec + 4)
                keys = keys & ((bit == 0) | ((flags & bit) != 0))[None, :]
                k_row = side + (FIELD_ROW + tl.load(spec + 5)) * n_k
                q_row = side + (FIELD_ROW + tl.load(spec + 6)) * n_k
                k_val = tl.load(k_row + cols, mask=in_k, other=0)
                q_val = tl.load(q_row + rows, mask=in_q, other=0)
                keys = keys & (k_val[None, :] == q_val[:, None])
                share = _mass(p, keys)  # (BLOCK_M,)
                at_c = slots[None, :] == c
                masses = masses + tl.where(at_c, share[:, None], 0.0)

        row_sum = row_sum * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v_blk,
                                                input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v_blk.dtype), v_blk)
        row_max = m_new

    # 7. write out: O(n) numbers per head; a row with no allowed key gets zeros
    has = row_sum > 0
    l = tl.where(has, row_sum, 1.0)
    out_ptrs = Out + (bh * n_q + rows[:, None]) * d + dims[None, :]
    tl.store(out_ptrs, (acc / l[:, None]).to(Out.dtype.element_ty), mask=(rows[:, None] < n_q) & (dims[None, :] < d))
    if STATS:
        n_stats = N_MASS + 2
        base = Stats + (bh * n_q + rows) * n_stats
        tl.store(base + 0, tl.where(has, tl.log(l) - t / l, 0.0), mask=in_q)  # entropy
        tl.store(base + 1, tl.where(has, 1.0 / l, 0.0), mask=in_q)  # max_weight
        tl.store(base[:, None] + 2 + slots[None, :], masses / l[:, None],
                 mask=in_q[:, None] & (slots[None, :] < N_MASS))  # the masses
        tl.store(Argmax + bh * n_q + rows, best, mask=in_q)


assert NON_MASS == ("entropy", "max_weight"), "the kernel's store order (step 7) puts these two first"


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1`` when triton was imported)."""
    return bool(knobs.runtime.interpret)


_attention_kernel = triton.jit(_attention_kernel)


def compile_for_gpu(dtype: torch.dtype = torch.float32, *, causal: bool = True, arch: int = 90,
                    block_size: int = 64, d: int = 64):
    """Compile the kernel (with statistics, every registered mass) for an NVIDIA GPU of compute
    capability ``arch`` (90: H100/H200) without one: the compiler front end and ``ptxas`` run on
    the CPU, so a machine without a GPU checks what the interpreter cannot -- that the kernel is
    valid compiled Triton (only constexpr globals, supported constructs). Returns the compiled
    kernel (its ``asm`` holds the TTIR, PTX and cubin)."""
    element = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    pointers = {"Q": element, "K": element, "V": element, "Out": element, "Stats": "fp32", "Argmax": "i32",
                "Side": "i32", "Spec": "i32"}
    n_mass = len(mass_names())
    constants = dict(CAUSAL=causal, STATS=True, WINDOW=2, N_MASS=n_mass, BLOCK_S=triton.next_power_of_2(n_mass),
                     BLOCK_M=block_size, BLOCK_N=block_size, BLOCK_D=max(16, triton.next_power_of_2(d)),
                     IEEE=dtype == torch.float32, UPCAST=False)
    names = _attention_kernel.arg_names
    signature = {name: (f"*{pointers[name]}" if name in pointers else "constexpr" if name in constants
                        else "fp32" if name == "scale" else "i32") for name in names}
    source = ASTSource(fn=_attention_kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()})
    return triton.compile(source, target=GPUTarget("cuda", arch, 32))


def side_inputs(statistics: StatInputs | None, key_mask: torch.Tensor | None, batch: int, n: int,
                device) -> torch.Tensor:
    """Pack the per-position integers into ``(batch, N_SIDE, n)`` int32: the key mask, the flags,
    each field of :data:`~headlab.kernels.keysets.MATCH_FIELDS` and a row of zeros."""
    side = torch.zeros(batch, N_SIDE.value, n, dtype=torch.int32, device=device)
    side[:, KEY_REAL.value] = 1 if key_mask is None else key_mask.to(torch.int32)
    if statistics is not None:
        side[:, FLAGS.value] = statistics.key_flags.to(torch.int32)
        for f, name in enumerate(MATCH_FIELDS):
            if name == "position":
                value = torch.arange(n, device=device).expand(batch, n)
            elif name == "first":
                value = statistics.first[:, None].expand(batch, n)
            else:
                value = getattr(statistics, name)
            side[:, FIELD_ROW.value + f] = value.to(device=device, dtype=torch.int32)
    return side


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                     key_mask: torch.Tensor | None, statistics: StatInputs | None, scale: float,
                     block_size: int = 64):
    """Launch the kernel; arguments as :func:`headlab.kernels.streaming.fused_attention` (checked there).

    Returns ``(out, HeadStatistics | None)``. Float32 inputs use IEEE float32 products (no
    TF32), so the statistics match the reference to float32 rounding; bfloat16 and float16
    use the tensor cores' native products with float32 accumulation. In the interpreter
    (triton 3.9), ``tl.dot`` returns garbage for bfloat16 tiles, so there the tiles are
    converted to float32 first: a product of two bfloat16 numbers is exact in float32,
    so the arithmetic is the tensor cores' (float32 sums), only the weights ``p`` stay
    float32 where the GPU rounds them to bfloat16 before ``p @ v``.
    """
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16 (tl.dot's smallest tile), got {block_size}")
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    out = torch.empty(batch, heads, n_q, d, dtype=q.dtype, device=q.device)
    want = statistics is not None
    names, masses = statistic_names(), mass_names()  # the columns, read once per call
    stats = torch.empty(batch, heads, n_q, len(names) if want else 1, dtype=torch.float32, device=q.device)
    argmax = torch.empty(batch, heads, n_q if want else 1, dtype=torch.int32, device=q.device)
    side = side_inputs(statistics, key_mask, batch, n_k, q.device)
    spec = spec_table(masses, q.device)
    if not q.is_cuda and not interpreting():
        raise RuntimeError(
            "the Triton kernel got CPU tensors, which only Triton's interpreter runs: set the environment "
            "variable TRITON_INTERPRET=1 before anything imports triton (os.environ['TRITON_INTERPRET'] = '1' "
            "at the top of the script or notebook), or use backend='tiled', the same algorithm in torch ops")
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"the Triton kernel takes float32, bfloat16 or float16 tensors, got {q.dtype}; "
                        "use backend='tiled' for float64")
    grid = (triton.cdiv(n_q, block_size), batch * heads)
    _attention_kernel[grid](
        q, k, v, out, stats, argmax, side, spec,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        heads, n_q, n_k, d, heads // kv_heads, float(scale),
        CAUSAL=causal, STATS=want, WINDOW=statistics.window if want else 0,
        N_MASS=len(masses), BLOCK_S=triton.next_power_of_2(max(len(masses), 1)),
        BLOCK_M=block_size, BLOCK_N=block_size, BLOCK_D=max(16, triton.next_power_of_2(d)),
        IEEE=q.dtype == torch.float32, UPCAST=q.dtype != torch.float32 and interpreting(),
    )
    if not want:
        return out, None
    return out, HeadStatistics(stats, argmax.long(), names)
