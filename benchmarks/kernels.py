#!/usr/bin/env python
"""Attention kernels against SDPA, measured in one run: time ratios, growth with n, heads, memory.

    python benchmarks/kernels.py [--device cpu|cuda] [--quick] [--json OUT] [--threads N]
                                 [--sections 1,2,3,4,5]

Every time is reported as a ratio to ``torch.nn.functional.scaled_dot_product_attention``
(SDPA) measured in the same run, because machines are shared and noisy. The
backends are timed round-robin (one call of each per round, after warm-up) and
the ratio is the median of the per-round ratios, so a load spike hits all of a
round alike. Inputs are float32, batch 1, ``d_model = 512`` split into heads of
``d_head = d_model / n_heads``; what is timed is the attention kernel on
already-split heads ``(1, n_heads, n, d_head)`` (no projections).

Sections: (1) numpy and torch reference / SDPA at n in {128, ..., 2048}, 8 heads;
(2) the log-log slope of time against n for each backend; (3) n = 512 and head
counts 1 ... 64: time relative to 8 heads, every head count timed in each round so that
the ratios are paired per round (``round_ratios_to_8_heads`` keeps them all, for an
interval over rounds); (4) peak memory of the reference
kernel against the tiled kernel (``flash_attention``) and SDPA at growing n; (5) peak memory
of the atlas statistics of one layer (12 heads of d_head 32, MiniLM's geometry, an encoder)
at n in {512, ..., 8192}: materialized (the reference pattern, then the per-query statistics
read off it) against streamed (``fused_attention`` with statistics, the tiled torch path,
which runs the Triton kernel's algorithm): the first grows like n^2, the second like n.

On a CPU shared with other jobs (load above the core count), multi-threaded
kernels stall for milliseconds at every parallel region and the ratios then
measure the stalls; ``--threads 1`` gives every backend one core and steadier,
comparable numbers. The script warns when it sees such a load.
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--quick", action="store_true", help="smaller grids and fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="OUT", help="write every measured number to this JSON file")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch and BLAS (default: the libraries' own default)")
    parser.add_argument("--sections", default="1,2,3,4,5",
                        help="which sections to run, e.g. 5 for the atlas memory alone (default: all)")
    parser.add_argument("--note", default="", help="a note on the run, stored in the JSON's provenance")
    parser.add_argument("--memory-budget-gib", type=float, default=12.0,
                        help="section 5 skips a materialized measurement predicted above this (default: 12)")
    return parser.parse_args()


ARGS = parse_args()
if ARGS.threads:  # BLAS reads these when it loads, so set them before importing numpy
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # measure this checkout's code
from deviating.memory import peak_memory  # noqa: E402
from deviating.kernels import attention, flash_attention  # noqa: E402
from headlab.kernels import fused_attention  # noqa: E402
from headlab.kernels.statistics import pattern_statistics, statistic_inputs  # noqa: E402

D_MODEL, BATCH = 512, 1


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def sync() -> None:
    if ARGS.device == "cuda":
        torch.cuda.synchronize()


def timed(fn) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def race(fns: dict, anchor: str, min_rounds: int, max_rounds: int, budget_s: float) -> dict:
    """Time each fn round-robin; return median seconds, median per-round ratio to ``anchor`` and
    every round's time (``times_s``, in round order: round r of every fn ran together)."""
    for fn in fns.values():  # warm-up: allocator, kernel choice, caches
        fn()
        fn()
    times = {name: [] for name in fns}
    start = time.perf_counter()
    for round_ in range(max_rounds):
        for name, fn in fns.items():
            times[name].append(timed(fn))
        if round_ + 1 >= min_rounds and time.perf_counter() - start > budget_s:
            break
    result = {}
    for name, ts in times.items():
        ratios = [t / a for t, a in zip(ts, times[anchor])]
        result[name] = {"median_s": statistics.median(ts), "ratio": statistics.median(ratios),
                        "rounds": len(ts), "times_s": ts}
    return result


