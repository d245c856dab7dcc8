"""The checks of the checklist, and :func:`checklist` which runs them all.

See :mod:`headlab.report` for what each check measures and the JSON it returns. Each check is a
function of what was measured before it, returning its section of ``report.json``: baselines and
per-input tails, pairs, patterns against writes and what to keep are here; circuits (on two kinds
of text) in :mod:`headlab.report.circuits`; held-out selection, position and ablation modes in
:mod:`headlab.report.robustness`; seeds, tasks and distillation in their own modules; the
checklist table in :mod:`headlab.report.summary`. Thresholds: :mod:`headlab.report.thresholds`.
"""

from __future__ import annotations

import copy
import sys
import time
from itertools import combinations

import torch

from headlab import stats
from headlab.analysis.detect import PATTERN_SCORES, head_scores, label_heads
from headlab.analysis.detect.calibration import calibrated_thresholds, decoy_lifts
from headlab.analysis.detect.registry import score
from headlab.analysis.importance import Importance, PairEffects, backup_heads
from headlab.roles.induction import InductionHeads
from headlab.roles.orphan import named_heads, orphans_from_effects
from headlab.analysis.sweep import sweep
from headlab.heads.head import Head, format_head
from headlab.metrics import Metric
from headlab.report.circuits import circuits_section
from headlab.report.distillation import distillation_section
from headlab.report.inputs import report_inputs
from headlab.report.robustness import modes_section, position_section, rank_correlation, selection_section
from headlab.report.seeds import seeds_section
from headlab.report.summary import checklist_table
from headlab.report.data import ReportData, check_data, tasks_section
from headlab.report.thresholds import (
    BACKUP_FACTOR, BACKUP_MIN_EFFECT, HIGH_QUANTILE, IDLE_EFFECT, MAX_LAYER_PAIRS, METRIC_DEFINITIONS,
    PAIR_MIN_EFFECT, PAIR_TOP_K, ROLES, SCHEMA, SHARP_ENTROPY, TAIL_MEAN_BELOW, TAIL_WORST_ABOVE,
    TASK_SHARE, TASK_WINDOWS, THRESHOLDS, TOP_K, UNDERESTIMATE_MARGIN,
)

__all__ = ["checklist", "ablation_section", "redundancy_section", "patterns_section", "keep_section"]


def _grid(t: torch.Tensor, digits: int = 5) -> list:
    return [[None if x != x else round(float(x), digits) for x in row] for row in t.tolist()]


def _head(h) -> list[int]:
    return Head(int(h[0]), int(h[1])).to_json()


def _r(x, digits: int = 5) -> float | None:
    x = float(x)
    return None if x != x else round(x, digits)


def ablation_section(imp: Importance, texts: list[str]) -> dict:
    """Checks 1 and 3, ``ablation``: per-head ablation deltas with a 95% bootstrap interval over texts
    (the baseline is no effect, 0: how many heads lie measurably above or below it), their
    summaries, and the heads hidden in the tail (the inputs an average hides).

    Args:
        imp: every head's effect on every text.
        texts: the texts, as shown in the report (one per input of ``imp``).
    """
    mean, worst, q = imp.mean(), imp.worst(), imp.quantile(HIGH_QUANTILE)
    arg = imp.effects.argmax(dim=-1)  # (n_layers, n_heads): the text of the worst case

    def row(h) -> dict:
        l, k = h
        return {"head": _head(h), "mean": _r(mean[l, k]), "worst": _r(worst[l, k]), "quantile": _r(q[l, k]),
                "worst_text": int(arg[l, k])}

    peak = float(mean.max())
    tail = imp.hidden_in_the_tail(TAIL_MEAN_BELOW * peak, TAIL_WORST_ABOVE * peak) if peak > 0 else []
    low, high = torch.empty_like(mean), torch.empty_like(mean)
    for l in range(imp.n_layers):  # check 1, baselines: each mean with its interval over texts, against 0
        for h in range(imp.n_heads):
            est = stats.bootstrap_mean(imp.effects[l, h].numpy().astype(float), n_resamples=1999,
                                       method="percentile")
            low[l, h], high[l, h] = est.low, est.high
    return {
        "mean": _grid(mean), "mean_low": _grid(low), "mean_high": _grid(high),
        "above_zero": int((low > 0).sum()), "below_zero": int((high < 0).sum()),
        "worst": _grid(worst), "quantile": _grid(q), "q": HIGH_QUANTILE,
        "per_text": [[[round(x, 5) for x in cell] for cell in layer] for layer in imp.effects.tolist()],
        "top_by_mean": [row(h) for h in imp.ranking("mean")[:TOP_K]],
        "top_by_worst": [row(h) for h in imp.ranking("worst")[:TOP_K]],
        "top_by_quantile": [row(h) for h in imp.ranking(f"q{round(HIGH_QUANTILE * 100)}")[:TOP_K]],
        "hidden_in_the_tail": [{**row(h), "text": texts[i]} for h, _, _, i in tail],
        "spearman_mean_worst": rank_correlation(mean, worst),
    }


