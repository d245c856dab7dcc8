"""Batched head sweeps against the per-head loops a researcher would otherwise run.

    OMP_NUM_THREADS=1 python benchmarks/sweep.py                 # peers, groups, live (CPU)
    OMP_NUM_THREADS=1 python benchmarks/sweep.py --sections peers --cases gpt2 --plain-loop
    OMP_NUM_THREADS=1 python benchmarks/sweep.py --sections tiles  # sweep time against groups per pass
    python benchmarks/sweep.py --device cuda    # + a 12x12 GPT-2-size random model, 2k tokens

Sections:

* ``peers``: on random-weight models built from configs (GPT-2, BERT, Llama/GQA, GPT-NeoX;
  6 layers x 12 heads, d_model 384, vocab 2,000, 16 sequences x 32 tokens) and on MiniLM, every
  single-head zero ablation by ``headlab.analysis.sweep.sweep`` and by TransformerLens's
  idiomatic loop (one ``run_with_hooks`` per head zeroing ``blocks.{l}.attn.hook_z``; install
  ``headlab[bench]``, skipped with a message otherwise) or, where TransformerLens's bridge has no
  adapter, a plain Hugging Face loop (one forward per head, a pre-hook zeroing the head's slice of
  ``W_O``'s input; ``--plain-loop`` adds it beside TransformerLens). Effects are compared and the
  time ratio printed beside the FLOP bound.
* ``groups``: chapter 6's pair ablations (every pair of heads in a layer) and random groups
  across layers, on the book's organism, against one forward per group.
* ``tiles``: the GPT-2 case at 1, 2, 3, 4, 6 and 12 groups per pass: why the CPU budget of
  ``headlab.heads.replay.tile_budget`` is what it is.
* ``live``: live-ablation latency (MiniLM, 8 sentences; goal p95 < 100 ms per toggle).

Every timing is interleaved with its baseline (a, b, a, b, ...) after a warm-up, and reported as
the median wall time and the median process CPU time (one thread: the CPU time leaves out the
time a shared machine spent running other work); ratios are measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

# `python benchmarks/sweep.py` puts benchmarks/ first on sys.path, where kernels.py would shadow the
# `kernels` package that transformers looks for (and parse this script's arguments): drop it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != _HERE]

import torch  # noqa: E402

import headlab  # noqa: E402
from deviating.training.recipes import RECIPES  # noqa: E402
from headlab.analysis.importance import pair_effects, subset_effects  # noqa: E402
from headlab.analysis.sweep import loop_sweep, sweep  # noqa: E402
from headlab.heads.replay import chunk_plan  # noqa: E402
from headlab.cli import DEFAULT_TEXTS  # noqa: E402
from headlab.viz.widgets import LiveAblation  # noqa: E402


def _load_peers():
    """benchmarks/peers.py, loaded by path (benchmarks/ is kept off sys.path, see above)."""
    spec = importlib.util.spec_from_file_location("headlab_bench_peers", _HERE / "peers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


peers = _load_peers()

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
CASES = ("gpt2", "bert", "llama", "neox", "minilm")


def _ratio_line(name: str, base: dict, fast: dict) -> str:
    return (f"  {name:<34} {base['wall'] / fast['wall']:5.2f}x wall, {base['cpu'] / fast['cpu']:5.2f}x CPU")


def bench_peers(key: str, repeats: int, plain_loop: bool = False) -> dict:
    case = peers.build_case(key, SENTENCES)
    hm = case.hm
    n = case.batch["input_ids"].shape[0]
    fast = sweep(hm, case.batch)
    firsts = [l for l in range(hm.n_layers) for _ in range(hm.n_heads)]
    bound = peers.flop_bound(hm, case.batch, firsts, chunk_plan([(h,) for h in hm.heads()], fast.per_pass))
    print(f"\n{case.label}: {len(fast.groups)} heads x {n} inputs "
          f"({tuple(case.batch['input_ids'].shape)} tokens), sweep runs {fast.per_pass} group(s) per pass")
    print(f"  FLOP bound: {bound['block']:.2f}x reusing whole clean blocks (the issue's), "
          f"{bound['gate']:.2f}x reusing up to the gate; this plan {bound['plan']:.2f}x")
    if case.tl_note:
        print(f"  note: {case.tl_note}")
    fns = {"sweep": lambda: sweep(hm, case.batch)}
    version = peers.transformer_lens_version()
    if case.tl_arch is not None and version is None:
        print("  TransformerLens is not installed: pip install 'headlab[bench]' to compare with it; "
              "comparing with a plain HF loop instead")
    if case.tl_arch is not None and version is not None:
        bridge = peers.transformer_lens_bridge(case)
        fns[f"TransformerLens {version} loop"] = lambda: peers.transformer_lens_loop(bridge, case)
    if len(fns) == 1 or plain_loop:
        fns["plain HF loop"] = lambda: peers.hf_loop(case)
    out = {"label": case.label, "per_pass": fast.per_pass, "bound": bound, "peers": {}}
    for name in list(fns)[1:]:
        reference = fns[name]()  # also the warm-up
        err = float((fast.effects - reference).abs().max())
        print(f"  effects: max |sweep - {name}| = {err:.1e} (largest effect {float(fast.effects.abs().max()):.3f})")
        out["peers"][name] = {"max_abs_diff": err}
    times = peers.timed(fns, repeats)
    for name, t in times.items():
        print(f"  {name:<34} {t['wall']:7.2f} s wall  {t['cpu']:7.2f} s CPU")
    for name in list(fns)[1:]:
        ratio = times[name]["cpu"] / times["sweep"]["cpu"]
        print(_ratio_line(f"{name} / sweep", times[name], times["sweep"]))
        print(f"  {'':34} = {100 * ratio / bound['block']:.0f}% of the block-reuse bound, "
              f"{100 * ratio / bound['gate']:.0f}% of the gate-reuse bound (CPU time)")
        out["peers"][name].update({"ratio_cpu": ratio, "ratio_wall": times[name]["wall"] / times["sweep"]["wall"]})
    out["times"] = times
    return out


def bench_groups(repeats: int) -> dict:
    """Chapter 6's calls on the organism: pair_effects(data.ids[:16]) and
    subset_effects(sizes=(2, 4, 8), n_per_size=6), against one forward per group; and the
    single-head sweep on the same model and inputs, for comparison."""
    hm = headlab.load("organism")
    ids = RECIPES["organism"].task.eval_data(32).ids[:16]
    results = {}
    pairs = [((l, a), (l, b)) for l in range(hm.n_layers) for a in range(hm.n_heads) for b in range(a + 1, hm.n_heads)]
    rng = random.Random(0)
    subsets = [tuple(sorted(rng.sample(hm.heads(), k))) for k in (2, 4, 8) for _ in range(6)]
    for name, groups, fast in (
            ("single heads", [[h] for h in hm.heads()], lambda: sweep(hm, ids)),
            ("pairs in a layer", [[h] for h in hm.heads()] + [list(p) for p in pairs], lambda: pair_effects(hm, ids)),
            ("random groups", [[h] for h in hm.heads()] + [list(s) for s in subsets],
             lambda: subset_effects(hm, ids, sizes=(2, 4, 8), n_per_size=6, seed=0))):
        swept = sweep(hm, ids, groups=groups)
        looped = loop_sweep(hm, ids, groups=groups)
        err = float((swept.effects - looped.effects).abs().max())
        firsts = [min(l for l, _ in g) for g in swept.groups]
        bound = peers.flop_bound(hm, hm.tokenize(ids), firsts, chunk_plan(swept.groups, swept.per_pass))
        times = peers.timed({"loop": lambda: loop_sweep(hm, ids, groups=groups), "batched": fast}, repeats)
        ratio = times["loop"]["cpu"] / times["batched"]["cpu"]
        print(f"\norganism (4 x 8 heads), 16 windows x 128 tokens, {name}: {len(groups)} groups, "
              f"{swept.per_pass} per pass; max |sweep - loop| = {err:.1e}")
        print(f"  loop {times['loop']['cpu']:.2f} s CPU, batched {times['batched']['cpu']:.2f} s CPU: "
              f"{ratio:.2f}x (wall {times['loop']['wall'] / times['batched']['wall']:.2f}x); "
              f"FLOP bound {bound['gate']:.2f}x (this plan {bound['plan']:.2f}x)")
        results[name] = {"groups": len(groups), "max_abs_diff": err, "ratio_cpu": ratio, "bound": bound,
                         "times": times}
    return results


def bench_tiles(repeats: int) -> dict:
    """The GPT-2 case at several groups per pass, against the plain loop (CPU time)."""
    case = peers.build_case("gpt2")
    hm = case.hm
    chosen = sweep(hm, case.batch).per_pass
    sizes = (1, 2, 3, 4, 6, 12)
    fns = {"plain HF loop": lambda: peers.hf_loop(case)}
    fns.update({f"{k} per pass": (lambda k=k: sweep(hm, case.batch, per_pass=k)) for k in sizes})
    for fn in fns.values():
        fn()
    times = peers.timed(fns, repeats)
    firsts = [l for l in range(hm.n_layers) for _ in range(hm.n_heads)]
    base = times["plain HF loop"]["cpu"]
    print(f"\n{case.label}: groups per pass (the rule chose {chosen}); loop {base:.2f} s CPU")
    out = {}
    for k in sizes:
        t = times[f"{k} per pass"]
        plan = peers.flop_bound(hm, case.batch, firsts, chunk_plan([(h,) for h in hm.heads()], k))["plan"]
        print(f"  {k:2d} per pass ({k * 16 * 32:5d} rows): {t['cpu']:6.2f} s CPU, {base / t['cpu']:4.2f}x the loop; "
              f"FLOPs {plan:4.2f}x")
        out[k] = {"cpu": t["cpu"], "wall": t["wall"], "ratio_cpu": base / t["cpu"], "flop_ratio": plan}
    return out


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


def bench_sweep_gpu(hm, inputs, repeats: int, label: str) -> dict:
    fast = sweep(hm, inputs)
    slow = loop_sweep(hm, inputs)
    err = float((fast.effects - slow.effects).abs().max())
    times = peers.timed({"loop": lambda: loop_sweep(hm, inputs), "sweep": lambda: sweep(hm, inputs)}, repeats)
    print(f"{label}: {len(fast.groups)} single-head ablations, {fast.per_pass} per pass")
    print(_ratio_line("loop / sweep", times["loop"], times["sweep"]) + f"   (max |difference| {err:.1e})")
    return {"label": label, "times": times, "max_abs_diff": err}


def gpt2_size_model(device: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=2048))
    return headlab.HeadModel(model.to(device), name="gpt2-size (random init)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sections", default="peers,groups,live",
                        help="comma-separated: peers, groups, tiles, live")
    parser.add_argument("--cases", default=",".join(CASES), help=f"for peers: {', '.join(CASES)}")
    parser.add_argument("--plain-loop", action="store_true",
                        help="peers: also time the plain HF loop where TransformerLens runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--toggles", type=int, default=60)
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    sections = args.sections.split(",")
    load = os.getloadavg()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}, "
          f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs")
    results = {"load_before": load}
    if "peers" in sections:
        results["peers"] = {key: bench_peers(key, args.repeats, args.plain_loop) for key in args.cases.split(",")}
    if "groups" in sections:
        results["groups"] = bench_groups(args.repeats)
    if "tiles" in sections:
        results["tiles"] = bench_tiles(args.repeats)
    if "live" in sections:
        results["live_ablation"] = bench_live_ablation(headlab.load("minilm", device=args.device), SENTENCES[:8],
                                                       args.toggles)
    if args.device.startswith("cuda"):
        big = gpt2_size_model(args.device)
        ids = torch.randint(0, 50257, (1, 2048), generator=torch.Generator().manual_seed(0))
        results["gpt2_size_sweep"] = bench_sweep_gpu(big, ids, args.repeats,
                                                     "GPT-2-size random (12 x 12 heads), 2048 tokens")
    results["load_after"] = os.getloadavg()
    print(f"\nload average after: {results['load_after'][0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