def inputs(n: int, n_heads: int, seed: int = 0):
    """numpy and torch copies of q, k, v, each (BATCH, n_heads, n, D_MODEL // n_heads), float32."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((BATCH, n_heads, n, D_MODEL // n_heads)).astype(np.float32) for _ in range(3)]
    return arrays, [torch.from_numpy(a).to(ARGS.device) for a in arrays]


def backends(n: int, n_heads: int) -> dict:
    (q, k, v), (tq, tk, tv) = inputs(n, n_heads)
    fns = {"sdpa": lambda: F.scaled_dot_product_attention(tq, tk, tv)}
    if ARGS.device == "cpu":
        fns["numpy_ref"] = lambda: attention(q, k, v, backend="numpy")
    fns["torch_ref"] = lambda: attention(tq, tk, tv, backend="torch")
    fns["sdpa_via_attention"] = lambda: attention(tq, tk, tv, backend="sdpa")
    return fns


def slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): time ~ n^slope."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------

def section_ratios(ns, rounds) -> dict:
    print(f"\n(1) time / SDPA time, d_model={D_MODEL}, 8 heads (d_head=64), batch {BATCH}, float32, {ARGS.device}")
    rows = {}
    for n in ns:
        rows[n] = race(backends(n, 8), "sdpa", *rounds)
    names = [name for name in rows[ns[0]] if name != "sdpa"]
    print(f"{'n':>6} {'SDPA ms':>9} " + " ".join(f"{name:>20}" for name in names))
    for n in ns:
        print(f"{n:>6} {rows[n]['sdpa']['median_s'] * 1e3:>9.3f} "
              + " ".join(f"{rows[n][name]['ratio']:>19.2f}x" for name in names))
    return rows


def section_slopes(rows) -> dict:
    ns = sorted(rows)
    print("\n(2) growth of time with n: slope of log(time) against log(n) (2 = quadratic)")
    upper = ns[len(ns) // 2:]
    slopes = {}
    print(f"{'backend':>20} {'all n':>8} {'n >= ' + str(upper[0]):>10}")
    for name in rows[ns[0]]:
        slopes[name] = {
            "all": slope(ns, [rows[n][name]["median_s"] for n in ns]),
            "upper": slope(upper, [rows[n][name]["median_s"] for n in upper]),
        }
        print(f"{name:>20} {slopes[name]['all']:>8.2f} {slopes[name]['upper']:>10.2f}")
    return slopes


def section_heads(n, head_counts, rounds) -> dict:
    print(f"\n(3) n={n}, d_model={D_MODEL}: time relative to 8 heads (d_head = {D_MODEL} / n_heads)")
    print("    the score and value matmuls cost n^2 * d_model whatever the split; the softmax and the")
    print("    pattern cost n_heads * n^2, so they grow with the head count")
    print("    every head count and backend runs in each round, so a round's time at h heads over its")
    print("    time at 8 heads is a paired ratio; the table shows the median over rounds")
    fns = {f"{h}:{name}": fn for h in head_counts for name, fn in backends(n, h).items()}
    raced = race(fns, "8:sdpa", *rounds)
    names = [key.split(":", 1)[1] for key in fns if key.startswith(f"{head_counts[0]}:")]
    rows = {h: {name: raced[f"{h}:{name}"] for name in names} for h in head_counts}
    for h in head_counts:  # the ratio to SDPA at the same head count, per round as in section 1
        for name in names:
            pairs = zip(rows[h][name]["times_s"], rows[h]["sdpa"]["times_s"])
            rows[h][name]["ratio"] = statistics.median(t / a for t, a in pairs)
    print(f"{'heads':>6} {'d_head':>7} " + " ".join(f"{name:>20}" for name in names))
    relative, round_ratios = {}, {}
    for h in head_counts:
        round_ratios[h] = {name: [t / t8 for t, t8 in zip(rows[h][name]["times_s"], rows[8][name]["times_s"])]
                           for name in names}
        relative[h] = {name: statistics.median(round_ratios[h][name]) for name in names}
        print(f"{h:>6} {D_MODEL // h:>7} " + " ".join(f"{relative[h][name]:>19.2f}x" for name in names))
    lo, hi = head_counts[0], head_counts[-1]
    spread = {name: statistics.median(t / a for t, a in zip(rows[hi][name]["times_s"], rows[lo][name]["times_s"]))
              for name in names}
    print(f"time at {hi} heads / time at {lo} head(s): "
          + ", ".join(f"{name} {value:.2f}x" for name, value in spread.items())
          + "\n(equal matmul FLOPs, n^2 * d_model, at every head count: a ratio far from 1 is the per-head"
          "\n softmax and pattern work, n_heads * n^2, and the poor efficiency of very thin matmuls)")
    return {"times": rows, "relative_to_8_heads": relative, "round_ratios_to_8_heads": round_ratios,
            "most_over_fewest_heads": spread}


def section_memory(ns) -> dict:
    method = "torch.cuda.max_memory_allocated" if ARGS.device == "cuda" else \
        "numpy: tracemalloc; torch CPU: profiler allocator events (1 thread while measuring)"
    print(f"\n(4) peak memory above the inputs, MiB (8 heads, d_head=64, float32); {method}")
    kernels = {}
    if ARGS.device == "cpu":
        kernels["numpy_ref"] = ("numpy", lambda q, k, v: attention(q, k, v, backend="numpy"))
        kernels["numpy_flash"] = ("numpy", lambda q, k, v: flash_attention(q, k, v))
    kernels["torch_ref"] = ("torch", lambda q, k, v: attention(q, k, v, backend="torch"))
    kernels["torch_flash"] = ("torch", lambda q, k, v: flash_attention(q, k, v))
    kernels["sdpa"] = ("torch", lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # memory does not depend on threads; one thread avoids stalls on a busy CPU
    try:
        peaks = {name: [] for name in kernels}
        for n in ns:
            arrays, tensors = inputs(n, 8)
            for name, (family, fn) in kernels.items():
                peaks[name].append(peak_memory(fn, *(arrays if family == "numpy" else tensors)))
    finally:
        torch.set_num_threads(threads)
    print(f"{'n':>6} " + " ".join(f"{name:>12}" for name in kernels) + f" {'pattern':>12}")
    for i, n in enumerate(ns):
        pattern = BATCH * 8 * n * n * 4
        print(f"{n:>6} " + " ".join(f"{peaks[name][i] / 2**20:>12.2f}" for name in kernels)
              + f" {pattern / 2**20:>12.2f}")
    slopes = {name: slope(ns, peaks[name]) for name in kernels}
    last = {name: float(np.log2(peaks[name][-1] / peaks[name][-2])) for name in kernels}
    print(f"{'slope':>6} " + " ".join(f"{slopes[name]:>12.2f}" for name in kernels)
          + "   log-log fit over all n (2 = ~n^2, 1 = ~n)")
    print(f"{'last':>6} " + " ".join(f"{last[name]:>12.2f}" for name in kernels)
          + f"   log2(peak at {ns[-1]} / peak at {ns[-2]}): small n carries a constant (one tile)")
    return {"method": method, "n": ns, "peak_bytes": peaks, "slopes": slopes, "last_doubling_exponent": last}


def section_atlas_memory(ns, heads: int = 12, d_head: int = 32) -> dict:
    """Peak memory of one layer's head statistics, materialized vs streamed (torch CPU or CUDA)."""
    print(f"\n(5) peak memory of one layer's atlas statistics, MiB ({heads} heads, d_head={d_head}, float32, "
          f"encoder, batch 1, random tokens);\n    materialized = attention(backend='torch') pattern + "
          "pattern_statistics; streamed = fused_attention(statistics=..., backend='tiled')")
    budget = ARGS.memory_budget_gib * 2**30
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    peaks = {"materialized": [], "streamed": []}
    try:
        for n in ns:
            gen = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(1, heads, n, d_head, generator=gen).to(ARGS.device) for _ in range(3))
            tokens = torch.randint(0, 1000, (1, n), generator=gen)
            inputs = statistic_inputs(torch.ones(1, n), causal=False, tokens=tokens).to(ARGS.device)

            def materialized(q, k, v):
                out, pattern = attention(q, k, v, backend="torch")
                return out, pattern_statistics(pattern, inputs)

            def streamed(q, k, v):
                return fused_attention(q, k, v, statistics=inputs, backend="tiled")

            pattern_bytes = heads * n * n * 4
            if 4 * pattern_bytes > budget:  # the reference holds about 3.3 patterns at its peak
                print(f"    n={n}: materialized skipped, predicted {4 * pattern_bytes / 2**30:.1f} GiB "
                      f"> --memory-budget-gib {ARGS.memory_budget_gib}")
                peaks["materialized"].append(None)
            else:
                peaks["materialized"].append(peak_memory(materialized, q, k, v))
            peaks["streamed"].append(peak_memory(streamed, q, k, v))
    finally:
        torch.set_num_threads(threads)
    print(f"{'n':>6} {'pattern':>12} {'materialized':>13} {'streamed':>10} {'ratio':>8}")
    for i, n in enumerate(ns):
        mat, stream = peaks["materialized"][i], peaks["streamed"][i]
        print(f"{n:>6} {heads * n * n * 4 / 2**20:>12.1f} "
              + (f"{mat / 2**20:>13.1f}" if mat else f"{'skipped':>13}")
              + f" {stream / 2**20:>10.2f} " + (f"{mat / stream:>7.0f}x" if mat else f"{'':>8}"))
    slopes = {name: slope([n for n, p in zip(ns, values) if p], [p for p in values if p])
              for name, values in peaks.items() if sum(p is not None for p in values) >= 2}
    print("log-log slope of peak against n (2 = ~n^2, 1 = ~n): "
          + ", ".join(f"{name} {value:.2f}" for name, value in slopes.items()))
    return {"n": ns, "heads": heads, "d_head": d_head, "peak_bytes": peaks, "slopes": slopes}