def _pair_list(hm, imp: Importance, scope: str, top_k: int) -> tuple[str, list]:
    within = [((l, a), (l, b)) for l in range(hm.n_layers) for a, b in combinations(range(hm.n_heads), 2)]
    if scope == "auto":
        scope = "layer" if 0 < len(within) <= MAX_LAYER_PAIRS else "top"
    if scope == "layer":
        if not within:
            raise ValueError(f"{hm.name} has one head per layer: no pairs within a layer; use scope 'top'")
        return scope, within
    if scope == "top":
        if top_k < 2:
            raise ValueError(f"top_k must be at least 2 to form a pair, got {top_k}")
        top = sorted(imp.ranking("worst")[:top_k])
        return scope, list(combinations(top, 2))
    raise ValueError(f"unknown pair scope {scope!r}: choose 'auto', 'layer' or 'top'")


def redundancy_section(hm, inputs, imp: Importance, metric: Metric | None = None, scope: str = "auto",
                       top_k: int = PAIR_TOP_K, progress: bool = False) -> dict:
    """``redundancy``: pair ablations, how often single ablations underestimate them, backup heads.

    Args:
        hm: the model.
        inputs: the inputs ``imp`` was measured on.
        imp: every head's effect on every input (the single ablations).
        metric: the metric ``imp`` was measured with (default: the model's own).
        scope: which pairs: ``"layer"``, ``"top"`` or ``"auto"`` (see :mod:`headlab.report`).
        top_k: the number of heads whose pairs ``scope="top"`` ablates.
        progress: show a progress bar.
    """
    scope, pairs = _pair_list(hm, imp, scope, top_k)
    result = sweep(hm, inputs, groups=[list(p) for p in pairs], metric=metric, progress=progress)
    singles = {(l, h): imp.effects[l, h] for l in range(hm.n_layers) for h in range(hm.n_heads)}
    effects = PairEffects(singles, {p: result.effects[i] for i, p in enumerate(pairs)})
    peak = float(imp.mean().max())
    rows = []
    for (a, b), both in effects.pairs.items():
        pair, parts = float(both.mean()), float((singles[a] + singles[b]).mean())
        rows.append({"heads": [_head(a), _head(b)], "pair": _r(pair), "sum_of_singles": _r(parts),
                     "interaction": _r(pair - parts)})
    floor = PAIR_MIN_EFFECT * max(peak, 0.0)
    counted = [r for r in rows if r["pair"] > floor]
    stats = {"fraction_underestimated": None, "fraction_clearly_underestimated": None, "median_ratio": None}
    if counted:
        under = effects.underestimates(min_pair_effect=floor)
        clearly = sum(r["pair"] > r["sum_of_singles"] + UNDERESTIMATE_MARGIN * abs(r["sum_of_singles"])
                      for r in counted)
        stats = {"fraction_underestimated": _r(under["fraction_underestimated"], 4),
                 "fraction_clearly_underestimated": _r(clearly / len(counted), 4),
                 "median_ratio": _r(under["median_ratio"], 4)}
    backups = backup_heads(effects, factor=BACKUP_FACTOR, min_effect=BACKUP_MIN_EFFECT * max(peak, 0.0))
    return {
        "scope": scope, "n_pairs": len(rows), "pairs": rows, "counted": len(counted), **stats,
        "top_interactions": sorted(rows, key=lambda r: -r["interaction"])[:TOP_K],
        "backups": [{"removed": _head(a), "backup": _head(b), "alone": _r(alone), "given_removed": _r(given)}
                    for a, b, alone, given in backups],
    }


