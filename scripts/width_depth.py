#!/usr/bin/env python3
"""The width/depth/d_head sweep of chapter 7: regenerates ``lib/headlab/results/width_depth.json``.

Trains every recipe of ``headlab.training.width_depth.WIDTH_DEPTH`` (small GPTs on the synthetic language at
d_model = 64, n_ctx = 64, d_mlp = 256) at each seed, and records the validation loss and the
per-phenomenon accuracies of ``SyntheticLanguage.evaluate`` on the fixed evaluation windows:

* width at equal compute: 2 layers with 1, 2, 4, 8, 16, 32 heads, so d_head = 64, 32, ..., 2.
  Same tokens, same steps and batch, and the same training FLOPs: the Q, K, V, O matrices
  are d_model x (n_heads * d_head) = 64 x 64 however they are split into heads;
* depth at equal tokens: 1, 2, 4 layers of 4 heads, the same 700 steps (so more layers cost
  more FLOPs);
* depth at equal FLOPs: 1 and 4 layers trained for the steps that cost the training FLOPs of
  the 2-layer model (``forward_flops_per_token``), so 1 layer sees more tokens, 4 layers fewer.

For a given seed every run sees the same token stream (the data generator is seeded by the
seed), so the seed changes both the initialisation and the order of the data.

    python scripts/width_depth.py                      # the shipped sweep (seeds 0 and 1)
    python scripts/width_depth.py --steps 100 --seeds 0 --only wd-2l-1h wd-2l-4h --out /tmp/wd.json
    python scripts/width_depth.py --seeds 2 --resume --out /tmp/s2.json  # finish an interrupted run
    python scripts/width_depth.py --merge /tmp/s0.json /tmp/s2.json       # combine runs made in parallel
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "lib" / "headlab" / "results" / "width_depth.json"
KEPT = ("val_loss", "agreement_acc", "agreement_n", "pronoun_acc", "pronoun_n", "copy_acc", "copy_n",
        "rare_acc", "rare_n", "induction_best", "previous_token_best")


def run_one(recipe, seed: int, steps: int | None, progress: bool) -> dict:
    """Train one recipe at one seed; the row of the results file."""
    from headlab.training.loop import train
    from headlab.training.width_depth import forward_flops_per_token

    steps = recipe.steps if steps is None else steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = train(recipe, seed=seed, steps=steps, progress=progress)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    m = result.metrics
    config = recipe.config
    flops = forward_flops_per_token(config)
    tokens = steps * recipe.batch_size * config.n_ctx
    return {
        "name": recipe.name, "seed": seed, "n_layers": config.n_layers, "n_heads": config.n_heads,
        "d_head": config.d_head, "d_model": config.d_model, "steps": steps, "train_tokens": tokens,
        "forward_flops_per_token": flops, "train_flops": 3 * flops * tokens,
        "n_params": result.model.num_params(),
        "metrics": {k: round(m[k], 5) if isinstance(m[k], float) else m[k] for k in KEPT},
        "agreement_by_attractor": m["agreement_by"].get("attractor"),
        "pronoun_by_distractor": m["pronoun_by"].get("distractor"),
        "curve": [{"step": r["step"], "val_loss": round(r["val_loss"], 5)} for r in result.curve],
        "train_seconds": round(result.train_seconds, 1), "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
    }


def merge(paths: list[Path], out_path: Path, command: str) -> int:
    """Combine results files made with the same fixed settings (e.g. one per seed, run in parallel)."""
    parts = [json.loads(p.read_text()) for p in paths]
    if any(p["fixed"] != parts[0]["fixed"] for p in parts):
        print("the files were made with different fixed settings; they cannot be merged", file=sys.stderr)
        return 2
    out = dict(parts[0])
    out.pop("resumed_by", None)
    out["command"] = command
    out["sources"] = [{"command": p["command"], "resumed_by": p.get("resumed_by", []), "written_utc": p.get("written_utc"),
                       "runs": [f"{r['name']}/s{r['seed']}" for r in p["runs"]]} for p in parts]
    out["runs"] = [r for p in parts for r in p["runs"]]
    keys = [(r["name"], r["seed"]) for r in out["runs"]]
    if len(set(keys)) != len(keys):
        print("the files share (recipe, seed) runs; merge files with different runs", file=sys.stderr)
        return 2
    out["seeds"] = sorted({r["seed"] for r in out["runs"]})
    out["total_wall_seconds"] = round(sum(p["total_wall_seconds"] for p in parts), 1)
    out["total_cpu_seconds"] = round(sum(p["total_cpu_seconds"] for p in parts), 1)
    out["written_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {out_path}: {len(out['runs'])} runs from {len(parts)} files")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=None, help="override every recipe's steps (quick runs)")
    parser.add_argument("--only", nargs="+", default=None, help="recipe names (default: all of WIDTH_DEPTH)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already in --out and train only the missing (recipe, seed) pairs")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="train nothing: combine these results files (same fixed settings) into --out")
    args = parser.parse_args(argv)
    command = ("python scripts/width_depth.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    if args.merge:
        return merge(args.merge, args.out, command)

    from headlab.training.width_depth import WIDTH_DEPTH, WIDTH_DEPTH_STEPS, forward_flops_per_token

    names = args.only or list(WIDTH_DEPTH)
    unknown = [n for n in names if n not in WIDTH_DEPTH]
    if unknown:
        print(f"unknown recipe(s) {unknown}; the sweep has: {', '.join(WIDTH_DEPTH)}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    first = WIDTH_DEPTH[names[0]]
    out = {
        "description": ("chapter 7's width/depth/d_head sweep: small GPTs on the synthetic language at "
                        "d_model 64; validation loss and per-phenomenon accuracy on fixed evaluation windows"),
        "command": command,
        "seeds": args.seeds,
        "threads": args.threads,
        "fixed": {"d_model": first.config.d_model, "d_mlp": first.config.d_mlp, "n_ctx": first.config.n_ctx,
                  "batch_size": first.batch_size, "lr": first.lr, "warmup": first.warmup,
                  "steps": WIDTH_DEPTH_STEPS if args.steps is None else args.steps,
                  "eval_windows": first.eval_size, "data": first.task.describe()},
        "flops_definition": " ".join(forward_flops_per_token.__doc__.split()),
        "equalisation": ("width: equal tokens, steps and FLOPs (n_heads * d_head = d_model); depth: "
                         "equal tokens (wd-1l-4h, wd-2l-4h, wd-4l-4h) and equal training FLOPs "
                         "(wd-1l-4h-flops, wd-4l-4h-flops: steps scaled to the FLOPs of wd-2l-4h)"),
        "torch_version": torch.__version__, "python_version": platform.python_version(),
        "runs": [],
    }
    done = set()
    if args.resume and args.out.exists():
        old = json.loads(args.out.read_text())
        if old["fixed"] != out["fixed"]:
            print(f"{args.out} was made with other fixed settings; run without --resume", file=sys.stderr)
            return 2
        out["command"], out["runs"] = old["command"], old["runs"]
        out["resumed_by"] = old.get("resumed_by", []) + [command]
        out["seeds"] = sorted(set(old["seeds"]) | set(args.seeds))
        done = {(r["name"], r["seed"]) for r in old["runs"]}
        out["total_wall_seconds"], out["total_cpu_seconds"] = old["total_wall_seconds"], old["total_cpu_seconds"]
    t0, cpu0 = time.perf_counter() - out.get("total_wall_seconds", 0), time.process_time() - out.get("total_cpu_seconds", 0)
    for seed in args.seeds:
        for name in names:
            if (name, seed) in done:
                continue
            row = run_one(WIDTH_DEPTH[name], seed, args.steps, progress=not args.no_progress)
            out["runs"].append(row)
            print(json.dumps({k: row[k] for k in ("name", "seed", "steps", "cpu_seconds")} | row["metrics"]),
                  flush=True)
            out["total_wall_seconds"] = round(time.perf_counter() - t0, 1)
            out["total_cpu_seconds"] = round(time.process_time() - cpu0, 1)
            out["written_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1) + "\n")  # after every run: partial results survive
    print(f"wrote {args.out}: {len(out['runs'])} runs, {out['total_cpu_seconds']} CPU s, "
          f"{out['total_wall_seconds']} wall s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
