"""Regenerate lib/deviating/results/ioi_circuit.json: the indirect-object circuit of every ioi-gpt seed.

    python scripts/ioi_circuit.py --n 128 --seed 0
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from deviating.experiments.ioi_circuit import IOI_MODELS, run
from deviating.experiments.records import dumps

OUT = Path(__file__).resolve().parents[1] / "lib" / "deviating" / "results" / "ioi_circuit.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(IOI_MODELS))
    parser.add_argument("--n", type=int, default=128, help="held-out prompts per model")
    parser.add_argument("--seed", type=int, default=0, help="the draw of the prompts and the bootstrap")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(1)
    Path(args.out).write_text(dumps(run(args.models, args.n, args.seed)) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
