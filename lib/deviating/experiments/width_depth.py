"""Chapter 8's width/depth/d_head sweep: trains the ``wd-*`` recipes and writes ``lib/deviating/results/width_depth.json``.

Every recipe of :data:`deviating.training.recipes.width_depth.WIDTH_DEPTH` (small GPTs on the
synthetic language at ``d_model = 64``, ``n_ctx = 64``, ``d_mlp = 256``) is trained at each seed
(:func:`run_sweep`), and its validation loss and per-phenomenon accuracies on the fixed evaluation
windows are recorded (:func:`run_one`), with the loss of each evaluation window
(:func:`window_losses`), so that differences between runs get intervals over windows (the same
windows for every run and seed). For a given seed every run sees the same token stream, so the
seed changes both the initialisation and the order of the data. ``scripts/width_depth.py`` is
the command line; :func:`merge_results` combines files made in parallel.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any, Iterable

import torch

from deviating.training.loop import train
from deviating.training.recipe import Recipe
from deviating.training.recipes.width_depth import WIDTH_DEPTH, WIDTH_DEPTH_STEPS, forward_flops_per_token
from headlab.metrics import next_token_loss
from headlab import stats
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["OUT", "KEPT", "run_one", "window_losses", "merge_results", "run_sweep", "narrow_head_row"]

OUT = Path(__file__).resolve().parents[1] / "results" / "width_depth.json"
KEPT = ("val_loss", "agreement_acc", "agreement_n", "pronoun_acc", "pronoun_n", "copy_acc", "copy_n",
        "rare_acc", "rare_n", "induction_best", "previous_token_best")


@torch.no_grad()
def window_losses(model, ids: torch.Tensor, batch_size: int = 64, digits: int = 5) -> list[float]:
    """The mean next-token loss (nats) of ``model`` on each window of ``ids`` ``(n_windows, n_ctx)``,
    rounded to ``digits``; their mean is the run's ``val_loss`` (every window has ``n_ctx - 1``
    predictions)."""

    if ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be (n_windows, n_ctx) with n_ctx >= 2; got shape {tuple(ids.shape)}")
    was_training = model.training
    model.eval()
    try:
        out = [next_token_loss(model(chunk.to(model.device)), chunk.to(model.device), reduction="input")
               for chunk in ids.split(batch_size)]
    finally:
        model.train(was_training)
    return [round(float(x), digits) for x in torch.cat(out).cpu()]


def run_one(recipe: Recipe, seed: int, steps: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Train one recipe at one seed (``steps``: default the recipe's); the row of the results file:
    geometry, tokens, FLOPs, parameters, the :data:`KEPT` final metrics, agreement by attractor,
    pronouns by distractor, the loss of each evaluation window (``window_losses``), the
    validation-loss curve and the seconds it took."""
    steps = recipe.steps if steps is None else steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = train(recipe, seed=seed, steps=steps, progress=progress)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    m = result.metrics
    config = recipe.config
    flops = forward_flops_per_token(config)
    tokens = steps * recipe.batch_size * config.n_ctx
    return {
        "name": recipe.name, "seed": seed, "n_layers": config.n_layers, "n_heads": config.n_heads,
        "d_head": config.d_head, "d_model": config.d_model, "steps": steps, "train_tokens": tokens,
        "forward_flops_per_token": flops, "train_flops": 3 * flops * tokens,
        "n_params": result.model.num_params(),
        "metrics": {k: round(m[k], 5) if isinstance(m[k], float) else m[k] for k in KEPT},
        "agreement_by_attractor": m["agreement_by"].get("attractor"),
        "pronoun_by_distractor": m["pronoun_by"].get("distractor"),
        "window_losses": window_losses(result.model, recipe.task.eval_data(recipe.eval_size).ids),
        "curve": [{"step": r["step"], "val_loss": round(r["val_loss"], 5)} for r in result.curve],
        "train_seconds": round(result.train_seconds, 1), "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1),
    }


