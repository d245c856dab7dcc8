"""Chapter 7's experiments, "What breaks when specialisation is ignored", on the organism seeds (and MiniLM).

:func:`run_what_breaks` computes the parts named and writes them to ``lib/deviating/results/what_breaks.json``
(``scripts/what_breaks.py`` is its command line); the chapter reads that file. Every size is a
field of :class:`WhatBreaksSizes` (defaults: the shipped run). The organism parts run on every
model of ``sizes.models`` (the organism's three training seeds) and store one record per model.
Parts:

* ``pruning`` (:func:`deviating.experiments.pruning.model_pruning`): orders by mean, worst-case
  and iterative importance, random orders, and the mean order under mean and resample
  ablation, each evaluated on the held-out windows at every count, stored per window.
* ``averaging`` (:func:`averaging_part`): every layer in turn with its heads' outputs replaced by
  the layer mean, its heads given the layer's mean pattern (:mod:`deviating.analysis.averaging`),
  zero-ablated, and ``n_heads`` random heads of the whole model zero-ablated (three draws): loss
  and accuracies per evaluation window, and the specialist scores of every head when a layer
  is averaged.
* ``adversarial`` (:func:`deviating.experiments.adversarial.adversarial_part`): trigger search
  against agreement and copy predictions, random triggers with the same budget and single
  random triggers (their flips and the attention they draw), the inspectors' scores per item.
* ``minilm`` (:func:`deviating.experiments.minilm_pruning.minilm_part`): the pruning curves on
  all-MiniLM-L6-v2 and the hand-annotated English sentences, with its own provenance.
"""

from __future__ import annotations

import json
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from deviating.analysis.averaging import average_heads
from deviating.analysis.specialists import specialists
from deviating.experiments.adversarial import adversarial_part
from deviating.experiments.minilm_pruning import minilm_part
from deviating.experiments.pruning import item_weights, model_pruning
from deviating.experiments.records import dumps, rounded
from deviating.experiments.what_breaks_setup import (
    ORGANISMS, OUT, PARTS, WhatBreaksSizes, eval_metrics, evaluate_metrics, item_counts,
)
from deviating.training.recipes import RECIPES
import dataclasses
import headlab

__all__ = ["WhatBreaksSizes", "PARTS", "OUT", "ORGANISMS", "eval_metrics", "item_counts", "evaluate_metrics",
           "averaging_part", "run_what_breaks", "merge_results"]

def averaging_part(hm, task, data, vocab, sizes: WhatBreaksSizes = WhatBreaksSizes()) -> dict[str, Any]:
    """Layers averaged, removed, and random heads removed, on one organism (see the module docstring)."""

    metrics = eval_metrics(data, vocab)
    weights = item_weights(metrics, len(data.windows))
    spec_windows = data.windows[:sizes.specialist_windows]

    def spec() -> dict[str, list]:
        return {k: v.tolist() for k, v in specialists(hm, spec_windows).items()}

    def evaluate() -> dict[str, Any]:
        return evaluate_metrics(hm, data, metrics, weights)

    rows = {"clean": evaluate()}
    scores = {"clean": spec()}
    for layer in range(hm.n_layers):
        with average_heads(hm, [layer], what="z"):
            rows[f"layer {layer}: mean output"] = evaluate()
            scores[f"layer {layer}: mean output"] = spec()
        with average_heads(hm, [layer], what="pattern"):
            rows[f"layer {layer}: mean pattern"] = evaluate()
        with hm.ablate([(layer, h) for h in range(hm.n_heads)]):
            rows[f"layer {layer}: removed"] = evaluate()
    for seed in range(3):
        heads = random.Random(seed).sample(hm.heads(), hm.n_heads)
        with hm.ablate(heads):
            rows[f"{hm.n_heads} random heads removed (seed {seed})"] = evaluate()
    return {"rows": rows, "items_per_window": weights, "specialists": scores,
            "specialist_windows": len(spec_windows)}


