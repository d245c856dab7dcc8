"""The five checks of the checklist, their thresholds, and :func:`checklist` which runs them.

See :mod:`headlab.report` for what each check measures and the JSON it returns. Every
threshold is a named constant here and travels with each report under ``thresholds``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import fields
from itertools import combinations

import numpy as np
import torch

from headlab.analysis.atlas import INDUCTION_LENGTH, _check_lengths, default_texts, repeated_random_tokens
from headlab.analysis.detect import DIFFUSE_ENTROPY, ORPHAN_EFFECT, PATTERN_SCORES, head_scores, label_heads
from headlab.analysis.importance import Importance, PairEffects, backup_heads, spearman
from headlab.analysis.sweep import sweep
from headlab.data.spans import repeated_tokens

__all__ = ["checklist", "report_inputs", "THRESHOLDS", "JSON_KEYS", "DISTILLATION", "SCHEMA"]

SCHEMA = "headlab.report/1"
N_TEXTS = 48                 # default texts: this many, evenly spread over the model's default set
HIGH_QUANTILE = 0.9          # the high quantile reported beside mean and worst case
TOP_K = 8                    # heads listed per ranking
TAIL_MEAN_BELOW = 0.25       # hidden in the tail: mean < 0.25 x the largest mean effect ...
TAIL_WORST_ABOVE = 1.0       # ... and worst > 1.0 x the largest mean effect (keep: worst >= it)
CIRCUIT_TEXTS = 8            # repeated random sequences for the circuit check
CANDIDATE_LIFT = 0.3         # previous-token / induction candidates: lift over uniform >= 0.3
MAX_CANDIDATES = 4           # at most this many candidates per family, strongest first
CIRCUIT_MIN_DROP = 0.1       # verified: the induction score drops by >= 0.1 (absolute) ...
CIRCUIT_MIN_RELATIVE_DROP = 0.25  # ... and by >= 25 % of its clean value
MAX_LAYER_PAIRS = 400        # scope "auto": pairs within layers up to this many, else top-k pairs
PAIR_TOP_K = 16              # scope "top": every pair among the 16 heads with the largest worst case
PAIR_MIN_EFFECT = 0.05       # pairs counted: mean pair effect > 0.05 x the largest single mean
UNDERESTIMATE_MARGIN = 0.1   # clearly underestimated: pair > (1 + 0.1) x sum of singles
BACKUP_FACTOR = 3.0          # backup: effect once the partner is removed > 3 x its own effect ...
BACKUP_MIN_EFFECT = 0.05     # ... and > 0.05 x the largest single mean
ORPHAN_WRITE_NORM = 1.5      # an orphan's write norm >= 1.5 x the median head's
SHARP_ENTROPY = 0.3          # sharp pattern: normalised entropy <= 0.3 ...
IDLE_EFFECT = 0.25           # ... idle: mean |effect| < 0.25 x the mean over heads

THRESHOLDS = {
    "N_TEXTS": N_TEXTS, "HIGH_QUANTILE": HIGH_QUANTILE, "TOP_K": TOP_K, "TAIL_MEAN_BELOW": TAIL_MEAN_BELOW,
    "TAIL_WORST_ABOVE": TAIL_WORST_ABOVE, "CIRCUIT_TEXTS": CIRCUIT_TEXTS, "CANDIDATE_LIFT": CANDIDATE_LIFT,
    "MAX_CANDIDATES": MAX_CANDIDATES, "CIRCUIT_MIN_DROP": CIRCUIT_MIN_DROP,
    "CIRCUIT_MIN_RELATIVE_DROP": CIRCUIT_MIN_RELATIVE_DROP, "MAX_LAYER_PAIRS": MAX_LAYER_PAIRS,
    "PAIR_TOP_K": PAIR_TOP_K, "PAIR_MIN_EFFECT": PAIR_MIN_EFFECT, "UNDERESTIMATE_MARGIN": UNDERESTIMATE_MARGIN,
    "BACKUP_FACTOR": BACKUP_FACTOR, "BACKUP_MIN_EFFECT": BACKUP_MIN_EFFECT, "DIFFUSE_ENTROPY": DIFFUSE_ENTROPY,
    "ORPHAN_EFFECT": ORPHAN_EFFECT, "ORPHAN_WRITE_NORM": ORPHAN_WRITE_NORM, "SHARP_ENTROPY": SHARP_ENTROPY,
    "IDLE_EFFECT": IDLE_EFFECT,
}

# The documented top-level keys of report.json and of each section (the tests hold the module to them).
JSON_KEYS = {
    "": ["schema", "model", "kind", "n_layers", "n_heads", "seed", "thresholds", "seconds", "inputs", "metric",
         "ablation", "circuits", "redundancy", "patterns_vs_writes", "keep", "figures"],
    "inputs": ["source", "n_texts", "texts"],
    "metric": ["kind", "mode", "definition", "clean"],
    "ablation": ["mean", "worst", "quantile", "q", "per_text", "top_by_mean", "top_by_worst", "top_by_quantile",
                 "hidden_in_the_tail", "spearman_mean_worst"],
    "circuits": ["inputs", "previous_token", "induction", "previous_token_candidates", "induction_candidates",
                 "pairs", "verified"],
    "redundancy": ["scope", "n_pairs", "pairs", "counted", "fraction_underestimated",
                   "fraction_clearly_underestimated", "median_ratio", "top_interactions", "backups"],
    "patterns_vs_writes": ["entropy", "write_norm", "abs_effect", "labels", "strength", "spearman_entropy_effect",
                           "spearman_write_norm_effect", "orphans_that_matter", "sharp_but_idle"],
    "keep": ["heads", "n_keep", "mean_ranking_would_drop", "distillation"],
}

DISTILLATION = ("Distil per-head patterns, not the mean pattern: the heads above do different jobs "
                "(and some only on a few inputs), and an average of their patterns is none of them.")

METRIC_DEFINITIONS = {
    "loss": "next-token loss (nats) with the head zero-ablated minus the clean loss, per text",
    "cosine": "1 - cos(pooled embedding with the head zero-ablated, clean pooled embedding), per text",
    "retrieval": "self-retrieval loss with the head zero-ablated minus the clean one, per text",
}


# ----------------------------------------------------------------------------- inputs


def _grid(t: torch.Tensor, digits: int = 5) -> list:
    return [[None if x != x else round(float(x), digits) for x in row] for row in t.tolist()]


def _spread(n: int, k: int) -> list[int]:
    """``k`` indices evenly spread over ``range(n)`` (all of them when ``k >= n``)."""
    return list(range(n)) if k >= n else sorted({int(round(x)) for x in np.linspace(0, n - 1, k)})


def report_inputs(hm, texts=None, n_texts: int | None = None, seed: int = 0) -> tuple[object, str, list[str]]:
    """The report's inputs: ``(inputs for hm, a sentence saying what they are, texts as strings)``.

    ``texts``: a list of strings, or None for the model's default set: the training
    distribution of an attention-only organism (repeated random spans), else
    :func:`headlab.analysis.atlas.default_texts`, spread down to ``n_texts`` (default ``N_TEXTS``).
    Given texts are all used unless ``n_texts`` is set.
    """
    if n_texts is not None and n_texts < 2:
        raise ValueError(f"n_texts must be at least 2 (a worst case needs several texts), got {n_texts}")
    if texts is not None:
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("texts must be a non-empty list of non-empty strings")
        if len(texts) < 2:
            raise ValueError("give at least 2 texts: the worst case over one text is its mean")
        keep = _spread(len(texts), n_texts or len(texts))
        texts = [texts[i] for i in keep]
        try:
            hm.tokenize(texts[:1])
        except Exception as err:  # noqa: BLE001 - the tokenizers library raises a bare Exception
            raise ValueError(f"{hm.name} cannot read the given texts ({err}); give texts in its vocabulary") from None
        _check_lengths(hm, texts)  # the atlas's check: no text longer than the model's maximum length
        return texts, f"{len(texts)} given texts", list(texts)
    n = n_texts or N_TEXTS
    spans = _span_task(hm)
    if spans is not None:
        batch = spans.sample(n, torch.Generator().manual_seed(seed)).tokens
        inputs = {"input_ids": batch, "attention_mask": torch.ones_like(batch)}
        source = (f"{n} sequences of the model's training data (random tokens with one span repeated, "
                  f"RepeatedSpans, seed {seed})")
    else:
        inputs, source = default_texts(hm, seed=seed)
        if isinstance(inputs, list):
            total = len(inputs)
            inputs = [inputs[i] for i in _spread(total, n)]
            if len(inputs) < total:
                source += f", {len(inputs)} of them evenly spread"
        else:
            inputs = {k: v[:n] for k, v in inputs.items()}
    if isinstance(inputs, list):
        return inputs, source, list(inputs)
    ids = inputs["input_ids"]
    shown = [hm.tokenizer.decode(row) if hm.tokenizer is not None else " ".join(map(str, row.tolist())) for row in ids]
    return inputs, source, shown


def _span_task(hm):
    """The RepeatedSpans task an attention-only organism was trained on, from its provenance, or None."""
    data = (getattr(hm, "provenance", None) or {}).get("data") or {}
    if data.get("kind") != "repeated_spans":
        return None
    from headlab.data.spans import RepeatedSpans

    names = {f.name for f in fields(RepeatedSpans)}
    return RepeatedSpans(**{k: v for k, v in data.items() if k in names})


def _repeated_sequences(hm, n: int, length: int, seed: int) -> dict:
    """Repeated random sequences (:func:`headlab.analysis.atlas.repeated_random_tokens`).

    Tokenizers that cannot encode an arbitrary string (a word-level vocabulary with no unknown
    token, as the attention-only organisms have) make the atlas's helper fail; for them the same
    sequences are built from token ids: ``<bos>`` (if any), ``length`` distinct ordinary tokens, the same again.
    """
    try:
        return repeated_random_tokens(hm, n=n, length=length, seed=seed)
    except Exception:  # noqa: BLE001 - the tokenizers library raises a bare Exception
        tok = hm.tokenizer
        special = set(getattr(tok, "all_special_ids", []) or [])
        pool = torch.tensor([i for i in range(len(tok)) if i not in special])
        bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
        ids = repeated_tokens(pool, n, min(length, len(pool)), torch.Generator().manual_seed(seed), prefix=bos)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


# ------------------------------------------------------------------------ the checklist


def _head(h) -> list[int]:
    return [int(h[0]), int(h[1])]


def _r(x, digits: int = 5) -> float | None:
    x = float(x)
    return None if x != x else round(x, digits)


def _rank_correlation(a, b) -> float | None:
    try:
        return _r(spearman(a, b), 4)
    except ValueError:  # a constant score has no ranking
        return None


def _ablation(imp: Importance, texts: list[str]) -> dict:
    """Item 1: per-head ablation deltas, their summaries and the heads hidden in the tail."""
    mean, worst, q = imp.mean(), imp.worst(), imp.quantile(HIGH_QUANTILE)
    arg = imp.effects.argmax(dim=-1)  # (n_layers, n_heads): the text of the worst case

    def row(h) -> dict:
        l, k = h
        return {"head": _head(h), "mean": _r(mean[l, k]), "worst": _r(worst[l, k]), "quantile": _r(q[l, k]),
                "worst_text": int(arg[l, k])}

    peak = float(mean.max())
    tail = imp.hidden_in_the_tail(TAIL_MEAN_BELOW * peak, TAIL_WORST_ABOVE * peak) if peak > 0 else []
    return {
        "mean": _grid(mean), "worst": _grid(worst), "quantile": _grid(q), "q": HIGH_QUANTILE,
        "per_text": [[[round(x, 5) for x in cell] for cell in layer] for layer in imp.effects.tolist()],
        "top_by_mean": [row(h) for h in imp.ranking("mean")[:TOP_K]],
        "top_by_worst": [row(h) for h in imp.ranking("worst")[:TOP_K]],
        "top_by_quantile": [row(h) for h in imp.ranking(f"q{round(HIGH_QUANTILE * 100)}")[:TOP_K]],
        "hidden_in_the_tail": [{**row(h), "text": texts[i]} for h, _, _, i in tail],
        "spearman_mean_worst": _rank_correlation(mean, worst),
    }


def _candidates(lift: torch.Tensor, layers) -> list[tuple[tuple[int, int], float]]:
    rows = [((l, h), float(lift[l, h])) for l in layers for h in range(lift.shape[1])
            if float(lift[l, h]) >= CANDIDATE_LIFT]
    return sorted(rows, key=lambda row: (-row[1], row[0]))[:MAX_CANDIDATES]


def _circuits(hm, seed: int):
    """Item 2: previous-token -> induction pairs from the detectors' scores, verified by ablation.

    Returns the section and the clean scores on the repeated sequences (a ``HeadScores``)."""
    repeats = _repeated_sequences(hm, CIRCUIT_TEXTS, INDUCTION_LENGTH, seed)
    clean = head_scores(hm, repeats, scores=["previous_token", "induction"])
    prev, induction = clean.mean("previous_token"), clean.mean("induction")
    prev_c = _candidates(clean.lift("previous_token"), range(hm.n_layers - 1))
    ind_c = _candidates(clean.lift("induction"), range(1, hm.n_layers))
    pairs = []
    for p, _ in prev_c:
        later = [i for i, _ in ind_c if i[0] > p[0]]
        if not later:
            continue
        with hm.ablate([p]):
            ablated = head_scores(hm, repeats, scores=["induction"]).mean("induction")
        for i in later:
            before, after = float(induction[i]), float(ablated[i])
            drop = before - after
            relative = drop / before if before > 0 else 0.0
            pairs.append({"previous_token": _head(p), "induction": _head(i), "clean": _r(before, 4),
                          "ablated": _r(after, 4), "drop": _r(drop, 4), "relative_drop": _r(relative, 4),
                          "verified": bool(drop >= CIRCUIT_MIN_DROP and relative >= CIRCUIT_MIN_RELATIVE_DROP)})
    pairs.sort(key=lambda row: -row["drop"])
    n = repeats["input_ids"].shape[0]
    return {
        "inputs": (f"{n} sequences of {INDUCTION_LENGTH} distinct random tokens followed by the same tokens "
                   f"again (seed {seed})"),
        "previous_token": _grid(prev, 4), "induction": _grid(induction, 4),
        "previous_token_candidates": [{"head": _head(h), "score": _r(prev[h], 4), "lift": _r(v, 4)} for h, v in prev_c],
        "induction_candidates": [{"head": _head(h), "score": _r(induction[h], 4), "lift": _r(v, 4)} for h, v in ind_c],
        "pairs": pairs, "verified": [p for p in pairs if p["verified"]],
    }, clean


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


def _redundancy(hm, inputs, imp: Importance, kind, scope: str, top_k: int, progress: bool) -> dict:
    """Item 3: pair ablations, how often single ablations underestimate them, backup heads."""
    scope, pairs = _pair_list(hm, imp, scope, top_k)
    result = sweep(hm, inputs, groups=[list(p) for p in pairs], kind=kind, progress=progress)
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


def _patterns_vs_writes(hm, inputs, imp: Importance, repeated) -> dict:
    """Item 4: attention entropy and write norms beside the ablation effect; orphans that matter."""
    wanted = [s for s in PATTERN_SCORES if s not in ("induction", "rare_token")] + ["write_norm"]
    scores = head_scores(hm, inputs, scores=wanted)
    entropy, write = scores.mean("entropy"), scores.mean("write_norm")
    effect = imp.effects.abs().mean(dim=-1)  # (n_layers, n_heads): mean |effect| over texts
    means = {n: m for n, m in scores.means().items() if n in PATTERN_SCORES}
    uniform = {n: torch.full_like(m, scores.uniform_mean(n)) for n, m in means.items()}
    # induction is scored on the repeated sequences of item 2, as in the atlas
    means["induction"] = repeated.mean("induction")
    uniform["induction"] = torch.full_like(means["induction"], repeated.uniform_mean("induction"))
    labels = label_heads(means, effect, uniform=uniform)
    average, median_write = float(effect.mean()), float(write.median())

    def row(l: int, h: int) -> dict:
        return {"head": [l, h], "entropy": _r(entropy[l, h], 4), "write_norm": _r(write[l, h], 4),
                "abs_effect": _r(effect[l, h])}

    heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    orphans = [row(l, h) for l, h in heads if entropy[l, h] >= DIFFUSE_ENTROPY
               and ((effect[l, h] > 0 and effect[l, h] >= ORPHAN_EFFECT * average)
                    or (write[l, h] > 0 and write[l, h] >= ORPHAN_WRITE_NORM * median_write))]
    idle = [row(l, h) for l, h in heads if entropy[l, h] <= SHARP_ENTROPY and effect[l, h] < IDLE_EFFECT * average]
    return {
        "entropy": _grid(entropy, 4), "write_norm": _grid(write, 4), "abs_effect": _grid(effect),
        "labels": labels.labels, "strength": _grid(labels.strength, 4),
        "spearman_entropy_effect": _rank_correlation(entropy, effect),
        "spearman_write_norm_effect": _rank_correlation(write, effect),
        "orphans_that_matter": sorted(orphans, key=lambda r: -r["abs_effect"]),
        "sharp_but_idle": sorted(idle, key=lambda r: r["entropy"]),
    }


def _keep(imp: Importance, circuits: dict, redundancy: dict, patterns: dict) -> dict:
    """Item 5: the heads a pruning or distillation plan must keep, each with its reasons."""
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
        add(p, f"circuit: previous-token head for induction head {i[0]}.{i[1]} (drop {pair['drop']:.2f})")
        add(i, f"circuit: induction head fed by {p[0]}.{p[1]} (drop {pair['drop']:.2f})")
    for b in redundancy["backups"]:
        a, k = b["removed"], b["backup"]
        add(k, f"backup: matters once {a[0]}.{a[1]} is removed ({b['alone']:.3g} alone, {b['given_removed']:.3g})")
        add(a, f"backed up by {k[0]}.{k[1]}")
    average = float(imp.effects.abs().mean())
    for o in patterns["orphans_that_matter"]:
        if average > 0 and o["abs_effect"] >= ORPHAN_EFFECT * average:
            add(o["head"], f"orphan: diffuse pattern (entropy {o['entropy']:.2f}) yet mean |effect| "
                           f"{o['abs_effect'] / average:.1f} x the average head")
    keep = sorted(reasons)
    by_mean = set(imp.ranking("mean")[:len(keep)])
    return {
        "heads": [{"head": _head(h), "reasons": reasons[h], "mean": _r(mean[h]), "worst": _r(worst[h])} for h in keep],
        "n_keep": len(keep),
        "mean_ranking_would_drop": [_head(h) for h in keep if h not in by_mean],
        "distillation": DISTILLATION,
    }


def checklist(hm, texts=None, *, n_texts: int | None = None, seed: int = 0, scope: str = "auto",
              top_k: int = PAIR_TOP_K, kind: str | None = None, progress: bool = False) -> dict:
    """Run the five checks of the checklist on ``hm`` and return the JSON-ready report (see the module docstring).

    Args:
        texts: a list of texts, or None for the model's default set (:func:`report_inputs`).
        n_texts: how many texts (default: ``N_TEXTS`` of a default set, every given text).
        seed: the draw of the repeated random sequences (and of a default set that is random).
        scope: which pairs to ablate: ``"layer"``, ``"top"`` or ``"auto"`` (see item 3).
        top_k: the number of heads whose pairs ``scope="top"`` ablates.
        kind: the metric (default: next-token loss for causal LMs, ``"cosine"`` for encoders).
        progress: show progress bars.
    """
    seconds: dict[str, float] = {}
    start = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(now - clock, 2)
        clock = now

    inputs, source, shown = report_inputs(hm, texts, n_texts, seed)
    step = _Steps(progress, hm.name)
    step(f"1/4 ablation deltas: every head, one at a time, on {len(shown)} texts")
    result = sweep(hm, inputs, kind=kind, progress=progress)
    imp = Importance.from_sweep(result)
    ablation = _ablation(imp, shown)
    lap("ablation")
    step("2/4 circuits: previous-token -> induction candidates, checked by ablation")
    circuits, repeated = _circuits(hm, seed)
    lap("circuits")
    step("3/4 redundancy: pair ablations")
    redundancy = _redundancy(hm, inputs, imp, kind, scope, top_k, progress)
    lap("redundancy")
    step("4/4 patterns vs writes, and what to keep")
    patterns = _patterns_vs_writes(hm, inputs, imp, repeated)
    keep = _keep(imp, circuits, redundancy, patterns)
    lap("patterns_and_keep")
    seconds["total"] = round(time.perf_counter() - start, 2)
    metric = result.kind if isinstance(result.kind, str) else "custom"
    return {
        "schema": SCHEMA, "model": hm.name, "kind": "causal LM" if hm.causal else "encoder",
        "n_layers": hm.n_layers, "n_heads": hm.n_heads, "seed": seed, "thresholds": dict(THRESHOLDS),
        "seconds": seconds,
        "inputs": {"source": source, "n_texts": len(shown), "texts": shown},
        "metric": {"kind": metric, "mode": result.mode,
                   "definition": METRIC_DEFINITIONS.get(metric, "a custom metric, ablated minus clean, per text"),
                   "clean": [_r(x) for x in result.clean]},
        "ablation": ablation, "circuits": circuits, "redundancy": redundancy, "patterns_vs_writes": patterns,
        "keep": keep, "figures": {},
    }


class _Steps:
    """Says which check is running (on stderr, like the progress bars), or nothing."""

    def __init__(self, show: bool, name: str):
        self.show, self.name = show, name

    def __call__(self, message: str) -> None:
        if self.show:
            print(f"checklist {self.name}: {message}", file=sys.stderr, flush=True)
