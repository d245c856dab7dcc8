#!/usr/bin/env python
"""Measurements that need a GPU, one section each, every number against a baseline of the same run.

    python benchmarks/gpu.py [--sections NAME,...] [--quick] [--json OUT]
    python benchmarks/gpu.py --smoke        # no GPU: every section at toy sizes on the CPU

Sections (add one by writing a function ``section_<name>(args) -> dict`` and listing it in
:data:`SECTIONS`; it prints its own table and returns what goes into the JSON):

* ``fused_throughput`` -- the fused Triton kernel against SDPA, tokens per second, bfloat16,
  causal, one layer of 12 heads with d_head 64 (GPT-2 small's geometry), at growing n: the
  kernel alone, and the kernel returning every head statistic (the atlas's pass). Goal:
  with statistics, >= 50% of SDPA's tokens per second.
* ``atlas_context`` -- the longest context whose atlas statistics fit in 16 GiB of GPU
  memory, for one layer of 12 heads (d_head 64, float32, an encoder), counting everything
  the call holds (q, k, v included): materialized (the reference pattern, then the
  statistics read off it) against streamed (the Triton kernel). Found by doubling n and
  then bisecting in steps of 1024; the streamed search stops at ``--max-n``. Goal: >= 16x.
* ``chapter`` -- one chapter end to end (``--chapter``, default chapter 6, the sweeps and
  importance scores): executed top to bottom on a fresh kernel with the GPU visible, then on
  another with ``CUDA_VISIBLE_DEVICES=""`` (the same code on the CPU: ``device="auto"`` falls
  back), as ``scripts/execute_notebooks.py`` runs it (the chapter's folder, progress as text,
  no claims written). Wall time of each (kernel start included), their ratio, the slowest
  cells, and the GPU memory the chapter allocated (0 means it never used the GPU).

``--smoke`` runs every section at toy sizes on the CPU (the tiled torch path stands in for
Triton, the budget is scaled down; ``chapter`` runs the short chapter 0 twice on the CPU) to
check the script itself where no GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# benchmarks/kernels.py would shadow the `kernels` package that transformers looks for: drop this folder
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # measure this checkout's code
from deviating.kernels import attention  # noqa: E402
from headlab.kernels import fused_attention, statistic_inputs  # noqa: E402
from headlab.kernels.statistics import pattern_statistics  # noqa: E402

GIB = 2**30
SMOKE_NOTE = "\n  (--smoke: toy sizes on the CPU with the tiled path; this checks the script, it measures nothing)"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--smoke", action="store_true", help="toy sizes on the CPU, tiled path for Triton")
    parser.add_argument("--json", metavar="OUT", help="write every measured number to this JSON file")
    parser.add_argument("--budget-gib", type=float, default=16.0, help="section atlas_context (default: 16)")
    parser.add_argument("--max-n", type=int, default=1 << 20, help="largest n the streamed search tries")
    parser.add_argument("--chapter", type=Path, default=None,
                        help="section chapter: the notebook (default: chapter 6; chapter 0 with --smoke)")
    parser.add_argument("--cell-timeout", type=int, default=600, help="section chapter: seconds per cell")
    args = parser.parse_args()
    args.device = "cpu" if args.smoke else "cuda"
    args.backend = "tiled" if args.smoke else "triton"
    if args.smoke:
        args.budget_gib = min(args.budget_gib, 0.05)
        args.max_n = min(args.max_n, 1 << 13)
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    args.chapter = args.chapter or (chapters / ("00_how_to_use/how_to_use.ipynb" if args.smoke
                                                else "06_importance/06_importance.ipynb"))
    if not args.chapter.is_file():
        parser.error(f"--chapter {args.chapter}: no such notebook")
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return args


def sync(args) -> None:
    if args.device == "cuda":
        torch.cuda.synchronize()


def race(fns: dict, anchor: str, args, rounds: int) -> dict:
    """Time each fn round-robin after warm-up; median seconds and median per-round ratio to ``anchor``."""
    for fn in fns.values():
        fn()
        fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(args)
            start = time.perf_counter()
            fn()
            sync(args)
            times[name].append(time.perf_counter() - start)
    return {name: {"median_s": statistics.median(ts),
                   "ratio_to_" + anchor: statistics.median(t / a for t, a in zip(ts, times[anchor]))}
            for name, ts in times.items()}


# ------------------------------------------------------------------------------ sections


def section_fused_throughput(args) -> dict:
    heads, d_head, batch = 12, 64, 4
    dtype = torch.float32 if args.smoke else torch.bfloat16
    ns = [64, 128] if args.smoke else ([1024, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384])
    rounds = 3 if args.smoke or args.quick else 15
    print(f"\nfused_throughput: tokens/s, {batch} x {heads} heads x d_head {d_head}, {dtype}, causal; "
          f"fused = {args.backend} backend; ratio = SDPA time / fused time (>= 0.5 is the goal with statistics)")
    print(f"{'n':>7} {'SDPA tok/s':>12} {'fused tok/s':>12} {'ratio':>7} {'+stats tok/s':>13} {'ratio':>7}")
    rows = {}
    for n in ns:
        gen = torch.Generator(device=args.device).manual_seed(0)
        q, k, v = (torch.randn(batch, heads, n, d_head, device=args.device, dtype=dtype, generator=gen)
                   for _ in range(3))
        tokens = torch.randint(0, 50_000, (batch, n), device=args.device, generator=gen)
        inputs = statistic_inputs(torch.ones(batch, n, device=args.device), causal=True, tokens=tokens)
        fns = {
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "fused": lambda: fused_attention(q, k, v, causal=True, backend=args.backend),
            "fused_stats": lambda: fused_attention(q, k, v, causal=True, statistics=inputs, backend=args.backend),
        }
        timed = race(fns, "sdpa", args, rounds)
        tok = {name: batch * n / t["median_s"] for name, t in timed.items()}
        speed = {name: 1 / timed[name]["ratio_to_sdpa"] for name in ("fused", "fused_stats")}
        rows[n] = {"times": timed, "tokens_per_s": tok, "fraction_of_sdpa": speed}
        print(f"{n:>7} {tok['sdpa']:>12.3g} {tok['fused']:>12.3g} {speed['fused']:>7.2f} "
              f"{tok['fused_stats']:>13.3g} {speed['fused_stats']:>7.2f}")
    worst = min(r["fraction_of_sdpa"]["fused_stats"] for r in rows.values())
    print(f"goal: fused with statistics >= 50% of SDPA's tokens/s at every n: worst {worst:.0%} "
          f"({'met' if worst >= 0.5 else 'NOT met'})" + SMOKE_NOTE * args.smoke)
    return {"rows": rows, "worst_fraction_with_stats": worst, "goal_met": worst >= 0.5}


def _peak_total(fn, args) -> int:
    """Peak bytes held while fn runs, everything included (CUDA allocator; on the CPU, the profiler)."""
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()
    from deviating.memory import peak_memory

    return peak_memory(lambda _: fn(), torch.empty(0), method="torch_cpu")


def _atlas_peak(n: int, streamed: bool, args) -> int | None:
    """Total peak bytes of one layer's statistics at context n (q, k, v included); None: out of memory."""
    heads, d_head = 12, 64

    def run():
        gen = torch.Generator(device=args.device).manual_seed(0)
        q, k, v = (torch.randn(1, heads, n, d_head, device=args.device, generator=gen) for _ in range(3))
        inputs = statistic_inputs(torch.ones(1, n, device=args.device), causal=False,
                                  tokens=torch.randint(0, 50_000, (1, n), device=args.device, generator=gen))
        if streamed:
            return fused_attention(q, k, v, statistics=inputs, backend=args.backend)
        out, pattern = attention(q, k, v, backend="torch")
        return out, pattern_statistics(pattern, inputs)

    if not streamed and 3 * heads * n * n * 4 > 4 * args.budget_gib * GIB:
        return None  # far beyond the budget: do not even try to allocate it
    try:
        return _peak_total(run, args)
    except torch.OutOfMemoryError:
        return None