def patterns_section(hm, inputs, imp: Importance, induction: InductionHeads, seed: int = 0) -> dict:
    """``patterns_vs_writes``: attention entropy and write norms beside the ablation effect; the
    orphan heads by their one definition, and sharp but idle heads.

    Orphans: :func:`headlab.roles.orphan.orphans_from_effects` on the effects of check 1
    (``imp``: the zero-ablation sweep :func:`headlab.roles.orphan.orphan_heads` would run
    again), the heads named by :func:`~headlab.roles.orphan.named_heads` on the selection
    texts at the decoy-calibrated lift, on the selection check's split (``seed``).

    Args:
        hm: the model.
        inputs: the inputs ``imp`` was measured on.
        imp: every head's effect on every input.
        induction: the induction role on the model's own text (from
            :func:`headlab.report.circuits.circuits_section`), whose held-out lifts the labels read.
        seed: the split of the texts into a selection and a measurement half.
    """
    # induction: the role's held-out lift stands in for the score (below); no token frequencies are given
    wanted = [s for s in PATTERN_SCORES if s != "induction" and "token_frequency" not in score(s).needs] + ["write_norm"]
    scores = head_scores(hm, inputs, scores=wanted)
    entropy, write = scores.mean("entropy"), scores.mean("write_norm")
    effect = imp.effects.abs().mean(dim=-1)  # (n_layers, n_heads): mean |effect| over texts
    means = {n: m for n, m in scores.means().items() if n in PATTERN_SCORES}
    uniform = {n: torch.full_like(m, scores.uniform_mean(n)) for n, m in means.items()}
    # induction: the role's held-out lift on the model's own kind of text (a lift already: uniform 0)
    means["induction"] = torch.tensor([[induction.lift[(l, h)].value for h in range(hm.n_heads)]
                                       for l in range(hm.n_layers)], dtype=torch.float64)
    uniform["induction"] = torch.zeros_like(means["induction"])
    labels = label_heads(means, effect, uniform=uniform)
    average = float(effect.mean())
    n_texts = imp.effects.shape[-1]
    found = named = name_lift = None
    if n_texts >= 4:  # two texts a side: a selection half and a measurement half with an interval
        split = stats.split_items(n_texts, seed=seed)
        name_lift = calibrated_thresholds(decoy_lifts(hm, inputs), split.select).lift
        named = named_heads(scores, name_lift, split.select)
        found = orphans_from_effects(imp.effects.numpy(), named, split, lift_threshold=name_lift,
                                     metric=str(imp.kind), mode=imp.mode, seed=seed)

    def row(l: int, h: int) -> dict:
        return {"head": _head((l, h)), "entropy": _r(entropy[l, h], 4), "write_norm": _r(write[l, h], 4),
                "abs_effect": _r(effect[l, h])}

    def orphan(o) -> dict:
        return {**row(*o.head), "select_ratio": _r(o.select_ratio, 4),
                "effect": {"value": _r(o.effect.value), "low": _r(o.effect.low), "high": _r(o.effect.high)},
                "lead": {"value": _r(o.lead.value), "low": _r(o.lead.low), "high": _r(o.lead.high)},
                "rank": o.rank, "rank_low": o.rank_low, "rank_high": o.rank_high, "is_orphan": o.is_orphan}

    heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    idle = [row(l, h) for l, h in heads if entropy[l, h] <= SHARP_ENTROPY and effect[l, h] < IDLE_EFFECT * average]
    return {
        "entropy": _grid(entropy, 4), "write_norm": _grid(write, 4), "abs_effect": _grid(effect),
        "labels": labels.labels, "strength": _grid(labels.strength, 4),
        "spearman_entropy_effect": rank_correlation(entropy, effect),
        "spearman_write_norm_effect": rank_correlation(write, effect),
        "named": None if named is None else named.tolist(),
        "name_threshold": None if name_lift is None else _r(name_lift, 4),
        "orphan_candidates": None if found is None else [orphan(o) for o in found.candidates],  # None: not measured
        "orphans_that_matter": [] if found is None else [orphan(o) for o in found.heads],
        "sharp_but_idle": sorted(idle, key=lambda r: (r["entropy"], r["head"])),
    }


