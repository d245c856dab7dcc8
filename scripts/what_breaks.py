#!/usr/bin/env python3
"""Compute the experiments of chapter 7 ("What breaks when specialisation is ignored") on the organism (and one on MiniLM).

    OMP_NUM_THREADS=1 python scripts/what_breaks.py                 # all parts (about 10 min on a free core)
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts pruning  # one part, others kept from the file
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts minilm   # the MiniLM pruning curves (about 2 min)

Writes ``lib/headlab/results/what_breaks.json``: for each part the settings, the measured
values and the seconds it took, plus the command and versions. The chapter loads this file by
default (its cells stay far below the build's per-cell limit). The experiments are
:func:`headlab.experiments.what_breaks.run_what_breaks` (parts and sizes described there).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from headlab.experiments.what_breaks import OUT, PARTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    import torch

    from headlab.experiments.what_breaks import run_what_breaks

    torch.set_num_threads(1)
    command = "python scripts/what_breaks.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    run_what_breaks(args.parts, out=args.out, command=command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
