"""Chapter 7's claim rows, built from the stored results (:mod:`deviating.experiments.what_breaks`,
:mod:`deviating.experiments.students`), so that the chapter's
verdict cell is a few calls and every verdict comes from :func:`deviating.verdicts.judge`.

Each ``*_row`` function documents its quantity, null, conditions and which of them the claim
itself names (``required``), and declares the kind of each quantity. The conditions were fixed
before the shipped run was looked at, except what is stated in the rows' notes: C10's tail was
redefined after the run was seen (so its row now compares like with like: a task's hard cases
against the same task, in the same accuracy), and C13's "unseen by the layer mean" (the claim's
own wording, now an equivalence test on the AUC).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab import stats
from deviating.analysis.failure import WindowTable, failure_bootstrap, failure_gap, pool_tables
from headlab.stats.results import Estimate
from deviating.verdicts import ClaimRow, Measurement
from deviating.experiments.pruning import curve_tables
from deviating.analysis.failure import first_failure_interval
from deviating.analysis.inspection import auc_difference

__all__ = ["TAILS", "TAIL", "LIKE_FOR_LIKE", "POOLED_VS_LOSS", "MINILM_TAIL", "TOLERANCES", "PRIMARY", "seed_of",
           "organism_gaps",
           "like_for_like_gaps", "c10_organism_row", "minilm_tables",
           "minilm_gap", "c10_minilm_row", "c19_minilm_row", "window_difference", "c12_averaging_row",
           "c12_students_row", "c13_measurements", "c13_row"]

TAILS = ("agreement, attractor", "pronoun, distractor", "rare-word copies")  # subsets defined by a rare condition
# C10's tail is the three pooled, every item of each (a fixed definition). The earliest of three
# small, noisy tails was the quantity before; it fails early by chance alone, as a minimum does.
TAIL = "tail items, pooled"
# C10 like for like: a task's hard cases against the whole task, both in accuracy on the same items'
# task (pronouns with a distractor have no stored "all pronouns" to compare with)
LIKE_FOR_LIKE = (("agreement", "agreement, attractor"), ("copy in repeated spans", "rare-word copies"))
TOLERANCES = (0.02, 0.05, 0.10)  # nats on the loss and accuracy points (as a fraction) on the tails, together
PRIMARY = 0.05  # the chapter's tolerance, fixed before the run
#: C10's old comparison, reported beside the row: the pooled tail against the mean loss
POOLED_VS_LOSS = f"pooled tail vs mean loss, mean order, zero ablation, tolerance {PRIMARY:g}"
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


def like_for_like_gaps(record: dict, curve: str, tolerance: float, whole: str, hard: str, *,
                       n_resamples: int = 2000) -> dict[str, Estimate]:
    """Per organism model: heads removed by which a task's hard cases (``hard``, e.g. agreement
    with an attractor) fail before the whole task (``whole``, all agreement), both in accuracy
    at the same tolerance (:func:`deviating.analysis.failure.failure_gap`), resampling windows."""
    out = {}
    for model in record["models"]:
        tables = _tables(record, model, curve)
        tables = {whole: tables[whole], hard: tables[hard]}
        fb = failure_bootstrap(tables, {k: tolerance for k in tables}, n_resamples=n_resamples, seed=0)
        out[model] = failure_gap(fb, whole, (hard,))
    return out


def _conditions(named: list[tuple[str, dict[str, Estimate]]], seeds) -> list[Measurement]:
    return [Measurement.from_estimate(est, cond, seeds(model)) for cond, by in named for model, est in by.items()]


def c10_organism_row(record: dict, *, n_resamples: int = 2000) -> ClaimRow:
    """C10 on the organism seeds, like for like: heads removed by which a task's hard cases fail
    before the whole task, in accuracy on that task (null 0; the claim predicts > 0), for each
    pair of :data:`LIKE_FOR_LIKE`. Conditions per pair: the mean order under zero ablation at each
    of :data:`TOLERANCES`, and at :data:`PRIMARY` the mean order under mean and resample ablation
    and the worst-case and iterative orders. The primary endpoint: agreement with an attractor
    against all agreement, mean order, zero ablation, tolerance :data:`PRIMARY` (the claim is
    about ranking by average importance). Beside the row: the pooled tail against the mean loss,
    the comparison set after the run was seen, which weighs nats against accuracy points."""
    named = []
    for whole, hard in LIKE_FOR_LIKE:
        def gaps(curve, tol, whole=whole, hard=hard):
            return like_for_like_gaps(record, curve, tol, whole, hard, n_resamples=n_resamples)
        pair = f"{hard} vs {'all ' + whole if whole == 'agreement' else whole}"
        named += [(f"{pair}, mean order, zero ablation, tolerance {t:g}", gaps(ORDERS["mean order"], t))
                  for t in TOLERANCES]
        named += [(f"{pair}, mean order, {mode} ablation, tolerance {PRIMARY:g}",
                   gaps(f"mean (one-shot), {mode} ablation", PRIMARY))
                  for mode in record["settings"]["ablation_modes"]]
        named += [(f"{pair}, {label}, zero ablation, tolerance {PRIMARY:g}", gaps(ORDERS[label], PRIMARY))
                  for label in ("worst-case order", "iterative order")]
    post_hoc = POOLED_VS_LOSS
    named.append((post_hoc, organism_gaps(record, ORDERS["mean order"], PRIMARY, n_resamples=n_resamples)))
    ms = _conditions(named, seed_of)
    models = ", ".join(record["models"])
    n = record["settings"]["prune_eval_windows"]
    return ClaimRow("C10", f"organism ({models}), {n} held-out windows",
                    "heads removed by which a task's hard cases fail before the whole task (accuracy)",
                    0.0, "hard cases and task fail together", "greater", tuple(ms), unit="count",
                    primary=named[0][0].replace(f"tolerance {TOLERANCES[0]:g}", f"tolerance {PRIMARY:g}"),
                    beside={post_hoc: "not like for like (nats against accuracy points), and its tail was "
                                      "redefined after the run was seen"},
                    note="intervals resample windows; a measure that never fails counts one past the last count; "
                         "pronouns with a distractor are left out: no stored whole task to compare them with")


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
                    0.0, "tail and average fail together", "greater", tuple(ms), unit="count",
                    primary=primary, required=(primary,),
                    note="the metric is how far the sentence embedding moves (1 - cos), not a task; the tail: "
                         f"the {', '.join(MINILM_TAILS)} sentences pooled")


def c19_minilm_row(minilm: dict, *, share: float = 0.2, n_resamples: int = 2000) -> ClaimRow:
    """C19 on MiniLM: heads removed when the held-out average's ``1 - cos`` first exceeds
    :data:`PRIMARY`, against ``share`` of all heads (the null: what "many" is taken to mean).
    Conditions: each stored order (mean, its other ablations, worst case); each random order is
    a control, reported beside the row."""
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
                    f"{share:.0%} of the {n_heads} heads", "greater", tuple(ms), unit="count",
                    beside={m.condition: "a control: removal in a random order, not by importance"
                            for m in ms if m.condition.startswith("random")})


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
    ms, units = [], {}
    primary = "mean pattern: loss, mean over the layers"
    for model, m in record["models"].items():
        rows, w = m["rows"], m["items_per_window"]
        n_layers = sum(1 for k in rows if k.endswith(": removed"))
        clean = rows["clean"]["sums"]
        key = "pronoun, distractor"
        pattern_mean = np.mean([rows[f"layer {layer}: mean pattern"]["sums"]["loss"] for layer in range(n_layers)],
                               axis=0)
        ms.append(Measurement.from_estimate(window_difference(pattern_mean, clean["loss"], w["loss"]), primary,
                                            seed_of(model)))
        for layer in range(n_layers):
            out, pattern = rows[f"layer {layer}: mean output"]["sums"], rows[f"layer {layer}: mean pattern"]["sums"]
            for cond, est in ((f"layer {layer} mean output: loss",
                               window_difference(out["loss"], clean["loss"], w["loss"])),
                              (f"layer {layer} mean pattern: loss",
                               window_difference(pattern["loss"], clean["loss"], w["loss"])),
                              (f"layer {layer} mean pattern: pronouns with a distractor",
                               window_difference(clean[key], pattern[key], w[key]))):
                ms.append(Measurement.from_estimate(est, cond, seed_of(model)))
                units[cond] = "accuracy" if cond.endswith("distractor") else "nats"
    n = len(next(iter(record["models"].values()))["items_per_window"]["loss"])
    return ClaimRow("C12", f"organism ({', '.join(record['models'])}), {n} held-out windows",
                    "harm of averaging a layer's heads (loss increase, nats; or accuracy drop)", 0.0,
                    "the heads kept apart", "greater", tuple(ms), unit="nats", units=units, primary=primary,
                    note="the primary endpoint, named before the data: the mean pattern's loss increase, averaged "
                         "over the layers")


def c12_students_row(distillation: dict) -> ClaimRow:
    """C12 on the distillation students: the student taught the teacher's mean pattern against
    the one taught the per-head patterns, at equal compute, over training seeds (a t interval:
    the students' per-window values were not stored). Conditions: the validation loss
    (mean minus per-head) and the accuracy on pronouns with a distractor (per-head minus mean)."""
    runs = distillation["runs"]
    seeds = sorted({r["seed"] for r in runs if r["target"] == "mean"} & {r["seed"] for r in runs
                                                                         if r["target"] == "per_head"})
    if len(seeds) < 3:
        raise ValueError(f"need both targets at three seeds or more; have seeds {seeds}")

    def get(target, seed):
        return next(r["metrics"] for r in runs if r["target"] == target and r["seed"] == seed)

    def pron(m):
        return m["pronoun_by"]["distractor"]["True"]["acc"]

    loss = [get("mean", s)["val_loss"] - get("per_head", s)["val_loss"] for s in seeds]
    acc = [pron(get("per_head", s)) - pron(get("mean", s)) for s in seeds]
    label = f"{len(seeds)} seeds, t interval"
    df = len(seeds) - 1  # a t interval over the seeds: its p-value is read with t(n - 1), not the normal
    ms = (Measurement.from_estimate(stats.over_seeds(loss), f"validation loss, mean minus per-head ({label})",
                                    df=df),
          Measurement.from_estimate(stats.over_seeds(acc),
                                    f"pronouns with a distractor, per-head minus mean ({label})", df=df))
    return ClaimRow("C12", f"students of {distillation['teacher']} (seeds {', '.join(map(str, seeds))})",
                    "how much worse the mean-taught student is than the per-head-taught one", 0.0,
                    "equally good students", "greater", ms, unit="nats", units={ms[1].condition: "accuracy"},
                    items="seeds")


def c13_measurements(kind: dict) -> dict[str, Estimate]:
    """The four C13 quantities of one kind of prediction on one model (a stored record of
    :func:`deviating.experiments.adversarial.adversarial_part`): the flip rate of the search minus
    the best random trigger of the same budget (paired over items, windows resampled); the
    captured head's weight on the trigger under the search minus under single random triggers,
    on the half of the items the head was not chosen on; the AUC of the per-head inspector of the
    weight before the sentence minus that of the layer-mean inspector; and the layer-mean
    inspector's AUC minus chance, ``AUC - 0.5`` ("unseen by mean attention" is the claim that
    this lies inside the no-effect band of an AUC: an equivalence test, see :func:`c13_row`)."""

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
    return {"flips": flips, "capture": capture, "auc": auc, "unseen": seen}


def c13_row(record: dict) -> ClaimRow:
    """C13 on the organism seeds. Per kind (agreement, copy) and seed, the four quantities of
    :func:`c13_measurements`, each with null 0 and the claim predicting > 0. Required: the four
    agreement conditions (the subject head, the strongest specialist, is the "strong head"; the
    copy predictions rest on weak heads in this organism). "Unseen by mean attention" is one of
    them: the claim names it. It is a claim of no effect, so it is an equivalence condition: it
    holds when the two one-sided tests put the layer mean's AUC within the AUC band of 0.5
    (``deviating.bands.BANDS["auc"]``), as a blind inspector's would be."""
    names = {"flips": "flips, search minus random (same budget)",
             "capture": "captured head's weight on the trigger, search minus random",
             "auc": "AUC, per-head inspector minus layer mean",
             "unseen": "unseen by the layer mean: its AUC minus 0.5"}
    kinds = {"flips": "accuracy", "capture": "share", "auc": "auc", "unseen": "auc"}
    ms, units = [], {}
    for model, parts in record["models"].items():
        for kind in ("agreement", "copy"):
            for key, est in c13_measurements(parts[kind]).items():
                ms.append(Measurement.from_estimate(est, f"{kind}: {names[key]}", seed_of(model)))
                units[f"{kind}: {names[key]}"] = kinds[key]
    required = tuple(f"agreement: {v}" for v in names.values())
    n = record["settings"]["adversarial_targets"]
    return ClaimRow("C13", f"organism ({', '.join(record['models'])}), up to {n} predictions per kind",
                    "what the searched trigger does beyond random triggers", 0.0, "random triggers / the mean",
                    "greater", tuple(ms), units=units, required=required,
                    equivalence=tuple(f"{k}: {names['unseen']}" for k in ("agreement", "copy")),
                    note='"unseen by the layer mean" was added after the run was seen: the claim names it; an '
                         "equivalence test, with the AUC band as its margin")
