"""Chapter 7's claim rows, built from the stored results (:mod:`deviating.experiments.what_breaks`,
:mod:`deviating.experiments.students`), so that the chapter's
verdict cell is a few calls and every verdict comes from :func:`deviating.verdicts.judge`.

Each ``*_row`` function documents its quantity, null, conditions and which of them the claim
itself names (``required``). The conditions were fixed before the shipped run was looked at,
except two set afterwards and stated in their rows' notes: C10's pooled tail (it replaced the
earliest of three tails, a minimum that fails early by chance) and C13's "unseen by the layer
mean" (the claim's own wording, which the row had not tested).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab import stats
from deviating.analysis.failure import WindowTable, failure_bootstrap, failure_gap, pool_tables
from deviating.bands import BANDS
from headlab.stats.results import Estimate
from deviating.verdicts import ClaimRow, Measurement
from deviating.experiments.pruning import curve_tables
from deviating.analysis.failure import first_failure_interval
from deviating.analysis.inspection import auc_difference

__all__ = ["TAILS", "TAIL", "MINILM_TAIL", "TOLERANCES", "PRIMARY", "seed_of", "organism_gaps", "c10_organism_row", "minilm_tables",
           "minilm_gap", "c10_minilm_row", "c19_minilm_row", "window_difference", "c12_averaging_row",
           "c12_students_row", "c13_measurements", "c13_row"]

TAILS = ("agreement, attractor", "pronoun, distractor", "rare-word copies")  # subsets defined by a rare condition
# C10's tail is the three pooled, every item of each (a fixed definition). The earliest of three
# small, noisy tails was the quantity before; it fails early by chance alone, as a minimum does.
TAIL = "tail items, pooled"
TOLERANCES = (0.02, 0.05, 0.10)  # nats on the loss and accuracy points (as a fraction) on the tails, together
PRIMARY = 0.05  # the chapter's tolerance, fixed before the run
ORDERS = {"mean order": "mean (one-shot)", "worst-case order": "worst case (one-shot)",
          "iterative order": "mean (iterative)"}


def seed_of(model: str) -> int:
    """The training seed of an organism's name: ``organism`` 0, ``organism-s1`` 1, ..."""
    tail = model.rsplit("-s", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0


def _tables(record: dict, model: str, curve: str) -> dict[str, WindowTable]:
    m = record["models"][model]
    higher = {k: k != "loss" for k in m["items_per_window"]}
    return curve_tables(m, curve, higher, record["settings"]["counts"])


def tail_tables(record: dict, model: str, curve: str) -> dict[str, WindowTable]:
    """One organism's stored curve as the loss, each of :data:`TAILS`, and :data:`TAIL` (the
    three pooled: their items right over their items, window by window)."""
    tables = _tables(record, model, curve)
    out = {"loss": tables["loss"], **{t: tables[t] for t in TAILS}}
    out[TAIL] = pool_tables([tables[t] for t in TAILS])
    return out


def organism_gaps(record: dict, curve: str, tolerance: float, *, n_resamples: int = 2000,
                  tail: str = TAIL) -> dict[str, Estimate]:
    """Per organism model: the failure gap (:func:`deviating.analysis.failure.failure_gap`: the
    loss's first failure minus the tail's) of one stored curve at one tolerance (the same number
    for nats and accuracy points), resampling windows. ``tail``: :data:`TAIL` (the judged one)
    or one of :data:`TAILS`."""
    out = {}
    for model in record["models"]:
        tables = tail_tables(record, model, curve)
        if tail not in tables:
            raise ValueError(f"unknown tail {tail!r}; give {TAIL!r} or one of {TAILS}")
        tables = {"loss": tables["loss"], tail: tables[tail]}
        fb = failure_bootstrap(tables, {k: tolerance for k in tables}, n_resamples=n_resamples, seed=0)
        out[model] = failure_gap(fb, "loss", (tail,))
    return out


def _headline(ms: Sequence[Measurement], condition: str) -> Measurement:
    """The number the ledger prints for ``condition``: its mean over seeds with a t interval, or
    its one measurement when it has a single seed."""
    mine = [m for m in ms if m.condition == condition]
    if len(mine) == 1:
        return mine[0]
    return Measurement.from_estimate(stats.over_seeds([m.effect for m in mine]), f"{condition}, over seeds")


def _conditions(named: list[tuple[str, dict[str, Estimate]]], seeds) -> list[Measurement]:
    return [Measurement.from_estimate(est, cond, seeds(model)) for cond, by in named for model, est in by.items()]


def c10_organism_row(record: dict, *, n_resamples: int = 2000) -> ClaimRow:
    """C10 on the organism seeds: heads removed by which the tail (:data:`TAIL`, the items of
    :data:`TAILS` pooled) fails before the mean loss does (null 0; the claim predicts > 0). Conditions: the mean order
    under zero ablation at each of :data:`TOLERANCES`, and at :data:`PRIMARY` the mean order
    under mean and resample ablation and the worst-case and iterative orders. Required: the
    mean order, zero ablation, at the primary tolerance (the claim is about ranking by
    average importance: the other orders cannot rescue it)."""
    named = [(f"mean order, zero ablation, tolerance {t:g}", organism_gaps(record, ORDERS["mean order"], t,
                                                                          n_resamples=n_resamples))
             for t in TOLERANCES]
    for mode in record["settings"]["ablation_modes"]:
        named.append((f"mean order, {mode} ablation, tolerance {PRIMARY:g}",
                      organism_gaps(record, f"mean (one-shot), {mode} ablation", PRIMARY, n_resamples=n_resamples)))
    for label in ("worst-case order", "iterative order"):
        named.append((f"{label}, zero ablation, tolerance {PRIMARY:g}",
                      organism_gaps(record, ORDERS[label], PRIMARY, n_resamples=n_resamples)))
    primary = f"mean order, zero ablation, tolerance {PRIMARY:g}"
    ms = _conditions(named, seed_of)
    models = ", ".join(record["models"])
    n = record["settings"]["prune_eval_windows"]
    return ClaimRow("C10", f"organism ({models}), {n} held-out windows",
                    "heads removed by which the pooled tail fails before the mean loss",
                    0.0, "tail and loss fail together", "greater", tuple(ms),
                    headline=_headline(ms, primary), required=(primary,),
                    note="the tail: agreement with an attractor, pronouns with a distractor and rare-word copies, "
                         "pooled, a definition set after the run was seen, replacing the earliest of the three (a "
                         "minimum, early by chance); intervals resample windows; a measure that never fails counts "
                         "one past the last count")


def minilm_tables(minilm: dict, curve: str, subsets: Sequence[str]) -> dict[str, WindowTable]:
    """MiniLM's stored curve as one :class:`WindowTable` per subset: ``"all held-out"``, each
    construction of ``subsets`` (the construction's sentences weigh 1, the others 0) and, with
    two subsets or more, :data:`MINILM_TAIL` (their sentences together)."""
    values = np.asarray(minilm["curves"][curve]["per_sentence"], dtype=float).T  # (count, sentence)
    kinds = np.asarray(minilm["held_out_constructions"])
    counts = tuple(minilm["counts"])
    out = {"all held-out": WindowTable(counts, values, np.ones(len(kinds)), False)}
    for s in subsets:
        w = (kinds == s).astype(float)
        if not w.any():
            raise ValueError(f"no held-out sentence of construction {s!r}; held out: {sorted(set(kinds.tolist()))}")
        out[s] = WindowTable(counts, values * w, w, False)
    if len(subsets) > 1:
        out[MINILM_TAIL] = pool_tables([out[s] for s in subsets])
    return out


MINILM_TAILS = ("long_distance", "obj_rel", "pronoun")
MINILM_TAIL = "tail constructions, pooled"


def minilm_gap(minilm: dict, curve: str, tolerance: float, *, n_resamples: int = 2000) -> Estimate:
    """MiniLM's failure gap: the first failure of the held-out average minus that of the tail
    constructions' sentences pooled (:data:`MINILM_TAIL`), resampling sentences."""
    tables = minilm_tables(minilm, curve, MINILM_TAILS)
    tables = {k: tables[k] for k in ("all held-out", MINILM_TAIL)}
    fb = failure_bootstrap(tables, {k: tolerance for k in tables}, n_resamples=n_resamples, seed=0)
    return failure_gap(fb, "all held-out", (MINILM_TAIL,))


def c10_minilm_row(minilm: dict, tolerances=TOLERANCES, *, n_resamples: int = 2000) -> ClaimRow:
    """C10 on MiniLM: heads removed by which the tail constructions' sentences, pooled, pass the
    tolerance in mean ``1 - cos`` before the held-out average does. Conditions: the mean order under zero
    ablation at each tolerance; at :data:`PRIMARY` the mean order under the other ablations
    stored and the worst-case order. Required: the mean order, zero ablation, primary tolerance."""
    ms = [Measurement.from_estimate(minilm_gap(minilm, "mean (one-shot)", t, n_resamples=n_resamples),
                                    f"mean order, zero ablation, tolerance {t:g}") for t in tolerances]
    for name in minilm["curves"]:
        if name.startswith("mean (one-shot), "):
            mode = name.split(", ")[1].split()[0]
            ms.append(Measurement.from_estimate(minilm_gap(minilm, name, PRIMARY, n_resamples=n_resamples),
                                                f"mean order, {mode} ablation, tolerance {PRIMARY:g}"))
    ms.append(Measurement.from_estimate(minilm_gap(minilm, "worst case (one-shot)", PRIMARY, n_resamples=n_resamples),
                                        f"worst-case order, zero ablation, tolerance {PRIMARY:g}"))
    primary = f"mean order, zero ablation, tolerance {PRIMARY:g}"
    return ClaimRow("C10", f"MiniLM, English set, {len(minilm['held_out'])} held-out sentences",
                    "heads removed by which the pooled tail constructions move past the tolerance before the "
                    "average",
                    0.0, "tail and average fail together", "greater", tuple(ms), headline=_headline(ms, primary),
                    required=(primary,),
                    note="the metric is how far the sentence embedding moves (1 - cos), not a task; the tail: "
                         f"the {', '.join(MINILM_TAILS)} sentences pooled")


def c19_minilm_row(minilm: dict, *, share: float = 0.2, n_resamples: int = 2000) -> ClaimRow:
    """C19 on MiniLM: heads removed when the held-out average's ``1 - cos`` first exceeds
    :data:`PRIMARY`, against ``share`` of all heads (the null: what "many" is taken to mean).
    Conditions: each stored order (mean, its other ablations, worst case, each random order)."""
    n_heads = minilm["n_layers"] * minilm["n_heads"]
    ms = []
    for name in minilm["curves"]:
        tables = minilm_tables(minilm, name, ())
        fb = failure_bootstrap(tables, {"all held-out": PRIMARY}, n_resamples=n_resamples, seed=0)

        label = name.replace(" (one-shot)", " order").replace("random (seed ", "random order (seed ")
        label = label if "ablation" in label or label.startswith("random") else f"{label}, zero ablation"
        ms.append(Measurement.from_estimate(first_failure_interval(fb, "all held-out"), label))
    return ClaimRow("C19", f"MiniLM, English set, {len(minilm['held_out'])} held-out sentences",
                    f"heads removed when the mean 1 - cos first exceeds {PRIMARY:g}", share * n_heads,
                    f"{share:.0%} of the {n_heads} heads", "greater", tuple(ms))


def window_difference(a_sums, b_sums, weights, *, seed: int = 0) -> Estimate:
    """Mean of ``a - b`` over the units of paired per-window sums (a loss per window, or items
    right per window), with a bootstrap interval that resamples whole windows."""
    a, b, w = (np.asarray(x, dtype=float) for x in (a_sums, b_sums, weights))
    if not (a.shape == b.shape == w.shape):
        raise ValueError(f"a_sums, b_sums and weights must be paired per window: {a.shape}, {b.shape}, {w.shape}")
    keep = w > 0
    reps = w[keep].astype(int)
    values = np.repeat((a[keep] - b[keep]) / w[keep], reps)
    items = np.repeat(np.flatnonzero(keep), reps)
    return stats.bootstrap_mean(values, items, n_resamples=2999, seed=seed)


def c12_averaging_row(record: dict) -> ClaimRow:
    """C12 on the organism seeds, heads of a trained layer averaged: the harm of averaging, per
    layer: the loss increase (nats) under the mean output and under the mean pattern, and the
    drop of the accuracy on pronouns with a distractor under the mean pattern (the specialists'
    tail). Null 0 with the no-effect bands of the book's one band table (``deviating.bands.BANDS``:
    nats for the losses, accuracy for the pronouns): a harm that stays inside its band counts as none."""
    ms = []
    for model, m in record["models"].items():
        rows, w = m["rows"], m["items_per_window"]
        n_layers = sum(1 for k in rows if k.endswith(": removed"))
        clean = rows["clean"]["sums"]
        key = "pronoun, distractor"
        for layer in range(n_layers):
            out, pattern = rows[f"layer {layer}: mean output"]["sums"], rows[f"layer {layer}: mean pattern"]["sums"]
            for cond, est in ((f"layer {layer} mean output: loss",
                               window_difference(out["loss"], clean["loss"], w["loss"])),
                              (f"layer {layer} mean pattern: loss",
                               window_difference(pattern["loss"], clean["loss"], w["loss"])),
                              (f"layer {layer} mean pattern: pronouns with a distractor",
                               window_difference(clean[key], pattern[key], w[key]))):
                ms.append(Measurement.from_estimate(est, cond, seed_of(model)))
    # the headline, named before the data: the mean pattern's loss increase, averaged over the layers
    per_seed: dict = {}
    for m in ms:
        if m.condition.endswith("mean pattern: loss"):
            per_seed.setdefault(m.seed, []).append(m.effect)
    layer_means = [float(np.mean(v)) for v in per_seed.values()]
    cond = "mean pattern: loss, mean over the layers"
    if len(layer_means) > 1:
        headline = Measurement.from_estimate(stats.over_seeds(layer_means), f"{cond}, over seeds")
    else:  # one seed: the layers' mean, inside the widest span of their own intervals
        mine = [m for m in ms if m.condition.endswith("mean pattern: loss")]
        headline = Measurement(f"{cond} (interval: the layers' widest span)", layer_means[0],
                               min(m.low for m in mine), max(m.high for m in mine), mine[0].n, mine[0].seed)
    n = len(next(iter(record["models"].values()))["items_per_window"]["loss"])
    return ClaimRow("C12", f"organism ({', '.join(record['models'])}), {n} held-out windows",
                    "harm of averaging a layer's heads (loss increase, nats; or accuracy drop)", 0.0,
                    "the heads kept apart", "greater", tuple(ms), headline=headline,
                    note="headline, named before the data: the mean pattern's loss increase, averaged over the layers")


def c12_students_row(distillation: dict) -> ClaimRow:
    """C12 on the distillation students: the student taught the teacher's mean pattern against
    the one taught the per-head patterns, at equal compute, over training seeds (a t interval:
    the students' per-window values were not stored). Conditions: the validation loss
    (mean minus per-head) and the accuracy on pronouns with a distractor (per-head minus mean)."""
    runs = distillation["runs"]
    seeds = sorted({r["seed"] for r in runs if r["target"] == "mean"} & {r["seed"] for r in runs
                                                                         if r["target"] == "per_head"})
    if len(seeds) < 2:
        raise ValueError(f"need both targets at two seeds or more; have seeds {seeds}")

    def get(target, seed):
        return next(r["metrics"] for r in runs if r["target"] == target and r["seed"] == seed)

    def pron(m):
        return m["pronoun_by"]["distractor"]["True"]["acc"]

    loss = [get("mean", s)["val_loss"] - get("per_head", s)["val_loss"] for s in seeds]
    acc = [pron(get("per_head", s)) - pron(get("mean", s)) for s in seeds]
    label = f"{len(seeds)} seeds, t interval"
    ms = (Measurement.from_estimate(stats.over_seeds(loss), f"validation loss, mean minus per-head ({label})"),
          Measurement.from_estimate(stats.over_seeds(acc),
                                    f"pronouns with a distractor, per-head minus mean ({label})"))
    return ClaimRow("C12", f"students of {distillation['teacher']} (seeds {', '.join(map(str, seeds))})",
                    "how much worse the mean-taught student is than the per-head-taught one", 0.0,
                    "equally good students", "greater", ms)


def c13_measurements(kind: dict) -> dict[str, Estimate]:
    """The four C13 quantities of one kind of prediction on one model (a stored record of
    :func:`deviating.experiments.adversarial.adversarial_part`): the flip rate of the search minus
    the best random trigger of the same budget (paired over items, windows resampled); the
    captured head's weight on the trigger under the search minus under single random triggers,
    on the half of the items the head was not chosen on; the AUC of the per-head inspector of the
    weight before the sentence minus that of the layer-mean inspector; and how far the
    layer-mean inspector's AUC stays below the edge of chance's no-effect band,
    ``0.5 + BANDS["accuracy"] - AUC`` ("unseen by mean attention": positive when the mean
    cannot tell a hijacked input from a clean one; the band's edge is the null, because the
    claim is itself one of no effect)."""

    windows = np.asarray(kind["windows"])
    flips = stats.paired_difference(np.asarray(kind["success"], float), np.asarray(kind["random_success"], float),
                                    windows, n_resamples=2999)
    held = np.setdiff1d(np.arange(kind["n_attacked"]), kind["split"]["select"])
    w = kind["captured_weight"]
    capture = stats.paired_difference(np.asarray(w["search"])[held], np.asarray(w["single_mean"])[held],
                                      windows[held], n_resamples=2999)
    ph, mn = kind["inspectors"]["before, per_head"], kind["inspectors"]["before, mean"]
    auc = auc_difference(ph["clean"], ph["search"], mn["clean"], mn["search"], kind["success"])
    blind = np.zeros(len(mn["clean"]))  # scores no input apart: AUC 0.5 on every resample
    seen = auc_difference(mn["clean"], mn["search"], blind, blind, kind["success"])  # the mean's AUC - 0.5
    edge = BANDS["accuracy"]
    unseen = Estimate(edge - seen.value, edge - seen.high, edge - seen.low, seen.n, seen.level, seen.method)
    return {"flips": flips, "capture": capture, "auc": auc, "unseen": unseen}


def c13_row(record: dict) -> ClaimRow:
    """C13 on the organism seeds. Per kind (agreement, copy) and seed, the four quantities of
    :func:`c13_measurements`, each with null 0 and the claim predicting > 0. Required: the four
    agreement conditions (the subject head, the strongest specialist, is the "strong head"; the
    copy predictions rest on weak heads in this organism). "Unseen by mean attention" is one of
    them: the claim names it."""
    names = {"flips": "flips, search minus random (same budget)",
             "capture": "captured head's weight on the trigger, search minus random",
             "auc": "AUC, per-head inspector minus layer mean",
             "unseen": f"unseen by the layer mean: {0.5 + BANDS['accuracy']:g} minus its AUC"}
    ms = []
    for model, kinds in record["models"].items():
        for kind in ("agreement", "copy"):
            for key, est in c13_measurements(kinds[kind]).items():
                ms.append(Measurement.from_estimate(est, f"{kind}: {names[key]}", seed_of(model)))
    required = tuple(f"agreement: {v}" for v in names.values())
    n = record["settings"]["adversarial_targets"]
    return ClaimRow("C13", f"organism ({', '.join(record['models'])}), up to {n} predictions per kind",
                    "what the searched trigger does beyond random triggers", 0.0, "random triggers / the mean",
                    "greater", tuple(ms), headline=_headline(ms, required[0]), required=required,
                    note='"unseen by the layer mean" was added after the run was seen: the claim names it')
