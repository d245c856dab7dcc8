"""Chapter 7's experiments, "What breaks when specialisation is ignored", on the organism (and MiniLM).

:func:`run_what_breaks` computes the parts named and writes them to ``lib/headlab/results/what_breaks.json``
(``scripts/what_breaks.py`` is its command line); the chapter reads that file. Every size is a
field of :class:`WhatBreaksSizes` (defaults: the shipped run). Parts:

* ``pruning`` (:func:`pruning_part`): per-head loss effects on the selection windows give
  one-shot orders by mean and by worst-case (largest per-window) effect; an iterative order
  (mean, recomputed after each removal, on a few of those windows, for the first heads); random
  orders. Each order is evaluated on the first held-out evaluation windows at every count, on the
  mean loss and on the tail subsets' item accuracies (:func:`headlab.analysis.prune.pruning_curve_shared`).
* ``averaging`` (:func:`averaging_part`): every layer in turn with its heads' outputs replaced by
  the layer mean, its heads given the layer's mean pattern (:mod:`headlab.analysis.averaging`),
  zero-ablated, and ``n_heads`` random heads of the whole model zero-ablated (three draws): loss
  and accuracies on the evaluation windows, and the specialist scores of every head when a layer
  is averaged.
* ``adversarial`` (:func:`headlab.experiments.adversarial.adversarial_part`): trigger search
  against agreement and copy predictions, its random control, the captured head, detection.
* ``minilm`` (:func:`headlab.experiments.minilm_pruning.minilm_part`): the pruning curves on
  all-MiniLM-L6-v2 and the hand-annotated English sentences, with its own provenance.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from headlab.experiments.records import rounded

__all__ = ["WhatBreaksSizes", "PARTS", "OUT", "eval_metrics", "item_counts", "evaluate_metrics", "pruning_part",
           "averaging_part", "run_what_breaks"]

OUT = Path(__file__).resolve().parents[1] / "results" / "what_breaks.json"
PARTS = ("pruning", "averaging", "adversarial", "minilm")


@dataclass(frozen=True)
class WhatBreaksSizes:
    """The sizes of chapter 7's experiments (defaults: the shipped run).

    ``eval_windows``: held-out evaluation windows of the organism (the averaging part uses all);
    ``prune_eval_windows``: the first that many of them evaluate the pruning curves, at ``counts``
    heads removed; ``selection_windows`` (seed ``selection_seed``): the windows on which heads are
    ranked, of which the first ``iterative_windows`` rank the iterative order for
    ``iterative_steps`` removals; ``random_orders``: random orders (seeds 0, 1, ...), the control;
    ``specialist_windows``: evaluation windows of the specialist scores; ``adversarial_targets``:
    attacked predictions per kind (agreement, copy), by a search of ``search_steps`` steps with
    ``search_top_k`` candidate tokens per slot; ``calibration_seed``: the seed of the detection's
    calibration windows; ``minilm_counts``: MiniLM heads removed at each point of its curves;
    ``minilm_sentences``: use only the first that many English sentences (``None``: all).
    """

    eval_windows: int = 64
    prune_eval_windows: int = 48
    counts: tuple[int, ...] = (*range(0, 17, 2), 20, 24, 28, 32)
    selection_windows: int = 32
    selection_seed: int = -3
    iterative_windows: int = 8
    iterative_steps: int = 12
    random_orders: int = 3
    specialist_windows: int = 48
    adversarial_targets: int = 64
    search_steps: int = 6
    search_top_k: int = 4
    calibration_seed: int = -4
    minilm_counts: tuple[int, ...] = tuple(range(0, 73, 2))
    minilm_sentences: int | None = None


def eval_metrics(data, vocab) -> dict[str, tuple[Any, bool]]:
    """The average set and the tail subsets, as metrics on the evaluation windows ``data``
    (a :class:`~headlab.data.windows.LanguageEval`): name -> ``(metric, higher_is_better)``."""
    from headlab.metrics import agreement_metric, copy_metric, pronoun_metric
    from headlab.analysis.prune import window_loss

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


def pruning_part(hm, task, data, vocab, sizes: WhatBreaksSizes = WhatBreaksSizes()) -> dict[str, Any]:
    """The pruning curves of the organism (see the module docstring)."""
    from headlab.analysis.prune import iterative_order, order_by, pruning_curve_shared, random_order
    from headlab.analysis.sweep import sweep
    from headlab.metrics import Metric
    from headlab.data.language import encode

    select = task.windows(sizes.selection_windows, seed=sizes.selection_seed)
    sel_ids = encode(hm.tokenizer, select)
    effects = sweep(hm, sel_ids, metric=Metric("loss")).effects  # (head, window), layer-major
    mean = effects.mean(1).reshape(hm.n_layers, hm.n_heads)
    worst = effects.max(1).values.reshape(hm.n_layers, hm.n_heads)
    orders = {"mean (one-shot)": order_by(mean), "worst case (one-shot)": order_by(worst)}
    t0 = time.perf_counter()
    orders["mean (iterative)"] = iterative_order(hm, sel_ids[:sizes.iterative_windows], by="mean", metric=Metric("loss"),
                                                 stop_after=sizes.iterative_steps)
    iterative_seconds = time.perf_counter() - t0
    for seed in range(sizes.random_orders):
        orders[f"random (seed {seed})"] = random_order(hm, seed=seed)
    n = sizes.prune_eval_windows
    sub = dataclasses.replace(data, windows=data.windows[:n], ids=data.ids[:n],
                              **{k: [i for i in getattr(data, k) if i.doc < n]
                                 for k in ("agreement", "pronoun", "copy", "rare")})
    metrics = eval_metrics(sub, vocab)
    counts = list(sizes.counts)
    curves = {}
    for name, order in orders.items():
        curve = pruning_curve_shared(hm, order, sub.ids, metrics, counts=counts)
        curves[name] = {"order": [list(h) for h in order],
                        "mean": {k: [float(x) for x in curve.mean(k)] for k in metrics}}
    return {"selection": {"n_windows": sizes.selection_windows, "seed": sizes.selection_seed,
                          "iterative_windows": sizes.iterative_windows, "iterative_steps": sizes.iterative_steps},
            "eval_windows": n, "importance_mean": mean.tolist(), "importance_worst": worst.tolist(),
            "iterative_seconds": iterative_seconds, "counts": counts, "item_counts": item_counts(sub),
            "higher_is_better": {k: v[1] for k, v in metrics.items()}, "curves": curves}


def evaluate_metrics(hm, data, metrics) -> dict[str, float]:
    """Each metric of ``metrics`` (:func:`eval_metrics`) averaged over the evaluation windows
    (NaN entries, inputs a metric has no item in, left out), in batches of 32 windows."""
    with torch.no_grad():
        out = torch.cat([hm.forward(data.ids[s:s + 32]) for s in range(0, len(data.ids), 32)])
    batch = {"input_ids": data.ids, "attention_mask": torch.ones_like(data.ids)}
    res = {}
    for name, (fn, _) in metrics.items():
        v = fn(out, batch)
        res[name] = float(v[~torch.isnan(v)].mean())
    return res


def averaging_part(hm, task, data, vocab, sizes: WhatBreaksSizes = WhatBreaksSizes()) -> dict[str, Any]:
    """Layers averaged, removed, and random heads removed (see the module docstring)."""
    from headlab.analysis.averaging import average_heads
    from headlab.analysis.specialists import specialists

    metrics = eval_metrics(data, vocab)
    spec_windows = data.windows[:sizes.specialist_windows]

    def spec() -> dict[str, list]:
        return {k: v.tolist() for k, v in specialists(hm, spec_windows).items()}

    rows = {"clean": evaluate_metrics(hm, data, metrics)}
    scores = {"clean": spec()}
    for layer in range(hm.n_layers):
        with average_heads(hm, [layer], what="z"):
            rows[f"layer {layer}: mean output"] = evaluate_metrics(hm, data, metrics)
            scores[f"layer {layer}: mean output"] = spec()
        with average_heads(hm, [layer], what="pattern"):
            rows[f"layer {layer}: mean pattern"] = evaluate_metrics(hm, data, metrics)
        with hm.ablate([(layer, h) for h in range(hm.n_heads)]):
            rows[f"layer {layer}: removed"] = evaluate_metrics(hm, data, metrics)
    for seed in range(3):
        heads = random.Random(seed).sample(hm.heads(), hm.n_heads)
        with hm.ablate(heads):
            rows[f"{hm.n_heads} random heads removed (seed {seed})"] = evaluate_metrics(hm, data, metrics)
    return {"rows": rows, "specialists": scores, "specialist_windows": len(spec_windows)}


def run_what_breaks(parts=PARTS, out: str | Path | None = OUT, model: str = "organism",
                    sizes: WhatBreaksSizes = WhatBreaksSizes(), command: str = "python scripts/what_breaks.py",
                    progress: bool = True) -> dict[str, Any]:
    """Compute ``parts`` (of :data:`PARTS`) and return the results, written to ``out`` after each part.

    The parts already in ``out`` and not named are kept. The organism parts share the file's
    top-level provenance (``command``, ``model``, ``eval_windows``, ``item_counts``, versions);
    ``minilm`` has its own. Each part gets its ``seconds``; floats are rounded to 4 digits (6 for
    ``minilm``). Torch's global generator is seeded with 0 first.

    Args:
        parts: which parts to compute.
        out: the results file (``None``: write nothing).
        model: the organism the organism parts run on.
        sizes: every size of the experiments.
        command: the command line recorded.
        progress: print a line per part.
    """
    import headlab
    from headlab.experiments.adversarial import adversarial_part
    from headlab.experiments.minilm_pruning import minilm_part
    from headlab.training.recipes import RECIPES

    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    runners = {"pruning": pruning_part, "averaging": averaging_part,
               "adversarial": lambda *args: adversarial_part(*args, progress=progress)}
    torch.manual_seed(0)
    out = None if out is None else Path(out)
    results = json.loads(out.read_text()) if out is not None and out.is_file() else {}
    if any(p in runners for p in parts):
        hm = headlab.load(model)
        task = RECIPES[model].task
        data = task.eval_data(sizes.eval_windows)
        vocab = hm.tokenizer.get_vocab()
        results.update({"command": command, "model": model, "eval_windows": sizes.eval_windows,
                        "item_counts": item_counts(data), "torch_version": torch.__version__,
                        "python_version": platform.python_version()})
    for part in parts:
        t0 = time.perf_counter()
        if part == "minilm":
            value = minilm_part(sizes, command=command, progress=progress)
        else:
            value = runners[part](hm, task, data, vocab, sizes)
        value["seconds"] = time.perf_counter() - t0
        results[part] = rounded(value, 6 if part == "minilm" else 4)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=1) + "\n")
        if progress:
            print(f"{part}: {value['seconds']:.0f} s", flush=True)
    return results