def merge_results(paths: Iterable[str | Path], command: str) -> dict[str, Any]:
    """Combine results files made with the same fixed settings (e.g. one per seed, run in parallel).

    Raises:
        ValueError: the files were made with different fixed settings, or share a (recipe, seed) run.
    """
    parts = [json.loads(Path(p).read_text()) for p in paths]
    if any(p["fixed"] != parts[0]["fixed"] for p in parts):
        raise ValueError("the files were made with different fixed settings; they cannot be merged")
    out = dict(parts[0])
    out.pop("resumed_by", None)
    out["command"] = command
    out["sources"] = [{"command": p["command"], "resumed_by": p.get("resumed_by", []), "written_utc": p.get("written_utc"),
                       "runs": [f"{r['name']}/s{r['seed']}" for r in p["runs"]]} for p in parts]
    out["runs"] = [r for p in parts for r in p["runs"]]
    keys = [(r["name"], r["seed"]) for r in out["runs"]]
    if len(set(keys)) != len(keys):
        raise ValueError("the files share (recipe, seed) runs; merge files with different runs")
    out["seeds"] = sorted({r["seed"] for r in out["runs"]})
    out["total_wall_seconds"] = round(sum(p["total_wall_seconds"] for p in parts), 1)
    out["total_cpu_seconds"] = round(sum(p["total_cpu_seconds"] for p in parts), 1)
    out["written_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return out


def run_sweep(names: Iterable[str] | None = None, seeds: Iterable[int] = (0, 1), steps: int | None = None,
              out: str | Path = OUT, threads: int = 1, resume: bool = False, progress: bool = True,
              command: str = "python scripts/width_depth.py",
              recipes: dict[str, Recipe] | None = None) -> dict[str, Any]:
    """Train every (seed, recipe) pair and write the results to ``out`` after each run (partial results survive).

    Args:
        names: recipes to train (default: all of ``recipes``).
        seeds: training seeds.
        steps: override every recipe's steps (quick runs).
        out: the results file.
        threads: recorded as the torch thread count (set it before calling).
        resume: keep the runs already in ``out`` and train only the missing pairs.
        progress: progress bars, and a line per run.
        command: the command line recorded.
        recipes: the family (default :data:`~deviating.training.recipes.width_depth.WIDTH_DEPTH`).

    Raises:
        ValueError: an unknown recipe name, or ``resume`` on a file made with other fixed settings.
    """
    recipes = WIDTH_DEPTH if recipes is None else recipes
    names, seeds, out = list(names or recipes), list(seeds), Path(out)
    unknown = [n for n in names if n not in recipes]
    if unknown:
        raise ValueError(f"unknown recipe(s) {unknown}; the sweep has: {', '.join(recipes)}")
    first = recipes[names[0]]
    results: dict[str, Any] = {
        "description": ("chapter 8's width/depth/d_head sweep: small GPTs on the synthetic language at "
                        "d_model 64; validation loss and per-phenomenon accuracy on fixed evaluation windows"),
        "command": command,
        "seeds": seeds,
        "threads": threads,
        "fixed": {"d_model": first.config.d_model, "d_mlp": first.config.d_mlp, "n_ctx": first.config.n_ctx,
                  "batch_size": first.batch_size, "lr": first.lr, "warmup": first.warmup,
                  "steps": WIDTH_DEPTH_STEPS if steps is None else steps,
                  "eval_windows": first.eval_size, "data": first.task.describe()},
        "flops_definition": " ".join(forward_flops_per_token.__doc__.split()),
        "equalisation": ("width: equal tokens, steps and FLOPs (n_heads * d_head = d_model); depth: "
                         "equal tokens (wd-1l-4h, wd-2l-4h, wd-4l-4h) and equal training FLOPs "
                         "(wd-1l-4h-flops, wd-4l-4h-flops: steps scaled to the FLOPs of wd-2l-4h)"),
        "torch_version": torch.__version__, "python_version": platform.python_version(),
        "runs": [],
    }
    done = set()
    if resume and out.exists():
        old = json.loads(out.read_text())
        if old["fixed"] != results["fixed"]:
            raise ValueError(f"{out} was made with other fixed settings; run without resume")
        results["command"], results["runs"] = old["command"], old["runs"]
        results["resumed_by"] = old.get("resumed_by", []) + [command]
        results["seeds"] = sorted(set(old["seeds"]) | set(seeds))
        done = {(r["name"], r["seed"]) for r in old["runs"]}
        results["total_wall_seconds"], results["total_cpu_seconds"] = old["total_wall_seconds"], old["total_cpu_seconds"]
    t0 = time.perf_counter() - results.get("total_wall_seconds", 0)
    cpu0 = time.process_time() - results.get("total_cpu_seconds", 0)
    for seed in seeds:
        for name in names:
            if (name, seed) in done:
                continue
            row = run_one(recipes[name], seed, steps, progress=progress)
            results["runs"].append(row)
            if progress:
                print(json.dumps({k: row[k] for k in ("name", "seed", "steps", "cpu_seconds")} | row["metrics"]),
                      flush=True)
            results["total_wall_seconds"] = round(time.perf_counter() - t0, 1)
            results["total_cpu_seconds"] = round(time.process_time() - cpu0, 1)
            results["written_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
    return results


def narrow_head_row(runs: list[dict], reference: str = "wd-2l-1h", narrow_below: int = 32):
    """Claim C16 from the width runs: each narrow width (2 layers, ``d_head < narrow_below``) against
    the widest head (``reference``, ``d_head`` 64).

    On a seed where both runs recorded ``window_losses``, the measurement is the paired difference
    of the validation loss over the evaluation windows (:func:`headlab.stats.paired_difference`; the
    same windows for every run), one per seed. Where they did not (runs made before the windows
    were recorded), the per-seed differences of the validation loss are pooled over those seeds
    with :func:`headlab.stats.over_seeds` (condition "..., over seeds"; at least two seeds).

    Returns:
        A :class:`deviating.verdicts.ClaimRow`: effect = loss(narrow) - loss(widest), nats; the claim
        predicts > 0. The primary endpoint is the first narrow width listed, d_head 16 (not the most
        extreme, d_head 2; set in the ledger's second audit, after the runs were seen).

    Raises:
        ValueError: no narrow width measured against the reference on any seed.
    """

    by = {(r["name"], r["seed"]): r for r in runs}
    ref = {seed: r for (name, seed), r in by.items() if name == reference}
    narrow = sorted({(r["d_head"], r["name"]) for r in runs
                     if r["n_layers"] == 2 and not r["name"].endswith("-flops") and r["d_head"] < narrow_below},
                    reverse=True)
    ms = []
    for d_head, name in narrow:
        condition, plain = f"d_head {d_head} vs 64", []
        for seed in sorted(ref):
            run, base = by.get((name, seed)), ref[seed]
            if run is None:
                continue
            diff = run["metrics"]["val_loss"] - base["metrics"]["val_loss"]
            if run.get("window_losses") and base.get("window_losses"):
                est = stats.paired_difference(run["window_losses"], base["window_losses"], seed=seed)
                ms.append(Measurement.from_estimate(est, condition, seed))
            else:
                plain.append(diff)
        if len(plain) > 1:
            ms.append(Measurement.from_estimate(stats.over_seeds(plain), f"{condition}, over seeds",
                                                df=len(plain) - 1))
    if not ms:
        raise ValueError(f"no run with d_head < {narrow_below} measured against {reference} on a common seed")
    return ClaimRow("C16", "GPTs at d_model 64 on the synthetic language, 2 layers, equal compute",
                    "validation loss of narrow heads minus one head of 64 (nats)", 0.0,
                    "the widest head (d_head 64)", "greater", tuple(ms), unit="nats",
                    note="paired over the evaluation windows where recorded, else over seeds; short training runs; "
                         "the primary endpoint is the first narrow width listed, not the most extreme")
