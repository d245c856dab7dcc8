#!/usr/bin/env python3
"""Compute the experiments of chapter 6 ("What breaks when specialisation is ignored") on the organism (and one on MiniLM).

    OMP_NUM_THREADS=1 python scripts/what_breaks.py                 # all parts (about 10 min on a free core)
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts pruning  # one part, others kept from the file
    OMP_NUM_THREADS=1 python scripts/what_breaks.py --parts minilm   # the MiniLM pruning curves (about 2 min)

Writes ``lib/headlab/results/what_breaks.json``: for each part the settings, the measured
values and the seconds it took, plus the command and versions. The chapter loads this file by
default (its cells stay far below the build's per-cell limit).

Parts:

* ``pruning``: per-head loss effects on 32 selection windows (seed -3) give one-shot orders by
  mean and by worst-case (largest per-window) effect; an iterative order (mean, recomputed after
  each removal, on 8 of those windows, for the first 12 heads); three random orders. Each order is
  evaluated on the first 48 held-out evaluation windows at 13 counts, on the mean loss and on the
  tail subsets' item accuracies (:func:`headlab.analysis.prune.pruning_curve_shared`).
* ``averaging``: every layer in turn with its heads' outputs replaced by the layer mean
  (``patch_z``), its heads given the layer's mean pattern (``patch_pattern``), zero-ablated, and
  8 random heads of the whole model zero-ablated (3 draws): loss and accuracies on the evaluation
  windows, and the specialist scores of every head when a layer is averaged.
* ``adversarial``: gradient-guided trigger search (3 slots before the sentence) against agreement
  and copy predictions of the evaluation windows, the random-token control with a matched budget,
  which head moves its attention to the trigger, and mean vs per-head detection.
* ``minilm``: the pruning curves on all-MiniLM-L6-v2 (6 x 12 heads) and the hand-annotated English
  sentences (``headlab.data.language.load_english``). The sentences are split in two halves, stratified
  by construction (seed 0): per-head importance (zero ablation, ``kind="cosine"``: 1 - cosine of
  the mean-pooled embedding to the clean one) on the *selection* half gives orders by mean and by
  worst-case (largest per-sentence) effect; three random orders are the control. Every order is
  evaluated on the *held-out* half at every second count, per sentence, so that the chapter can
  average over all sentences or over one construction. Stored under its own key with its own
  command, seeds and time; it leaves the organism parts and their provenance untouched.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "lib" / "headlab" / "results" / "what_breaks.json"
MODEL = "organism"
N_EVAL = 64
COUNTS = list(range(0, 17, 2)) + [20, 24, 28, 32]
N_PRUNE_EVAL = 48  # evaluation windows of the pruning curves (the first 48 of the 64)


def _r(x, d=4):
    if isinstance(x, float):
        return round(x, d)
    if isinstance(x, dict):
        return {k: _r(v, d) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_r(v, d) for v in x]
    return x


def eval_metrics(data, vocab):
    """The average set and the tail subsets, as metrics on the evaluation windows."""
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


def item_counts(data) -> dict:
    return {"agreement": len(data.agreement),
            "agreement, attractor": sum(i.attractor for i in data.agreement),
            "pronoun, distractor": sum(i.distractor for i in data.pronoun),
            "copy in repeated spans": len(data.copy), "rare-word copies": len(data.rare)}


def run_pruning(hm, task, data, vocab) -> dict:

    from headlab.analysis.prune import iterative_order, order_by, pruning_curve_shared, random_order
    from headlab.analysis.sweep import sweep
    from headlab.metrics import Metric

    select = task.windows(32, seed=-3)
    from headlab.data.language import encode

    sel_ids = encode(hm.tokenizer, select)
    effects = sweep(hm, sel_ids, metric=Metric("loss")).effects  # (head, window), layer-major
    grid = lambda v: v.reshape(hm.n_layers, hm.n_heads)  # noqa: E731
    mean, worst = grid(effects.mean(1)), grid(effects.max(1).values)
    orders = {"mean (one-shot)": order_by(mean), "worst case (one-shot)": order_by(worst)}
    t0 = time.perf_counter()
    orders["mean (iterative)"] = iterative_order(hm, sel_ids[:8], by="mean", metric=Metric("loss"), stop_after=12)
    iterative_seconds = time.perf_counter() - t0
    for seed in range(3):
        orders[f"random (seed {seed})"] = random_order(hm, seed=seed)
    sub = dataclasses.replace(data, windows=data.windows[:N_PRUNE_EVAL], ids=data.ids[:N_PRUNE_EVAL],
                              **{k: [i for i in getattr(data, k) if i.doc < N_PRUNE_EVAL]
                                 for k in ("agreement", "pronoun", "copy", "rare")})
    metrics = eval_metrics(sub, vocab)
    curves = {}
    for name, order in orders.items():
        curve = pruning_curve_shared(hm, order, sub.ids, metrics, counts=COUNTS)
        curves[name] = {"order": [list(h) for h in order],
                        "mean": {k: [float(x) for x in curve.mean(k)] for k in metrics}}
    return {"selection": {"n_windows": 32, "seed": -3, "iterative_windows": 8, "iterative_steps": 12},
            "eval_windows": N_PRUNE_EVAL,
            "importance_mean": mean.tolist(), "importance_worst": worst.tolist(),
            "iterative_seconds": iterative_seconds, "counts": COUNTS, "item_counts": item_counts(sub),
            "higher_is_better": {k: v[1] for k, v in metrics.items()}, "curves": curves}


def _evaluate(hm, data, metrics) -> dict:
    import torch

    with torch.no_grad():
        out = torch.cat([hm.forward(data.ids[s:s + 32]) for s in range(0, len(data.ids), 32)])
    batch = {"input_ids": data.ids, "attention_mask": torch.ones_like(data.ids)}
    res = {}
    for name, (fn, _) in metrics.items():
        v = fn(out, batch)
        res[name] = float(v[~torch.isnan(v)].mean())
    return res


def run_averaging(hm, task, data, vocab) -> dict:
    import random

    from headlab.training.distill import average_heads, specialists

    metrics = eval_metrics(data, vocab)
    spec_windows = data.windows[:48]
    rows = {"clean": _evaluate(hm, data, metrics)}
    spec = {"clean": {k: v.tolist() for k, v in specialists(hm, spec_windows).items()}}
    for layer in range(hm.n_layers):
        with average_heads(hm, [layer], what="z"):
            rows[f"layer {layer}: mean output"] = _evaluate(hm, data, metrics)
            spec[f"layer {layer}: mean output"] = {k: v.tolist() for k, v in specialists(hm, spec_windows).items()}
        with average_heads(hm, [layer], what="pattern"):
            rows[f"layer {layer}: mean pattern"] = _evaluate(hm, data, metrics)
        with hm.ablate([(layer, h) for h in range(hm.n_heads)]):
            rows[f"layer {layer}: removed"] = _evaluate(hm, data, metrics)
    for seed in range(3):
        heads = random.Random(seed).sample(hm.heads(), hm.n_heads)
        with hm.ablate(heads):
            rows[f"{hm.n_heads} random heads removed (seed {seed})"] = _evaluate(hm, data, metrics)
    return {"rows": rows, "specialists": spec, "specialist_windows": len(spec_windows)}


def run_adversarial(hm, task, data, vocab, n_targets: int = 64) -> dict:
    import torch

    from headlab.analysis.adversarial import agreement_targets, copy_targets, margins, random_triggers, trigger_search
    from headlab.analysis.inspection import detection_rates, flag_inputs, query_rows, rates_from_scores, weight_before

    from headlab.data.language import agreement_items, copy_items

    tok = hm.tokenizer
    sets = {"agreement": agreement_targets(data.windows, data.agreement, tok, k=3),
            "copy": copy_targets(data.windows, data.copy, tok, k=3)}
    # calibration inputs: the same kind of target, from other windows (seed -4), picked by the same rule
    other = task.windows(2 * N_EVAL, seed=-4)
    calibration = {"agreement": agreement_targets(other, agreement_items(other), tok, k=3),
                   "copy": copy_targets(other, copy_items(other, task.lang), tok, k=3)}

    def pick(targets):
        """The targets predicted right, at most one per window first (then the rest)."""
        clean_m = margins(hm, targets)
        right = [t for t, m in zip(targets, clean_m) if m > 0]
        seen, first, rest = set(), [], []
        for t in right:
            key = (t.ids.shape[0], tuple(t.ids[:8].tolist()))  # the window
            (rest if key in seen else first).append(t)
            seen.add(key)
        return right, first + rest

    out = {}
    for name, targets in sets.items():
        right, picked = pick(targets)
        attacked_set, calib_set = picked[:n_targets], pick(calibration[name])[1][:2 * n_targets]
        t0 = time.perf_counter()
        search = trigger_search(hm, attacked_set, n_steps=6, top_k=4)
        search_seconds = time.perf_counter() - t0
        budget = int(search.evaluations.float().mean().round())
        rand = random_triggers(hm, attacked_set, n_draws=max(budget, 1), seed=0)
        single = random_triggers(hm, attacked_set, n_draws=1, seed=1)
        queries = torch.tensor([t.query for t in attacked_set])
        clean_rows = query_rows(hm, torch.stack([t.ids[:search.ids.shape[1]] for t in attacked_set]), queries)
        att_rows = query_rows(hm, search.ids, queries)
        ok = search.success
        slot_idx = torch.tensor([list(t.slots) for t in attacked_set])  # (n, k)
        on_slots = lambda rows: rows.gather(3, slot_idx[:, None, None, :].expand(-1, rows.shape[1], rows.shape[2], -1)).sum(-1)  # noqa: E731
        gain = on_slots(att_rows) - on_slots(clean_rows)  # (n, layer, head)
        res = {"n_candidates": len(targets), "n_right": len(right), "n_attacked": len(attacked_set),
               "search": {"n_steps": 6, "top_k": 4, "slots": 3, "seconds": search_seconds,
                          "mean_evaluations": budget,
                          "success_rate": search.success_rate(),
                          "median_margin_clean": float(search.clean_margin.median()),
                          "median_margin_after": float(search.margin.median())},
               "random_best_of_budget": {"n_draws": budget, "success_rate": rand.success_rate(),
                                         "median_margin_after": float(rand.margin.median())},
               "random_single": {"success_rate": single.success_rate(),
                                 "median_margin_after": float(single.margin.median())},
               "labels": [t.label for t in attacked_set], "success": ok.tolist(),
               "clean_margin": search.clean_margin.tolist(), "margin": search.margin.tolist(),
               "random_margin": rand.margin.tolist()}
        if bool(ok.any()):
            g = gain[ok].mean(0)  # (layer, head)
            l, h = divmod(int(g.argmax()), hm.n_heads)
            res["captured_head"] = [l, h]
            res["trigger_weight_gain"] = g.tolist()
            res["captured_weight_on_trigger"] = {"clean": float(on_slots(clean_rows)[ok][:, l, h].mean()),
                                                 "attacked": float(on_slots(att_rows)[ok][:, l, h].mean())}
        if len(calib_set) >= 16 and bool(ok.any()):  # calibration: other windows, same selection rule
            cq = torch.tensor([t.query for t in calib_set])
            L = max(t.query for t in calib_set) + 1
            calib_rows = query_rows(hm, torch.stack([t.ids[:L] for t in calib_set]), cq)
            pad = lambda r, n: torch.nn.functional.pad(r, (0, n - r.shape[-1]))  # noqa: E731
            width = max(calib_rows.shape[-1], att_rows.shape[-1])
            calib_rows, c_rows, a_rows = pad(calib_rows, width), pad(clean_rows, width), pad(att_rows[ok], width)
            res["detection"] = {mode: detection_rates(calib_rows, c_rows, a_rows, mode=mode, calibration_rate=0.05)
                                for mode in ("per_head", "mean")}
            res["detection"]["n_calibration"] = len(calib_set)
            # "unusual position": the weight a head (or a layer's mean) puts before the query's sentence
            before = lambda rows, ts: weight_before(rows, torch.tensor([max(t.slots) + 1 for t in ts]))  # noqa: E731
            att_set = [t for t, s_ in zip(attacked_set, ok.tolist()) if s_]
            scores = {"per_head": (before(calib_rows, calib_set), before(c_rows, attacked_set), before(a_rows, att_set)),
                      "mean": tuple(before(r.mean(2), ts) for r, ts in ((calib_rows, calib_set), (c_rows, attacked_set),
                                                                        (a_rows, att_set)))}
            res["detection_before_sentence"] = {mode: rates_from_scores(*v, calibration_rate=0.05)
                                                for mode, v in scores.items()}
            res["raw_threshold"] = {f"{mode} x={x}": {"clean": float(flag_inputs(c_rows, x, mode).float().mean()),
                                                      "attacked": float(flag_inputs(a_rows, x, mode).float().mean())}
                                    for mode in ("per_head", "mean") for x in (0.5, 0.8)}
        out[name] = res
        print(f"{name}: search {res['search']['success_rate']:.3f}, random {res['random_best_of_budget']['success_rate']:.3f}"
              f" ({search_seconds:.0f} s)", flush=True)
    return out


MINILM_COUNTS = list(range(0, 73, 2))
MINILM_SPLIT_SEED = 0
MINILM_RANDOM_SEEDS = (0, 1, 2)


def split_by_construction(sentences, seed: int) -> tuple[list[int], list[int]]:
    """Indices of two halves of ``sentences``, each construction split as evenly as it can be
    (the odd one out goes to the selection half), after a seeded shuffle within the construction."""
    import random

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


def run_minilm(argv: list[str] | None = None) -> dict:
    """Pruning curves of MiniLM on the English set (see the module docstring)."""
    import datetime

    import torch

    import headlab
    from headlab.analysis.importance import head_importance
    from headlab.data.language import load_english
    from headlab.analysis.prune import EvalSet, order_by, pruning_curve, random_order
    from headlab.metrics import Metric

    hm = headlab.load("minilm")
    sentences = load_english()
    select, held = split_by_construction(sentences, MINILM_SPLIT_SEED)
    texts = [s.text for s in sentences]
    t0 = time.perf_counter()
    imp = head_importance(hm, [texts[i] for i in select], metric=Metric("cosine"))
    importance_seconds = time.perf_counter() - t0
    orders = {"mean (one-shot)": order_by(imp.mean()), "worst case (one-shot)": order_by(imp.worst())}
    for seed in MINILM_RANDOM_SEEDS:
        orders[f"random (seed {seed})"] = random_order(hm, seed=seed)
    eval_set = {"cosine": EvalSet([texts[i] for i in held], metric=Metric("cosine"))}
    curves = {}
    t0 = time.perf_counter()
    for name, order in orders.items():
        curve = pruning_curve(hm, order, eval_set, counts=MINILM_COUNTS)
        curves[name] = {"order": [list(h) for h in order],
                        "per_sentence": curve.values["cosine"].T.tolist()}  # (held-out sentence, count)
        print(f"minilm {name}: mean 1 - cos at the last count {float(curve.mean('cosine')[-1]):.3f}", flush=True)
    curve_seconds = time.perf_counter() - t0
    # a scale for 1 - cos: how far apart the clean embeddings of different held-out sentences are
    batch = hm.tokenize([texts[i] for i in held])
    with torch.no_grad():
        emb = torch.nn.functional.normalize(hm.metric(hm.forward(batch), batch, kind="cosine"), dim=-1)
    dist = 1.0 - emb @ emb.T  # (sentence, sentence)
    off = dist[~torch.eye(len(held), dtype=torch.bool)]
    nearest = (dist + 2.0 * torch.eye(len(held))).min(dim=1).values  # nearest *other* sentence
    return {"command": "python scripts/what_breaks.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
            "computed_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "model": "minilm (sentence-transformers/all-MiniLM-L6-v2)", "n_layers": hm.n_layers, "n_heads": hm.n_heads,
            "metric": "cosine: 1 - cos(mean-pooled embedding, clean embedding) per sentence (0 = unchanged)",
            "ablation": "zero", "split_seed": MINILM_SPLIT_SEED, "random_seeds": list(MINILM_RANDOM_SEEDS),
            "n_sentences": len(sentences), "selection": select, "held_out": held,
            "held_out_constructions": [sentences[i].construction for i in held],
            "importance_mean": imp.mean().tolist(), "importance_worst": imp.worst().tolist(),
            "counts": MINILM_COUNTS, "curves": curves,
            "clean_distance": {"mean_between_sentences": float(off.mean()),
                               "median_to_nearest_other": float(nearest.median()),
                               "min_to_nearest_other": float(nearest.min())},
            "importance_seconds": importance_seconds, "curve_seconds": curve_seconds,
            "torch_version": torch.__version__, "python_version": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["pruning", "averaging", "adversarial", "minilm"])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    runners = {"pruning": run_pruning, "averaging": run_averaging, "adversarial": run_adversarial}
    unknown = [p for p in args.parts if p not in runners and p != "minilm"]
    if unknown:
        parser.error(f"unknown part(s) {unknown}: choose from {', '.join([*runners, 'minilm'])}")
    import torch

    import headlab
    from headlab.training.loop import ORGANISMS

    torch.set_num_threads(1)
    torch.manual_seed(0)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if any(p in runners for p in args.parts):  # the organism parts share the file's top-level provenance
        hm = headlab.load(MODEL)
        task = ORGANISMS[MODEL].task
        data = task.eval_data(N_EVAL)
        vocab = hm.tokenizer.get_vocab()
        results.update({"command": "python scripts/what_breaks.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
                        "model": MODEL, "eval_windows": N_EVAL, "item_counts": item_counts(data),
                        "torch_version": torch.__version__, "python_version": platform.python_version()})
    for part in args.parts:
        t0 = time.perf_counter()
        value = run_minilm(argv) if part == "minilm" else runners[part](hm, task, data, vocab)
        value["seconds"] = time.perf_counter() - t0
        results[part] = _r(value, 6 if part == "minilm" else 4)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"{part}: {value['seconds']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
