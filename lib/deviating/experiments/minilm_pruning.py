"""Chapter 7's pruning on a real model (the ``minilm`` part of :func:`deviating.experiments.what_breaks.run_what_breaks`).

The pruning curves on all-MiniLM-L6-v2 (6 x 12 heads) and the hand-annotated English sentences
(:func:`deviating.data.language.load_english`). The sentences are split in two halves, stratified by
construction (seed :data:`MINILM_SPLIT_SEED`): per-head importance (zero ablation,
``kind="cosine"``: 1 - cosine of the mean-pooled embedding to the clean one) on the *selection*
half gives orders by mean and by worst-case (largest per-sentence) effect; three random orders
are the control; under each of ``sizes.minilm_ablation_modes`` (reference: the selection half)
the mean order is measured again, importance and curve both under that ablation. Every order
is evaluated on the *held-out* half at every count, per sentence, so that the chapter can
average over all sentences or over one construction.
"""

from __future__ import annotations

import datetime
import platform
import random
import time
from typing import Any

import torch

from headlab.analysis.importance import head_importance
from headlab.analysis.prune import EvalSet, order_by, pruning_curve, random_order
from deviating.data.language import load_english
from headlab.heads.ablation import Ablation
from headlab.metrics import Metric, mean_pool
from deviating.experiments.what_breaks_setup import WhatBreaksSizes
import headlab

__all__ = ["MINILM_SPLIT_SEED", "MINILM_RANDOM_SEEDS", "split_by_construction", "minilm_part"]

MINILM_SPLIT_SEED = 0
MINILM_RANDOM_SEEDS = (0, 1, 2)


def split_by_construction(sentences, seed: int) -> tuple[list[int], list[int]]:
    """Indices of two halves of ``sentences``, each construction split as evenly as it can be
    (the odd one out goes to the selection half), after a seeded shuffle within the construction."""
    rng = random.Random(seed)
    select, held = [], []
    by_kind: dict[str, list[int]] = {}
    for i, s in enumerate(sentences):
        by_kind.setdefault(s.construction, []).append(i)
    for kind in sorted(by_kind):
        idx = by_kind[kind][:]
        rng.shuffle(idx)
        half = (len(idx) + 1) // 2
        select += idx[:half]
        held += idx[half:]
    return sorted(select), sorted(held)


def minilm_part(sizes: WhatBreaksSizes = WhatBreaksSizes(), command: str = "python scripts/what_breaks.py",
                progress: bool = False) -> dict[str, Any]:
    """Pruning curves of MiniLM on the English set (see the module docstring); ``command`` is recorded."""

    hm = headlab.load("minilm")
    sentences = load_english()[:sizes.minilm_sentences]
    select, held = split_by_construction(sentences, MINILM_SPLIT_SEED)
    texts = [s.text for s in sentences]
    t0 = time.perf_counter()
    imp = head_importance(hm, [texts[i] for i in select], metric=Metric("cosine"))
    importance_seconds = time.perf_counter() - t0
    orders = {"mean (one-shot)": (order_by(imp.mean()), None), "worst case (one-shot)": (order_by(imp.worst()), None)}
    for seed in MINILM_RANDOM_SEEDS:
        orders[f"random (seed {seed})"] = (random_order(hm, seed=seed), None)
    other = {}
    for mode in sizes.minilm_ablation_modes:
        ablation = Ablation(mode, reference=[texts[i] for i in select])
        m = head_importance(hm, [texts[i] for i in select], metric=Metric("cosine"), ablation=ablation).mean()
        other[mode] = m.tolist()
        orders[f"mean (one-shot), {mode} ablation"] = (order_by(m), ablation)
    eval_set = {"cosine": EvalSet([texts[i] for i in held], metric=Metric("cosine"))}
    curves = {}
    t0 = time.perf_counter()
    for name, (order, ablation) in orders.items():
        curve = pruning_curve(hm, order, eval_set, counts=list(sizes.minilm_counts), ablation=ablation)
        curves[name] = {"order": [list(h) for h in order], "ablation": "zero" if ablation is None else ablation.mode,
                        "per_sentence": curve.values["cosine"].T.tolist()}  # (held-out sentence, count)
        if progress:
            print(f"minilm {name}: mean 1 - cos at the last count {float(curve.mean('cosine')[-1]):.3f}", flush=True)
    curve_seconds = time.perf_counter() - t0
    # a scale for 1 - cos: how far apart the clean embeddings of different held-out sentences are
    batch = hm.tokenize([texts[i] for i in held])
    with torch.no_grad():
        emb = torch.nn.functional.normalize(mean_pool(hm.forward(batch), batch["attention_mask"]), dim=-1)
    dist = 1.0 - emb @ emb.T  # (sentence, sentence)
    off = dist[~torch.eye(len(held), dtype=torch.bool)]
    nearest = (dist + 2.0 * torch.eye(len(held))).min(dim=1).values  # nearest *other* sentence
    return {"command": command,
            "computed_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "model": "minilm (sentence-transformers/all-MiniLM-L6-v2)", "n_layers": hm.n_layers, "n_heads": hm.n_heads,
            "metric": "cosine: 1 - cos(mean-pooled embedding, clean embedding) per sentence (0 = unchanged)",
            "ablation": "zero unless the curve says otherwise", "split_seed": MINILM_SPLIT_SEED, "random_seeds": list(MINILM_RANDOM_SEEDS),
            "n_sentences": len(sentences), "selection": select, "held_out": held,
            "held_out_constructions": [sentences[i].construction for i in held],
            "importance_mean": imp.mean().tolist(), "importance_worst": imp.worst().tolist(),
            "importance_mean_other_ablations": other,
            "counts": list(sizes.minilm_counts), "curves": curves,
            "clean_distance": {"mean_between_sentences": float(off.mean()),
                               "median_to_nearest_other": float(nearest.median()),
                               "min_to_nearest_other": float(nearest.min())},
            "importance_seconds": importance_seconds, "curve_seconds": curve_seconds,
            "torch_version": torch.__version__, "python_version": platform.python_version()}