def _longest(streamed: bool, args) -> tuple[int, dict]:
    """Largest n (a multiple of 1024, 64 in --smoke) whose peak fits the budget, and the peaks tried."""
    step = 64 if args.smoke else 1024
    budget = args.budget_gib * GIB
    tried: dict[int, int | None] = {}

    def fits(n: int) -> bool:
        tried[n] = _atlas_peak(n, streamed, args)
        return tried[n] is not None and tried[n] <= budget

    lo, hi = 0, step
    while hi <= args.max_n and fits(hi):
        lo, hi = hi, hi * 2
    if hi > args.max_n:
        return lo, tried  # still fits at the largest n tried: a lower bound
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, tried


def section_atlas_context(args) -> dict:
    print(f"\natlas_context: the longest context whose atlas statistics of one layer (12 heads, d_head 64, "
          f"float32, encoder; q, k, v included) fit in {args.budget_gib:g} GiB on {args.device}")
    result = {}
    for name, streamed in (("materialized", False), ("streamed", True)):
        started = time.perf_counter()
        n, tried = _longest(streamed, args)
        capped = streamed and n * 2 > args.max_n
        result[name] = {"longest_n": n, "lower_bound_only": capped, "peaks_bytes": tried,
                        "seconds": time.perf_counter() - started}
        shown = ", ".join(f"{k}: {'OOM/skip' if v is None else f'{v / GIB:.2f} GiB'}" for k, v in sorted(tried.items()))
        print(f"  {name:>12}: n = {n}{' (or more: --max-n reached)' if capped else ''}   [{shown}]")
    ratio = result["streamed"]["longest_n"] / max(result["materialized"]["longest_n"], 1)
    print(f"goal: streamed >= 16x the materialized context: {ratio:.0f}x{' or more' if capped else ''} "
          f"({'met' if ratio >= 16 else 'NOT met'})" + SMOKE_NOTE * args.smoke)
    result.update(ratio=ratio, goal_met=ratio >= 16)
    return result


