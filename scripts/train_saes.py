#!/usr/bin/env python3
"""Train chapter 8's sparse autoencoders and ship them with their provenance.

For one layer of a model organism trained on the synthetic language, trains top-k SAEs (and
optionally an L1 SAE and one SAE per head) on the layer's head outputs and writes each with its
provenance: :func:`deviating.experiments.saes.train_saes` (what is trained and recorded is described there).

    python scripts/train_saes.py --model organism --layer 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from deviating.experiments.saes import OUT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="organism")
    parser.add_argument("--layer", type=int, required=True)
    parser.add_argument("--windows", type=int, default=1200, help="training windows (default 1200)")
    parser.add_argument("--eval-windows", type=int, default=128)
    parser.add_argument("--data-seed", type=int, default=7000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--l1", type=float, default=None, help="also train an L1 SAE with this coefficient")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    parser.add_argument("--head-features", type=int, default=None, help="also train one SAE per head with N features")
    parser.add_argument("--head-k", type=int, default=2)
    parser.add_argument("--head-steps", type=int, default=1500)
    parser.add_argument("--head-seeds", type=int, nargs="+", default=None,
                        help="seeds of the per-head SAEs (default: the first of --seeds)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from deviating.experiments.saes import train_saes

    torch.set_num_threads(args.threads)
    command = "python scripts/train_saes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    train_saes(args.layer, model=args.model, windows=args.windows, eval_windows=args.eval_windows,
               data_seed=args.data_seed, features=args.features, k=args.k, l1=args.l1, seeds=args.seeds,
               head_features=args.head_features, head_k=args.head_k, head_steps=args.head_steps,
               head_seeds=args.head_seeds, steps=args.steps,
               batch_size=args.batch_size, lr=args.lr, out=args.out, threads=args.threads, command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
