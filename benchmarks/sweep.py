"""Batched head sweeps vs one forward pass per head, and live-ablation latency.

    python benchmarks/sweep.py                 # CPU: MiniLM, 16 sentences
    python benchmarks/sweep.py --device cuda   # + a 12x12 GPT-2-size random model, 2k tokens

Prints ratios measured in the same run (this machine is shared and noisy: each
timing is the median of several repeats after a warm-up), never absolute
promises. Goals from the issue: sweep >= 3x faster than the loop on 2 CPU
cores (MiniLM, 16 sentences); >= 20x on a GPU (12 x 12 heads, 2k tokens);
live ablation p95 < 100 ms per toggle (MiniLM, 8 sentences).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

import headlab
from headlab.cli import DEFAULT_TEXTS
from headlab.analysis.sweep import loop_sweep, sweep
from headlab.viz.widgets import LiveAblation

# The CLI's built-in sentences, plus eight more: 16 in all.
SENTENCES = DEFAULT_TEXTS + [
    "A quiet river runs past the village where my grandmother grew up.",
    "The report that the committee published last week was criticised.",
    "Although it was raining, the children played outside all afternoon.",
    "She told her brother that the train would be late.",
    "Most of the apples in the basket were already rotten.",
    "The engineer fixed the bridge before the storm arrived.",
    "Nobody expected the small team to win the championship.",
    "The letters, which were written in French, arrived yesterday.",
]


def timed(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_sweep(hm, inputs, repeats: int, label: str) -> dict:
    fast = sweep(hm, inputs)
    slow = loop_sweep(hm, inputs)
    err = float((fast.effects - slow.effects).abs().max())
    t_loop = timed(lambda: loop_sweep(hm, inputs), repeats)
    t_sweep = timed(lambda: sweep(hm, inputs), repeats)
    print(f"{label}: {len(fast.groups)} single-head ablations x {fast.effects.shape[1]} inputs")
    print(f"  loop (one forward per head) {t_loop * 1e3:9.1f} ms")
    print(f"  headlab.analysis.sweep               {t_sweep * 1e3:9.1f} ms")
    print(f"  ratio loop / sweep          {t_loop / t_sweep:9.2f} x   (max |difference| {err:.1e})")
    return {"label": label, "loop_s": t_loop, "sweep_s": t_sweep, "ratio": t_loop / t_sweep, "max_abs_diff": err}


def bench_live_ablation(hm, texts, toggles: int, seed: int = 0) -> dict:
    """One toggle = flip one head in the ablated set, then recompute everything the live-ablation
    widget shows (headlab.viz.widgets.LiveAblation.view: the metric per text, the top predictions or
    the similarity matrix, and the selected head's pattern)."""
    rng = random.Random(seed)
    live = LiveAblation(hm, texts)
    ablated: set = set()
    times = []
    for _ in range(toggles):
        head = rng.choice(hm.heads())
        ablated ^= {head}
        start = time.perf_counter()
        live.view(sorted(ablated), selected=head)
        times.append(time.perf_counter() - start)
    times.sort()
    p50 = times[len(times) // 2]
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"live ablation on {hm.name}, {len(texts)} sentences, {toggles} toggles: "
          f"p50 {p50 * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms (goal p95 < 100 ms)")
    return {"p50_ms": p50 * 1e3, "p95_ms": p95 * 1e3, "toggles": toggles}


def gpt2_size_model(device: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=2048))
    return headlab.HeadModel(model.to(device), name="gpt2-size (random init)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--toggles", type=int, default=60)
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    results = {}
    hm = headlab.load("minilm", device=args.device)
    results["minilm_sweep"] = bench_sweep(hm, SENTENCES, args.repeats, "MiniLM (6 x 12 heads), 16 sentences")
    results["live_ablation"] = bench_live_ablation(hm, SENTENCES[:8], args.toggles)
    if args.device.startswith("cuda"):
        big = gpt2_size_model(args.device)
        ids = torch.randint(0, 50257, (1, 2048), generator=torch.Generator().manual_seed(0))
        results["gpt2_size_sweep"] = bench_sweep(big, ids, args.repeats, "GPT-2-size random (12 x 12 heads), 2048 tokens")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