def provenance() -> dict:
    """The command, the commit it measured and when, for the JSON (so a stored run says how to redo it)."""
    import datetime
    import shlex
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "lib", "benchmarks"], cwd=root,
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = None, None
    threads = f"OMP_NUM_THREADS={ARGS.threads} " if ARGS.threads else ""
    return {"command": threads + "python benchmarks/kernels.py " + shlex.join(sys.argv[1:]),
            "commit": commit, "uncommitted_changes": dirty,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"), "note": ARGS.note}


def main() -> None:
    if ARGS.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device here")
    quick = ARGS.quick
    ns = [128, 256, 512] if quick else [128, 256, 512, 1024, 2048]
    heads = [1, 4, 8, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64]
    memory_ns = [256, 512, 1024] if quick else [256, 512, 1024, 2048]
    rounds = (5, 9, 0.5) if quick else (9, 41, 2.0)  # min rounds, max rounds, seconds per point
    head_rounds = (5, 9, 2.0) if quick else (21, 61, 40.0)  # section 3 times every head count in one round
    machine = {
        "device": ARGS.device,
        "gpu": torch.cuda.get_device_name() if ARGS.device == "cuda" else None,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "threads_flag": ARGS.threads,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "load_average_start": os.getloadavg(),
    }
    print("kernels benchmark:", ", ".join(f"{k}={v}" for k, v in machine.items() if v is not None))
    if ARGS.device == "cpu" and os.getloadavg()[0] > (os.cpu_count() or 1) and torch.get_num_threads() > 1:
        print("warning: the CPU is oversubscribed (load average above the core count); multi-threaded\n"
              "         kernels then stall at every parallel region and the ratios mostly measure the\n"
              "         stalls. Compare with --threads 1.")
    started = time.perf_counter()
    results = {"provenance": provenance(), "machine": machine, "quick": quick}
    sections = {s.strip() for s in ARGS.sections.split(",")}
    if {"1", "2"} & sections:
        results["ratios"] = section_ratios(ns, rounds)
    if "2" in sections:
        results["slopes"] = section_slopes(results["ratios"])
    if "3" in sections:
        results["heads"] = section_heads(512, heads, head_rounds)
    if "4" in sections:
        results["memory"] = section_memory(memory_ns)
    if "5" in sections:
        results["atlas_memory"] = section_atlas_memory([512, 1024, 2048] if quick else [512, 1024, 2048, 4096, 8192])
    machine["load_average_end"] = os.getloadavg()
    machine["seconds"] = time.perf_counter() - started

    if ARGS.device == "cpu" and 512 in results.get("ratios", {}):
        ratio = results["ratios"][512]["numpy_ref"]["ratio"]
        verdict = "met" if ratio <= 2 else "NOT met"
        print(f"\ngoal: numpy reference within 2x of SDPA at n=512, d_model=512, 8 heads: {ratio:.2f}x ({verdict})")
        results["goal_numpy_within_2x_at_512"] = {"ratio": ratio, "met": ratio <= 2}
    print(f"load average start {machine['load_average_start']}, end {machine['load_average_end']}; "
          f"{machine['seconds']:.0f} s")
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(results, indent=1, default=str))
        print(f"wrote {ARGS.json}")


if __name__ == "__main__":
    main()
