#!/usr/bin/env python3
"""Train chapter 7's distillation students and record what survives of the teacher's heads.

    OMP_NUM_THREADS=1 python scripts/distill_students.py            # the shipped run (about an hour on 1 core)
    OMP_NUM_THREADS=1 python scripts/distill_students.py --steps 100 --seeds 0 --out /tmp/d.json --no-checkpoints

The experiment is :func:`deviating.experiments.students.distill_students` (what is trained and
recorded is described there). It writes ``lib/deviating/results/distillation.json`` and, with
checkpoints on, each student to ``lib/deviating/results/distill-<target>-s<seed>/``. Runs already in
the output file with the same settings are kept and skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from deviating.experiments.students import RESULTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=["none", "mean", "mean_to_mean", "per_head"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--weight", type=float, default=1.0, help="weight of the transfer loss")
    parser.add_argument("--out", type=Path, default=RESULTS / "distillation.json")
    parser.add_argument("--no-checkpoints", action="store_true", help="do not save the students' weights")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch

    from deviating.experiments.students import distill_students

    torch.set_num_threads(args.threads)
    command = "python scripts/distill_students.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    try:
        distill_students(args.targets, args.seeds, args.steps, args.weight, args.out,
                         checkpoints=None if args.no_checkpoints else RESULTS, command=command)
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
