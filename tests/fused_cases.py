"""One parity test for every backend of the fused kernel: the cases and how a case is judged.

Each case builds random q, k, v (grouped-query heads, a key-padding mask, repeated
tokens, separator/punctuation flags and frequency classes), runs
``fused_attention(..., backend=...)`` and compares, in float64:

* ``out`` with the reference kernel ``attention(..., backend="torch")`` on the same
  (dtype-rounded) inputs, float64, with the same allowed keys;
* every statistic with :func:`headlab.kernels.statistics.pattern_statistics` of the
  reference pattern (the definition), and the argmax key exactly.

``tests/test_streaming.py`` runs the cases on the tiled torch backend in-process;
``tests/test_triton.py`` runs the same cases on the Triton kernel (in Triton's
interpreter on the CPU, natively on CUDA). Run as a script, this module writes the
Triton results as JSON (the interpreter must be switched on before triton is imported,
so the tests run it in a subprocess with ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Case:
    name: str
    batch: int = 2
    heads: int = 4
    kv_heads: int = 2
    n: int = 29
    d: int = 16
    causal: bool = True
    padded: bool = True
    dtype: str = "float32"
    block: int = 16


CASES = [
    Case("causal-gqa-padded"),
    Case("encoder-padded", causal=False),
    Case("causal-mha", kv_heads=4, padded=False),
    Case("encoder-one-kv-head", kv_heads=1, causal=False, padded=False),
    Case("d32-two-tiles", d=32, n=40, block=32),
    Case("d24-not-a-power-of-two", d=24, heads=2, kv_heads=2),
    Case("d64", d=64, heads=2, kv_heads=1, n=20),
    Case("d128", d=128, heads=2, kv_heads=2, n=18, batch=1),
    Case("one-token", n=1, batch=1, padded=False),
    Case("bfloat16-causal", dtype="bfloat16"),
    Case("bfloat16-encoder", dtype="bfloat16", causal=False),
]
#: Largest allowed error of out and of each statistic, by input dtype (the reference runs on the
#: same rounded inputs in float64; float32 arithmetic, the weights p rounded to bfloat16 on GPUs).
TOLERANCE = {"float32": 1e-5, "float64": 1e-10, "bfloat16": 2e-2}
STAT_TOLERANCE = {"float32": 1e-5, "float64": 1e-10, "bfloat16": 1e-5}


def make_inputs(case: Case, device: str = "cpu", seed: int = 0):
    """q, k, v in the case's dtype and the StatInputs, on ``device``."""
    from headlab.kernels.statistics import statistic_inputs

    g = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, case.dtype)
    shape_q, shape_kv = (case.batch, case.heads, case.n, case.d), (case.batch, case.kv_heads, case.n, case.d)
    q = (torch.randn(shape_q, generator=g) * 1.5).to(dtype)
    k, v = (torch.randn(shape_kv, generator=g).to(dtype) for _ in range(2))
    mask = torch.ones(case.batch, case.n, dtype=torch.bool)
    if case.padded and case.batch > 1:
        mask[1, max(1, case.n - 7):] = False  # right padding on the second input
    tokens = torch.randint(0, 5, (case.batch, case.n), generator=g)  # few ids: many repeats
    sep = torch.rand(case.batch, case.n, generator=g) < 0.2
    punct = torch.rand(case.batch, case.n, generator=g) < 0.3
    freq = torch.randint(1, 4, (case.batch, case.n), generator=g).double()
    freq[torch.rand(case.batch, case.n, generator=g) < 0.2] = float("inf")
    stats = statistic_inputs(mask, causal=case.causal, tokens=tokens, separator=sep, punctuation=punct,
                             frequency=freq)
    return (q.to(device), k.to(device), v.to(device)), stats.to(device)


def judge(case: Case, backend: str, device: str = "cpu") -> dict:
    """Run one case on one backend; the largest errors against the reference, as plain numbers."""
    from deviating.kernels import attention
    from headlab.kernels.statistics import STATISTICS, pattern_statistics
    from headlab.kernels.streaming import fused_attention

    (q, k, v), stats = make_inputs(case, device)
    out, streamed = fused_attention(q, k, v, causal=case.causal, statistics=stats, backend=backend,
                                    block_size=case.block)
    group = case.heads // case.kv_heads
    q64, k64, v64 = (x.cpu().double() for x in (q, k, v))
    k64, v64 = k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1)
    stats = stats.to("cpu")
    want, pattern = attention(q64, k64, v64, stats.allowed()[:, None], backend="torch", empty_rows="zero")
    want_stats, want_argmax = pattern_statistics(pattern, stats)
    got = streamed.values.cpu().double()
    return {
        "out": float((out.cpu().double() - want).abs().max()),
        "out_dtype_kept": out.dtype == q.dtype and tuple(out.shape) == tuple(q.shape),
        "stats": {name: float((got[..., i] - want_stats[..., i]).abs().max()) for i, name in enumerate(STATISTICS)},
        "argmax_mismatches": int((streamed.argmax.cpu() != want_argmax).sum()),
    }


def problems(case: Case, result: dict) -> list[str]:
    """What is wrong with a judged case (empty when it passes)."""
    found = []
    if result["out"] > TOLERANCE[case.dtype]:
        found.append(f"out differs by {result['out']:.3g}")
    if not result["out_dtype_kept"]:
        found.append("out lost the input's dtype or shape")
    for name, error in result["stats"].items():
        if not error <= STAT_TOLERANCE[case.dtype]:
            found.append(f"{name} differs by {error:.3g}")
    if result["argmax_mismatches"]:
        found.append(f"{result['argmax_mismatches']} argmax mismatches")
    return found


if __name__ == "__main__":  # python tests/fused_cases.py OUT.json: every case on the Triton backend
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {c.name: {"case": asdict(c), "result": judge(c, "triton", device)} for c in CASES}
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=1)
