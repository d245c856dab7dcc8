"""A training run saved as a checkpoint, and the ``train`` command that makes one.

    python -m deviating train attn-only-2l --seed 0 --out lib/headlab/checkpoints/attn-only-2l

trains any recipe of :data:`deviating.training.recipes.RECIPES` (every shipped checkpoint, the
width/depth family, the distillation student) with :func:`deviating.training.loop.train`, and
saves it with :func:`save_run`: weights, tokenizer, provenance (command, seed, config, data,
final metrics, timings, versions, sha256) and the evaluation curve.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
from pathlib import Path
from typing import Any

import torch

from headlab.models.checkpoints import save_checkpoint
from deviating.training.loop import TrainResult, train
from deviating.training.recipe import Recipe
from deviating.figures.training import plot_curve
from deviating.training.recipes import RECIPES

__all__ = ["save_run", "add_commands"]


def save_run(result: TrainResult, recipe: Recipe, out: str | Path, command: str) -> dict[str, Any]:
    """Save a training run as a checkpoint (:func:`headlab.models.gpt.save_checkpoint`) with
    its loss curve (``loss_curve.json``, ``loss_curve.png``); returns the provenance written."""
    out = Path(out)
    provenance = {
        "name": recipe.name,
        "description": recipe.description,
        "command": command,
        "seed": result.info["seed"],
        "steps": result.info["steps"],
        "device": result.info["device"],
        "threads": torch.get_num_threads(),
        "config": recipe.config.to_dict(),
        "n_params": result.model.num_params(),
        "data": {**recipe.task.describe(), "eval_size": recipe.eval_size},
        "recipe": {k: v for k, v in recipe.to_dict().items() if k not in ("config", "task", "name", "description")},
        "final_metrics": result.metrics,
        **({"averaged_steps": result.info["averaged_steps"],
            "unaveraged_metrics": result.info["unaveraged_metrics"]} if "averaged_steps" in result.info else {}),
        "phase_change": result.phase_change,
        "train_seconds": round(result.train_seconds, 2),
        # CPU time of this process: on a shared machine, a steadier measure of cost than wall-clock
        "cpu_seconds": result.info.get("cpu_seconds"),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
    if recipe.average_share:  # which of a run's two sets of weights this checkpoint holds
        provenance["weights"] = ("the uniform average of averaged_steps" if "averaged_steps" in result.info
                                 else "after the last step, not averaged")
    if hasattr(recipe.task, "phase_change"):
        provenance["phase_change_definition"] = " ".join(recipe.task.phase_change.__doc__.split())
    provenance = save_checkpoint(out, result.model, result.tokenizer, provenance)
    (out / "loss_curve.json").write_text(json.dumps(result.curve, indent=1) + "\n")
    averaged = ({**result.info["averaged_steps"], "metrics": result.metrics}
                if "averaged_steps" in result.info else None)
    plot_curve(result.curve, out / "loss_curve.png", title=recipe.name, phase_change=result.phase_change,
               averaged=averaged)
    return provenance


def add_commands(subparsers) -> None:
    """Add the ``train`` command to ``python -m headlab``'s sub-parsers."""
    p = subparsers.add_parser("train", help="train a model from its recipe and save a checkpoint",
                              description="Train a named recipe of deviating.training.recipes.RECIPES: every shipped "
                                          "checkpoint, the width/depth family (the wd- recipes), the distillation student.")
    p.add_argument("name", help="recipe name, e.g. attn-only-2l, organism, two-relations-2h-s0, heads-4, wd-2l-4h")
    p.add_argument("--seed", type=int, default=None, help="training seed (default: the recipe's)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps (default: the recipe's; the learning-rate schedule stretches to fit)")
    p.add_argument("--out", default=None, help="checkpoint folder (default: runs/NAME)")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda", "mps"],
                   help="cpu (default: the shipped checkpoints were trained there), auto, cuda or mps")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared machine more threads can be much slower)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--unaveraged-out", default=None, metavar="DIR",
                   help="for a recipe that averages weights (average_share): also save the weights after the "
                        "last step, before averaging, as a checkpoint in DIR (to compare the two)")
    p.add_argument("--log", default=None, metavar="FILE",
                   help="append each evaluation (a JSON line: step, losses, the recipe's metrics) to FILE as "
                        "it happens, to follow a long run")
    p.set_defaults(func=_train_command)


def _train_command(args) -> int:
    if args.name not in RECIPES:
        print(f"unknown recipe {args.name!r}; recipes: {', '.join(RECIPES)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda asked for, but no CUDA device is available; use --device cpu", file=sys.stderr)
        return 2
    recipe = RECIPES[args.name]
    seed = recipe.seed if args.seed is None else args.seed
    steps = recipe.steps if args.steps is None else args.steps
    out = args.out or f"runs/{args.name}"
    if args.unaveraged_out is not None and not recipe.average_share:
        print(f"--unaveraged-out {args.unaveraged_out}: recipe {args.name!r} does not average weights "
              f"(average_share 0), so there is nothing but one set of weights to save; drop the option",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    command = (f"python -m deviating train {args.name} --seed {seed} --steps {steps} "
               f"--device {args.device} --threads {args.threads} --out {out}")
    log = None
    if args.log is not None:
        log_path = Path(args.log)
        if not log_path.parent.is_dir():
            print(f"--log {args.log}: the folder {str(log_path.parent)!r} does not exist; create it first",
                  file=sys.stderr)
            return 2

        def log(line: str) -> None:
            with open(log_path, "a") as f:
                f.write(line + "\n")
    result = train(recipe, seed=seed, steps=steps, device=args.device, progress=not args.no_progress, log=log)
    provenance = save_run(result, recipe, out, command)
    if args.unaveraged_out is not None:
        plain = dataclasses.replace(result, model=result.unaveraged, metrics=result.info["unaveraged_metrics"],
                                    info={k: v for k, v in result.info.items()
                                          if k not in ("averaged_steps", "unaveraged_metrics")})
        save_run(plain, recipe, args.unaveraged_out, command + f" --unaveraged-out {args.unaveraged_out}")
    summary = {k: v for k, v in provenance["final_metrics"].items() if not isinstance(v, list) or k.endswith("_head")}
    print(json.dumps({"name": recipe.name, "out": str(out), "train_seconds": provenance["train_seconds"],
                      "phase_change": provenance["phase_change"], "final_metrics": summary}, indent=1))
    return 0
