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

from deviating.experiments.records import dumps, rounded

__all__ = ["WhatBreaksSizes", "PARTS", "OUT", "ORGANISMS", "eval_metrics", "item_counts", "evaluate_metrics",
           "averaging_part", "run_what_breaks", "merge_results"]

OUT = Path(__file__).resolve().parents[1] / "results" / "what_breaks.json"
PARTS = ("pruning", "averaging", "adversarial", "minilm")
ORGANISMS = ("organism", "organism-s1", "organism-s2")  # the three training seeds


@dataclass(frozen=True)
class WhatBreaksSizes:
    """The sizes of chapter 7's experiments (defaults: the shipped run).

    ``models``: the organisms the organism parts run on; ``eval_windows``: held-out evaluation
    windows (the averaging part uses all); ``prune_eval_windows``: the first that many of them
    evaluate the pruning curves, at ``counts`` heads removed; ``selection_windows`` (seed
    ``selection_seed``): the windows on which heads are ranked, of which the first
    ``iterative_windows`` rank the iterative order for ``iterative_steps`` removals;
    ``random_orders``: random orders (seeds 0, 1, ...), the control; ``ablation_modes``: the
    other ablations under which the mean order is measured again; ``specialist_windows``:
    evaluation windows of the specialist scores; ``adversarial_windows``: evaluation windows
    the attacked predictions come from, ``adversarial_targets`` per kind (agreement, copy), at
    most one per window first, attacked by a search of ``search_steps`` steps with
    ``search_top_k`` candidate tokens per slot; ``random_trigger_draws``: single random
    triggers per item whose flips and attention are recorded; ``calibration_seed``: the seed
    of the inspectors' calibration windows; ``minilm_counts``: MiniLM heads removed at each
    point of its curves; ``minilm_sentences``: use only the first that many English sentences
    (``None``: all); ``minilm_ablation_modes``: the other ablations of MiniLM's mean order.
    """

    models: tuple[str, ...] = ORGANISMS
    eval_windows: int = 96
    prune_eval_windows: int = 96
    counts: tuple[int, ...] = (*range(0, 21, 2), 24, 28, 32)
    selection_windows: int = 32
    selection_seed: int = -3
    iterative_windows: int = 8
    iterative_steps: int = 12
    random_orders: int = 3
    ablation_modes: tuple[str, ...] = ("mean", "resample")
    specialist_windows: int = 48
    adversarial_windows: int = 256
    adversarial_targets: int = 256
    search_steps: int = 6
    search_top_k: int = 4
    random_trigger_draws: int = 8
    calibration_seed: int = -4
    minilm_counts: tuple[int, ...] = tuple(range(0, 73, 2))
    minilm_sentences: int | None = None
    minilm_ablation_modes: tuple[str, ...] = ("mean",)


def eval_metrics(data, vocab) -> dict[str, tuple[Any, bool]]:
    """The average set and the tail subsets, as metrics on the evaluation windows ``data``
    (a :class:`~deviating.data.windows.LanguageEval`): name -> ``(metric, higher_is_better)``."""
    from headlab.metrics import agreement_metric, copy_metric, pronoun_metric
    from deviating.analysis.prune import window_loss

    n = len(data.windows)
    return {
        "loss": (window_loss, False),
        "agreement": (agreement_metric(data.agreement, vocab, n), True),
        "agreement, attractor": (agreement_metric([i for i in data.agreement if i.attractor], vocab, n), True),
        "pronoun, distractor": (pronoun_metric([i for i in data.pronoun if i.distractor], vocab, n), True),
        "copy in repeated spans": (copy_metric(data.copy, vocab, n), True),
        "rare-word copies": (copy_metric(data.rare, vocab, n), True),
    }


def item_counts(data) -> dict[str, int]:
    """How many items of each tail subset the evaluation windows ``data`` hold."""
    return {"agreement": len(data.agreement),
            "agreement, attractor": sum(i.attractor for i in data.agreement),
            "pronoun, distractor": sum(i.distractor for i in data.pronoun),
            "copy in repeated spans": len(data.copy), "rare-word copies": len(data.rare)}


def evaluate_metrics(hm, data, metrics, weights: dict[str, list[int]] | None = None) -> dict[str, Any]:
    """Each metric of ``metrics`` (:func:`eval_metrics`) averaged over the evaluation windows
    (items pooled: windows without items left out), in batches of 32 windows; with ``weights``
    (:func:`deviating.experiments.pruning.item_weights`) also ``"sums"``: per metric and window,
    the window's mean loss or its number of items right (for resampling windows)."""
    with torch.no_grad():
        out = torch.cat([hm.forward(data.ids[s:s + 32]) for s in range(0, len(data.ids), 32)])
    batch = {"input_ids": data.ids, "attention_mask": torch.ones_like(data.ids)}
    res: dict[str, Any] = {}
    sums = {}
    for name, (fn, _) in metrics.items():
        v = fn(out, batch).double()
        if weights is None:
            res[name] = float(v[~torch.isnan(v)].mean())
            continue
        w = torch.tensor(weights[name], dtype=torch.float64)
        s = torch.nan_to_num(v * w, nan=0.0)
        res[name] = float(s.sum() / w.sum())
        sums[name] = [round(float(x), 4) if name == "loss" else round(float(x)) for x in s]
    if weights is not None:
        res["sums"] = sums
    return res


def averaging_part(hm, task, data, vocab, sizes: WhatBreaksSizes = WhatBreaksSizes()) -> dict[str, Any]:
    """Layers averaged, removed, and random heads removed, on one organism (see the module docstring)."""
    from deviating.analysis.averaging import average_heads
    from deviating.analysis.specialists import specialists
    from deviating.experiments.pruning import item_weights

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
    import dataclasses

    import headlab
    from deviating.experiments.adversarial import adversarial_part
    from deviating.experiments.minilm_pruning import minilm_part
    from deviating.experiments.pruning import model_pruning
    from deviating.training.recipes import RECIPES

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