# The last cell of a timed chapter: how much GPU memory the chapter allocated.
_GPU_PEAK_CELL = ("import torch\nprint('HEADLAB-GPU-PEAK', torch.cuda.max_memory_allocated() "
                  "if torch.cuda.is_available() else -1)")


def _run_chapter(path: Path, hide_gpu: bool, args) -> dict:
    """Execute a chapter on a fresh kernel; wall seconds, per-cell seconds, GPU bytes allocated."""
    from datetime import datetime

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "skip-execution" in cell.metadata.get("tags", []):
            cell.source = ""  # the Colab install cell
    nb.cells.append(nbformat.v4.new_code_cell(_GPU_PEAK_CELL))
    env = {k: v for k, v in os.environ.items() if k != "HEADLAB_WRITE_CLAIMS"}
    env["HEADLAB_PROGRESS"] = "text"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1] / "lib"),
                                         *filter(None, [env.get("PYTHONPATH")])])  # this checkout's library
    if hide_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    client = NotebookClient(nb, timeout=args.cell_timeout, kernel_name="python3", record_timing=True,
                            allow_errors=False, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute(env=env)
    wall = time.perf_counter() - start
    cells = []
    for i, cell in enumerate(nb.cells[:-1]):
        stamps = cell.metadata.get("execution", {})
        if "iopub.execute_input" in stamps and "shell.execute_reply" in stamps:
            began, ended = (datetime.fromisoformat(stamps[k].replace("Z", "+00:00"))
                            for k in ("iopub.execute_input", "shell.execute_reply"))
            cells.append((i, (ended - began).total_seconds()))
    peak = next(int(line.split()[1]) for o in nb.cells[-1].outputs for line in o.get("text", "").splitlines()
                if line.startswith("HEADLAB-GPU-PEAK"))
    return {"wall_s": wall, "cells_s": dict(cells), "gpu_peak_bytes": peak}


def section_chapter(args) -> dict:
    path = args.chapter
    where = "CPU (--smoke: no GPU, both runs on the CPU)" if args.smoke else "GPU"
    print(f"\nchapter: {path.name} end to end on a fresh kernel, on the {where} and then with CUDA hidden "
          f"(CPU, {os.cpu_count()} cores); wall time, kernel start included; ratio = CPU time / GPU time")
    runs = {"gpu": _run_chapter(path, hide_gpu=args.smoke, args=args), "cpu": _run_chapter(path, True, args)}
    ratio = runs["cpu"]["wall_s"] / runs["gpu"]["wall_s"]
    for name, run in runs.items():
        slow = sorted(run["cells_s"].items(), key=lambda c: -c[1])[:3]
        memory = "no CUDA" if run["gpu_peak_bytes"] < 0 else f"{run['gpu_peak_bytes'] / GIB:.2f} GiB on the GPU"
        print(f"  {name}: {run['wall_s']:7.1f} s; {memory}; slowest cells: "
              + ", ".join(f"#{i} {t:.1f} s" for i, t in slow))
    print(f"  CPU / GPU = {ratio:.2f}x" + (" (the chapter allocated nothing on the GPU: it does not use it)"
                                            if runs["gpu"]["gpu_peak_bytes"] == 0 else "") + SMOKE_NOTE * args.smoke)
    return {"chapter": str(path), "runs": runs, "cpu_over_gpu": ratio}


SECTIONS = {"fused_throughput": section_fused_throughput, "atlas_context": section_atlas_context,
            "chapter": section_chapter}


def main() -> None:
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py needs a CUDA device (torch sees none); --smoke checks the script on the CPU")
    machine = {"device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
               "torch": torch.__version__, "smoke": args.smoke}
    try:
        import triton

        machine["triton"] = triton.__version__
    except ImportError:
        machine["triton"] = None
    print("gpu benchmark:", ", ".join(f"{k}={v}" for k, v in machine.items()))
    results = {"machine": machine}
    for name in args.sections.split(","):
        results[name] = SECTIONS[name](args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
