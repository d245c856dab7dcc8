#!/usr/bin/env python3
"""Compute the experiments of chapter 7 ("What breaks when specialisation is ignored") on the organism's three seeds (and one on MiniLM).

    OMP_NUM_THREADS=1 python scripts/what_breaks.py                 # all parts, three organism seeds
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts pruning  # one part, others kept from the file
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts minilm   # the MiniLM pruning curves
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --models organism --parts averaging  # one seed only
    python scripts/what_breaks.py --merge a.json b.json c.json  # runs split over processes, into one file

The CPU time each part took on one core is recorded in the file (``seconds`` per part and model).

Writes ``lib/deviating/results/what_breaks.json``: for each part the settings, the measured
values and the seconds it took, plus the command and versions. The chapter loads this file by
default (its cells stay far below the build's per-cell limit). The experiments are
:func:`deviating.experiments.what_breaks.run_what_breaks` (parts and sizes described there).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from deviating.experiments.what_breaks import ORGANISMS, OUT, PARTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--models", nargs="+", default=list(ORGANISMS), help="organisms of the organism parts")
    parser.add_argument("--minilm-sentences", type=int, default=None,
                        help="MiniLM part: only the first N English sentences (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--merge", nargs="+", type=Path, metavar="FILE",
                        help="merge results files of split runs (e.g. one seed each) into --out and stop")
    args = parser.parse_args(argv)
    if args.merge:
        from deviating.experiments.what_breaks import merge_results

        try:
            merge_results(args.merge, out=args.out)
        except ValueError as err:
            parser.error(str(err))
        return 0
    import dataclasses

    import torch

    from deviating.experiments.what_breaks import WhatBreaksSizes, run_what_breaks

    torch.set_num_threads(1)
    command = "python scripts/what_breaks.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    sizes = dataclasses.replace(WhatBreaksSizes(), models=tuple(args.models), minilm_sentences=args.minilm_sentences)
    try:
        run_what_breaks(args.parts, out=args.out, sizes=sizes, command=command.strip())
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
