#!/usr/bin/env python3
"""Train chapter 6's distillation students and record what survives of the teacher's heads.

    OMP_NUM_THREADS=1 python scripts/distill_students.py            # the shipped run (about an hour on 1 core)
    OMP_NUM_THREADS=1 python scripts/distill_students.py --steps 100 --seeds 0 --out /tmp/d.json --no-checkpoints

The teacher is ``organism-small-s0`` (2 layers x 4 heads); each student follows the
``distill-student`` recipe of :mod:`headlab.training.loop` (same layers and heads, half the width) and is
trained by :func:`headlab.training.distill.distill` with the next-token loss plus ``--weight`` x the
attention-transfer loss towards one target (``none``, ``mean``, ``mean_to_mean``, ``per_head``):
same seed, same steps, same batches for every target. For each student (and the teacher) it
records the final metrics of the task's evaluation (validation loss, accuracy per phenomenon,
induction and previous-token scores) and the per-head specialist scores of
:func:`headlab.training.distill.specialists` on held-out windows, and writes them, with the command, the
recipe and the timings, to ``lib/headlab/results/distillation.json``. With checkpoints on, each
student is saved (safetensors + provenance) to ``lib/headlab/results/distill-<target>-s<seed>/``.

Runs already in the output file with the same settings are kept and skipped, so an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "lib" / "headlab" / "results"
TEACHER = "organism-small-s0"
SPECIALIST_WINDOWS = 128  # held-out windows on which the specialist scores are measured


def _round(x, digits: int = 4):
    if isinstance(x, float):
        return round(x, digits)
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return x


def _specialists(hm, windows, tok) -> dict:
    from headlab.training.distill import specialists

    return {name: [[round(float(v), 4) for v in row] for row in grid]
            for name, grid in specialists(hm, windows, tok).items()}


def main(argv: list[str] | None = None) -> int:
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

    import headlab
    from headlab.training.distill import TRANSFER_TARGETS, distill
    from headlab.models.checkpoints import save_checkpoint
    from headlab.training.loop import ORGANISMS

    unknown = [t for t in args.targets if t not in TRANSFER_TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {TRANSFER_TARGETS}")
    torch.set_num_threads(args.threads)
    recipe = ORGANISMS["distill-student"]
    steps = args.steps or recipe.steps
    teacher = headlab.load(TEACHER)
    task = recipe.task
    held_out = task.windows(SPECIALIST_WINDOWS, seed=-2)  # never drawn by training (seeds >= 0) or eval (-1)
    command = "python scripts/distill_students.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    settings = {"teacher": TEACHER, "recipe": recipe.to_dict(), "steps": steps, "weight": args.weight,
                "specialist_windows": {"n": SPECIALIST_WINDOWS, "seed": -2}}
    results = {"command": command.strip(), **settings, "teacher_metrics": None, "teacher_specialists": None,
               "runs": []}
    if args.out.is_file():
        old = json.loads(args.out.read_text())
        if all(old.get(k) == v for k, v in settings.items()):
            results["runs"] = old.get("runs", [])
            results["teacher_metrics"] = old.get("teacher_metrics")
            results["teacher_specialists"] = old.get("teacher_specialists")

    def save() -> None:
        results["torch_version"], results["python_version"] = torch.__version__, platform.python_version()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")

    if results["teacher_metrics"] is None:
        m = task.evaluate(teacher.model, task.eval_data(recipe.eval_size))
        results["teacher_metrics"] = _round(m)
        results["teacher_specialists"] = _specialists(teacher, held_out, teacher.tokenizer)
        save()
    done = {(r["target"], r["seed"]) for r in results["runs"]}
    for seed in args.seeds:
        for target in args.targets:
            if (target, seed) in done:
                print(f"skip {target} seed {seed}: already in {args.out}", flush=True)
                continue
            t0 = time.perf_counter()
            res = distill(recipe, teacher, target=target, weight=args.weight if target != "none" else 0.0,
                          seed=seed, steps=steps, progress=False,
                          log=lambda line: print(line[:160], flush=True))
            student = headlab.HeadModel(res.model, res.tokenizer, name=f"distill-{target}-s{seed}")
            run = {"target": target, "seed": seed, **{k: res.info[k] for k in ("weight", "train_seconds", "cpu_seconds")},
                   "metrics": _round(res.metrics), "specialists": _specialists(student, held_out, res.tokenizer),
                   "curve": _round(res.curve)}
            if not args.no_checkpoints:
                folder = RESULTS / f"distill-{target}-s{seed}"
                save_checkpoint(folder, res.model, res.tokenizer, {
                    "name": folder.name, "description": f"chapter 6 student, attention transfer target {target!r}",
                    "command": command.strip(), "teacher": TEACHER, "target": target,
                    "weight": run["weight"], "seed": seed, "steps": steps, "config": recipe.config.to_dict(),
                    "recipe": {k: v for k, v in recipe.to_dict().items() if k not in ("config", "task")},
                    "final_metrics": run["metrics"], "train_seconds": run["train_seconds"],
                    "cpu_seconds": run["cpu_seconds"], "torch_version": torch.__version__})
                run["checkpoint"] = f"headlab/results/{folder.name}"
            results["runs"].append(run)
            save()
            print(f"{target} seed {seed}: val_loss {res.metrics['val_loss']:.3f}, copy {res.metrics['copy_acc']:.3f}, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