def keep_section(imp: Importance, circuits: dict, redundancy: dict, patterns: dict) -> dict:
    """``keep``: the heads a pruning or distillation plan must keep, each with its reasons,
    from the four sections before it (each as returned by its function)."""
    mean, worst = imp.mean(), imp.worst()
    peak = float(mean.max())
    reasons: dict[tuple[int, int], list[str]] = {}

    def add(head, reason: str) -> None:
        reasons.setdefault((int(head[0]), int(head[1])), []).append(reason)

    for l in range(imp.n_layers):
        for h in range(imp.n_heads):
            if peak > 0 and worst[l, h] >= TAIL_WORST_ABOVE * peak:
                add((l, h), f"worst case {float(worst[l, h]):.3g} >= {TAIL_WORST_ABOVE:g} x the largest mean "
                            f"({peak:.3g})")
    for pair in circuits["verified"]:
        p, i = pair["previous_token"], pair["induction"]
        kind, cut = max(((k, pair[k]["relative_drop"]) for k in ("random", "own") if pair[k] and pair[k]["passes"]),
                        key=lambda kc: kc[1]["value"])
        where = "own text" if kind == "own" else "random tokens"
        add(p, f"circuit: removing it cuts induction head {format_head(i)}'s score by {cut['value']:.0%} "
               f"[{cut['low']:.0%}, {cut['high']:.0%}] ({where})")
        add(i, f"circuit: induction head fed by {format_head(p)}")
    for b in redundancy["backups"]:
        a, k = b["removed"], b["backup"]
        add(k, f"backup: matters once {format_head(a)} is removed ({b['alone']:.3g} alone, {b['given_removed']:.3g})")
        add(a, f"backed up by {format_head(k)}")
    for o in patterns["orphans_that_matter"]:
        lead = o["lead"]
        add(o["head"], f"orphan: no named pattern, yet its effect leads the mean head's by {lead['value']:.3g} "
                       f"[{lead['low']:.3g}, {lead['high']:.3g}] on the measurement texts")
    keep = sorted(reasons)
    by_mean = set(imp.ranking("mean")[:len(keep)])
    return {
        "heads": [{"head": _head(h), "reasons": reasons[h], "mean": _r(mean[h]), "worst": _r(worst[h])} for h in keep],
        "n_keep": len(keep),
        "mean_ranking_would_drop": [_head(h) for h in keep if h not in by_mean],
    }


