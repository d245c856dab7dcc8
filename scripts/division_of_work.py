#!/usr/bin/env python3
"""Compute chapter 6's stored measurements ("The uneven division of work"): every head's
ablation effect per input, on the organism's three training seeds and on MiniLM, under zero,
mean and resample ablation and several metrics.

    OMP_NUM_THREADS=1 python scripts/division_of_work.py                 # every model
    OMP_NUM_THREADS=1 python scripts/division_of_work.py --models minilm # one model

Writes ``lib/deviating/results/division_of_work/<model>.json``
(:func:`deviating.experiments.division_of_work.run`; what a file holds is described there).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from deviating.experiments.division_of_work import ORGANISMS, OUT

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=[*ORGANISMS, "minilm"], choices=[*ORGANISMS, "minilm"])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import torch

    from deviating.experiments.division_of_work import run

    torch.set_num_threads(1)
    command = "python scripts/division_of_work.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    run(args.models, out=args.out, command=command.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
