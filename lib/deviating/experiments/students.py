"""Chapter 7's distillation students, and what survives of the teacher's heads in them.

The teacher is ``organism-small-s0`` (2 layers x 4 heads); each student follows the
``distill-student`` recipe (:mod:`deviating.training.recipes.students`: same layers and heads, half
the width) and is trained by :func:`deviating.training.distill.distill` with the next-token loss plus
``weight`` x the attention-transfer loss towards one target (``none``, ``mean``, ``mean_to_mean``,
``per_head``): same seed, same steps, same batches for every target. :func:`distill_students`
records, for each student (and the teacher), the final metrics of the task's evaluation and the
per-head specialist scores (:func:`deviating.analysis.specialists.specialists`) on held-out windows,
and writes them with the command, the recipe and the timings to
``lib/deviating/results/distillation.json`` (``scripts/distill_students.py`` is its command line).
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from deviating.experiments.records import rounded
from deviating.training.recipe import Recipe
from deviating.analysis.specialists import specialists
import headlab
from headlab.models.checkpoints import save_checkpoint
from deviating.training.distill import TRANSFER_TARGETS, distill
from deviating.training.recipes import RECIPES

__all__ = ["RESULTS", "TEACHER", "SPECIALIST_WINDOWS", "SPECIALIST_SEED", "specialist_grids", "distill_students"]

RESULTS = Path(__file__).resolve().parents[1] / "results"
TEACHER = "organism-small-s0"
SPECIALIST_WINDOWS = 128  # held-out windows on which the specialist scores are measured
SPECIALIST_SEED = -2  # never drawn by training (seeds >= 0) or by the evaluation (-1)


def _same_setting(key: str, old, new) -> bool:
    """Whether a stored setting equals the current one; a recipe's description is prose, not a
    setting (renaming a chapter must not retrain its students)."""
    if key == "recipe" and isinstance(old, dict) and isinstance(new, dict):
        return {k: v for k, v in old.items() if k != "description"} == {k: v for k, v in new.items() if k != "description"}
    return old == new


def specialist_grids(hm, windows, tokenizer) -> dict[str, list[list[float]]]:
    """:func:`~deviating.analysis.specialists.specialists` as ``(layer, head)`` lists rounded to 4 digits."""

    return {name: [[round(float(v), 4) for v in row] for row in grid]
            for name, grid in specialists(hm, windows, tokenizer).items()}


def distill_students(targets: Iterable[str] = ("none", "mean", "mean_to_mean", "per_head"),
                     seeds: Iterable[int] = (0, 1), steps: int | None = None, weight: float = 1.0,
                     out: str | Path = RESULTS / "distillation.json", checkpoints: str | Path | None = RESULTS,
                     command: str = "python scripts/distill_students.py", recipe: Recipe | None = None,
                     teacher: str = TEACHER, specialist_windows: int = SPECIALIST_WINDOWS,
                     progress: bool = True) -> dict[str, Any]:
    """Train a student per (seed, target) and write the results to ``out`` after each.

    Runs already in ``out`` with the same settings are kept and skipped, so an interrupted run
    resumes where it stopped.

    Args:
        targets: transfer targets (:data:`deviating.training.distill.TRANSFER_TARGETS`).
        seeds: training seeds.
        steps: default the recipe's.
        weight: the transfer term's weight (0 for ``none``).
        out: the results file.
        checkpoints: save each student (safetensors + provenance) to
            ``checkpoints/distill-<target>-s<seed>/`` (``None``: do not).
        command: the command line recorded.
        recipe: the student's recipe (default ``RECIPES["distill-student"]``).
        teacher: the teacher organism's name.
        specialist_windows: held-out windows (seed :data:`SPECIALIST_SEED`) of the specialist scores.
        progress: a line per evaluation and per student.
    """

    targets, seeds, out = list(targets), list(seeds), Path(out)
    unknown = [t for t in targets if t not in TRANSFER_TARGETS]
    if unknown:
        raise ValueError(f"unknown targets {unknown}; choose from {TRANSFER_TARGETS}")
    recipe = RECIPES["distill-student"] if recipe is None else recipe
    steps = steps or recipe.steps
    hm_teacher = headlab.load(teacher)
    task = recipe.task
    held_out = task.windows(specialist_windows, seed=SPECIALIST_SEED)
    settings = {"teacher": teacher, "recipe": recipe.to_dict(), "steps": steps, "weight": weight,
                "specialist_windows": {"n": specialist_windows, "seed": SPECIALIST_SEED}}
    results: dict[str, Any] = {"command": command.strip(), **settings, "teacher_metrics": None,
                               "teacher_specialists": None, "runs": []}
    if out.is_file():
        old = json.loads(out.read_text())
        if all(_same_setting(k, old.get(k), v) for k, v in settings.items()):
            for key in ("runs", "teacher_metrics", "teacher_specialists"):
                results[key] = old.get(key, results[key])

    def save() -> None:
        results["torch_version"], results["python_version"] = torch.__version__, platform.python_version()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")

    if results["teacher_metrics"] is None:
        results["teacher_metrics"] = rounded(task.evaluate(hm_teacher.model, task.eval_data(recipe.eval_size)))
        results["teacher_specialists"] = specialist_grids(hm_teacher, held_out, hm_teacher.tokenizer)
        save()
    done = {(r["target"], r["seed"]) for r in results["runs"]}
    for seed in seeds:
        for target in targets:
            if (target, seed) in done:
                if progress:
                    print(f"skip {target} seed {seed}: already in {out}", flush=True)
                continue
            t0 = time.perf_counter()
            res = distill(recipe, hm_teacher, target=target, weight=weight if target != "none" else 0.0,
                          seed=seed, steps=steps, progress=False,
                          log=(lambda line: print(line[:160], flush=True)) if progress else None)
            student = headlab.HeadModel(res.model, res.tokenizer, name=f"distill-{target}-s{seed}")
            run = {"target": target, "seed": seed, **{k: res.info[k] for k in ("weight", "train_seconds", "cpu_seconds")},
                   "metrics": rounded(res.metrics), "specialists": specialist_grids(student, held_out, res.tokenizer),
                   "curve": rounded(res.curve)}
            if checkpoints is not None:
                folder = Path(checkpoints) / f"distill-{target}-s{seed}"
                save_checkpoint(folder, res.model, res.tokenizer, {
                    "name": folder.name, "description": f"chapter 7 student, attention transfer target {target!r}",
                    "command": command.strip(), "teacher": teacher, "target": target,
                    "weight": run["weight"], "seed": seed, "steps": steps, "config": recipe.config.to_dict(),
                    "recipe": {k: v for k, v in recipe.to_dict().items() if k not in ("config", "task")},
                    "final_metrics": run["metrics"], "train_seconds": run["train_seconds"],
                    "cpu_seconds": run["cpu_seconds"], "torch_version": torch.__version__})
                run["checkpoint"] = f"deviating/results/{folder.name}"
            results["runs"].append(run)
            save()
            if progress:
                print(f"{target} seed {seed}: val_loss {res.metrics['val_loss']:.3f}, copy {res.metrics['copy_acc']:.3f}, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    return results