def run_what_breaks(parts=PARTS, out: str | Path | None = OUT, sizes: WhatBreaksSizes = WhatBreaksSizes(),
                    command: str = "python scripts/what_breaks.py", progress: bool = True) -> dict[str, Any]:
    """Compute ``parts`` (of :data:`PARTS`) and return the results, written to ``out`` after each
    part and model.

    The parts already in ``out`` and not named are kept. Each organism part holds one record per
    model of ``sizes.models`` (``results[part]["models"][name]``) and the settings it ran with;
    ``minilm`` has its own provenance. Each part and model gets its ``seconds``; floats are
    rounded to 4 digits (6 for ``minilm``). Torch's global generator is seeded with 0 before
    each model.

    Args:
        parts: which parts to compute.
        out: the results file (``None``: write nothing).
        sizes: every size of the experiments, and the models.
        command: the command line recorded.
        progress: print a line per part and model.
    """


    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    bad = [m for m in sizes.models if m not in RECIPES]
    if bad:
        raise ValueError(f"unknown model(s) {bad}: give organisms of the recipe registry, e.g. {', '.join(ORGANISMS)}")
    runners = {"pruning": model_pruning, "averaging": averaging_part,
               "adversarial": lambda *args: adversarial_part(*args, progress=progress)}
    out = None if out is None else Path(out)
    results = json.loads(out.read_text()) if out is not None and out.is_file() else {}
    results.update({"command": command, "torch_version": torch.__version__,
                    "python_version": platform.python_version()})
    results["commands"] = [*results.get("commands", []), command]  # every run that wrote into this file

    def write() -> None:
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(dumps(results) + "\n")

    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(sizes).items()}
    for part in parts:
        t0 = time.perf_counter()
        if part == "minilm":
            value = minilm_part(sizes, command=command, progress=progress)
            value["seconds"] = time.perf_counter() - t0
            results[part] = rounded(value, 6)
            write()
        else:
            record: dict[str, Any] = {"settings": settings, "models": {}}
            results[part] = record
            for name in sizes.models:
                t1 = time.perf_counter()
                torch.manual_seed(0)
                hm = headlab.load(name)
                task = RECIPES[name].task
                data = task.eval_data(sizes.eval_windows)
                value = runners[part](hm, task, data, hm.tokenizer.get_vocab(), sizes)
                value["seconds"] = time.perf_counter() - t1
                record["models"][name] = rounded(value, 4)
                write()
                if progress:
                    print(f"{part} {name}: {value['seconds']:.0f} s", flush=True)
            record["seconds"] = time.perf_counter() - t0
            write()
        if progress:
            print(f"{part}: {time.perf_counter() - t0:.0f} s", flush=True)
    return results


def merge_results(paths, out: str | Path | None = OUT) -> dict[str, Any]:
    """Merge results files of runs split over processes or machines (e.g. one organism seed
    each) into one: an organism part's models are united (later files win for a model both
    hold, and must have run with the same settings); ``minilm`` is taken from the last file
    holding it; the commands are kept in order under ``"commands"``. Written to ``out``."""
    merged: dict[str, Any] = {"commands": []}
    for path in paths:
        data = json.loads(Path(path).read_text())
        merged["commands"].append(data.get("command", ""))
        for key in ("torch_version", "python_version"):
            merged[key] = data.get(key)
        for part in PARTS:
            if part not in data:
                continue
            if part == "minilm":
                merged[part] = data[part]
                continue
            record = merged.setdefault(part, {"settings": data[part]["settings"], "models": {}, "seconds": 0.0})
            mine = {k: v for k, v in data[part]["settings"].items() if k != "models"}
            theirs = {k: v for k, v in record["settings"].items() if k != "models"}
            if mine != theirs:
                raise ValueError(f"{path}: part {part!r} ran with other settings than the files before it; "
                                 "merge only runs of the same sizes")
            record["models"].update(data[part]["models"])
            record["seconds"] += data[part].get("seconds", 0.0)
            record["settings"] = {**record["settings"], "models": list(record["models"])}
    merged["command"] = " ; ".join(c for c in merged["commands"] if c)
    if out is not None:
        Path(out).write_text(dumps(merged) + "\n")
    return merged
