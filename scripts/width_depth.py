#!/usr/bin/env python3
"""The width/depth/d_head sweep of chapter 8: regenerates ``lib/deviating/results/width_depth.json``.

Trains every recipe of ``deviating.training.recipes.width_depth.WIDTH_DEPTH`` at each seed with
:func:`deviating.experiments.width_depth.run_sweep` (what is trained and recorded is described there):

* width at equal compute: 2 layers with 1, 2, 4, 8, 16, 32 heads, so d_head = 64, 32, ..., 2;
* depth at equal tokens: 1, 2, 4 layers of 4 heads, the same 700 steps;
* depth at equal FLOPs: 1 and 4 layers trained for the steps that cost the training FLOPs of
  the 2-layer model.

    python scripts/width_depth.py                      # the shipped sweep (seeds 0 and 1)
    python scripts/width_depth.py --steps 100 --seeds 0 --only wd-2l-1h wd-2l-4h --out /tmp/wd.json
    python scripts/width_depth.py --seeds 2 --resume --out /tmp/s2.json  # finish an interrupted run
    python scripts/width_depth.py --merge /tmp/s0.json /tmp/s2.json       # combine runs made in parallel
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from deviating.experiments.width_depth import OUT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=None, help="override every recipe's steps (quick runs)")
    parser.add_argument("--only", nargs="+", default=None, help="recipe names (default: all of WIDTH_DEPTH)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already in --out and train only the missing (recipe, seed) pairs")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="train nothing: combine these results files (same fixed settings) into --out")
    args = parser.parse_args(argv)
    command = ("python scripts/width_depth.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()

    import torch

    from deviating.experiments.width_depth import merge_results, run_sweep

    try:
        if args.merge:
            merged = merge_results(args.merge, command)
            args.out.write_text(json.dumps(merged, indent=1) + "\n")
            print(f"wrote {args.out}: {len(merged['runs'])} runs from {len(args.merge)} files")
            return 0
        torch.set_num_threads(args.threads)
        out = run_sweep(args.only, args.seeds, args.steps, args.out, threads=args.threads, resume=args.resume,
                        progress=not args.no_progress, command=command)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {len(out['runs'])} runs, {out.get('total_cpu_seconds')} CPU s, "
          f"{out.get('total_wall_seconds')} wall s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