def checklist(hm, texts=None, *, n_texts: int | None = None, seed: int = 0, scope: str = "auto",
              top_k: int = PAIR_TOP_K, metric: Metric | None = None, replicas: list | None = None,
              data: ReportData | None = None, progress: bool = False) -> dict:
    """Run every check of the checklist on ``hm`` and return the JSON-ready report (see :mod:`headlab.report`).

    Args:
        texts: a list of texts, or None for the model's default set (:func:`report_inputs`).
        n_texts: how many texts (default: ``N_TEXTS`` of a default set, every given text).
        seed: the draw of the repeated random sequences, of the own-text sample, of the
            held-out split and of a default set that is random.
        scope: which pairs to ablate: ``"layer"``, ``"top"`` or ``"auto"`` (see ``redundancy``).
        top_k: the number of heads whose pairs ``scope="top"`` ablates.
        metric: the :class:`~headlab.metrics.Metric` (default: next-token loss for causal LMs,
            ``"cosine"`` for encoders); zero ablation, except in the ``modes`` check.
        replicas: the same recipe trained with other seeds (loaded models), for the ``seeds``
            check; measured on the same texts.
        data: the model's own data (:class:`~headlab.report.ReportData`): default texts, the
            own text of the induction check, per-task margins; None: the generic ones, and the
            ``tasks`` check "not measured".
        progress: show progress bars.
    """
    metric = Metric.of(metric)
    check_data(data)
    seconds: dict[str, float] = {}
    start = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(now - clock, 2)
        clock = now

    inputs, source, shown = report_inputs(hm, texts, n_texts, seed, data)
    step = _Steps(progress, hm.name)
    step(f"1/6 baselines: every head ablated, one at a time, on {len(shown)} texts")
    result = sweep(hm, inputs, metric=metric, progress=progress)
    imp = Importance.from_sweep(result)
    ablation = ablation_section(imp, shown)
    selection = selection_section(imp, seed)
    plain_loss = metric is None or (metric.kind in (None, "loss") and metric.loss_mask is None)
    position = position_section(hm, inputs, imp, progress=progress) if plain_loss else {
        "measured": False, "why": "another metric than the plain next-token loss: the position check reads that loss"}
    lap("ablation")
    step("2/6 circuits: induction on random tokens and on the model's own text, checked by ablation")
    circuits, induction = circuits_section(hm, seed, texts=inputs, data=data)
    lap("circuits")
    step("3/6 seeds and tasks")
    others = {}
    for other in replicas or []:
        others[other.name] = Importance.from_sweep(sweep(other, inputs, metric=metric, progress=progress))
    seeds = seeds_section(hm.name, imp, others)
    shares = None if data is None or data.task_shares is None else data.task_shares(hm, TASK_WINDOWS, seed)
    tasks = tasks_section(hm, imp.mean(), shares, TASK_WINDOWS, TASK_SHARE)
    lap("seeds_and_tasks")
    step("4/6 ablation modes and a second metric")
    modes = modes_section(hm, inputs, imp, metric, seed)
    lap("modes")
    step("5/6 pairs")
    redundancy = redundancy_section(hm, inputs, imp, metric, scope, top_k, progress)
    lap("redundancy")
    step("6/6 patterns vs writes, what to keep, distillation")
    patterns = patterns_section(hm, inputs, imp, induction["own text"], seed)
    keep = keep_section(imp, circuits, redundancy, patterns)
    distillation = distillation_section(hm, inputs, seed) if hm.causal else {
        "measured": False, "why": f"{hm.name} is an encoder: the distillation test reads a next-token loss",
        "advice": None}
    lap("patterns_keep_distillation")
    seconds["total"] = round(time.perf_counter() - start, 2)
    metric = result.kind if isinstance(result.kind, str) else "custom"
    report = {
        "schema": SCHEMA, "model": hm.name, "kind": "causal LM" if hm.causal else "encoder",
        "n_layers": hm.n_layers, "n_heads": hm.n_heads, "seed": seed, "thresholds": dict(THRESHOLDS),
        "roles": copy.deepcopy(ROLES), "seconds": seconds,
        "inputs": {"source": source, "n_texts": len(shown), "texts": shown},
        "metric": {"kind": metric, "mode": result.mode,
                   "definition": METRIC_DEFINITIONS.get(metric, "a custom metric, ablated minus clean, per text"),
                   "clean": [_r(x) for x in result.clean]},
        "ablation": ablation, "selection": selection, "position": position, "circuits": circuits,
        "seeds": seeds, "tasks": tasks, "modes": modes, "redundancy": redundancy, "patterns_vs_writes": patterns,
        "keep": keep, "distillation": distillation, "figures": {},
    }
    report["checklist"] = checklist_table(report)
    return report


class _Steps:
    """Says which check is running (on stderr, like the progress bars), or nothing."""

    def __init__(self, show: bool, name: str):
        self.show, self.name = show, name

    def __call__(self, message: str) -> None:
        if self.show:
            print(f"checklist {self.name}: {message}", file=sys.stderr, flush=True)
