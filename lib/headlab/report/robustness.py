"""Checks 2, 3 and 7 of the checklist: select on one split and measure on the other; condition on
position; and change the ablation mode and the metric.

Each takes the single-head effects already measured (an :class:`~headlab.analysis.importance.Importance`)
and asks whether what the report concludes from them survives a fairer or a different measurement.
"""

from __future__ import annotations

import numpy as np
import torch

from headlab import stats
from headlab.analysis.importance import Importance
from headlab.stats import spearman
from headlab.analysis.sweep import sweep
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.metrics import Metric
from headlab.report.thresholds import top_count

__all__ = ["selection_section", "position_section", "modes_section", "next_token_error", "rank_correlation",
           "top_heads", "SECOND_METRIC"]

SECOND_METRIC = {"causal LM": "next-token error rate (1 - top-1 accuracy), ablated minus clean",
                 "encoder": "self-retrieval loss (InfoNCE over the batch), ablated minus clean"}


def rank_correlation(a, b) -> float | None:
    """Spearman correlation of two score grids, rounded; ``None`` when one is constant."""
    try:
        r = spearman(a, b)
    except ValueError:  # a constant score has no ranking
        return None
    return None if r != r else round(r, 4)


def top_heads(score: torch.Tensor, k: int) -> list[tuple[int, int]]:
    """The ``k`` largest entries of a ``(L, H)`` grid, rounded before sorting, ties by head index."""
    flat = [(round(float(x), 6), i) for i, x in enumerate(score.flatten().tolist())]
    order = sorted(flat, key=lambda t: (-t[0], t[1]))[:k]
    return [divmod(i, score.shape[1]) for _, i in order]


def selection_section(imp: Importance, seed: int = 0, top_k: int | None = None) -> dict:
    """Check 2, ``selection``: the top heads by mean effect chosen on half of the texts and measured
    on the other half (:func:`headlab.stats.split_items`, seeded), beside their in-sample means.

    The in-sample mean of a head chosen because it was largest is biased upwards; the held-out
    mean is the number to report. Also: the rank correlation of every head's mean effect between
    the halves, and how many of the top heads each half would pick agree.
    """
    n = imp.effects.shape[-1]
    top_k = top_count(imp.n_layers * imp.n_heads) if top_k is None else top_k
    if n < 4:
        return {"measured": False, "why": f"a held-out selection needs at least 4 texts (2 a side); got {n}"}
    split = stats.split_items(n, seed=seed)
    chosen_on, held = torch.as_tensor(split.select), torch.as_tensor(split.measure)
    a, b = imp.mean(chosen_on), imp.mean(held)
    top_a, top_b = top_heads(a, top_k), top_heads(b, top_k)
    rows = []
    for h in top_a:
        values = imp.effects[h[0], h[1], held].numpy().astype(float)
        est = stats.bootstrap_mean(values, seed=seed, n_resamples=1999, method="percentile")
        rows.append({"head": Head(*h).to_json(), "in_sample": round(float(a[h]), 5), "held_out": round(est.value, 5),
                     "held_out_low": round(est.low, 5), "held_out_high": round(est.high, 5)})
    shrink = [r["in_sample"] - r["held_out"] for r in rows]
    return {"measured": True, "seed": seed, "n_select": int(chosen_on.numel()), "n_measure": int(held.numel()), "top": rows,
            "mean_shrinkage": round(float(np.mean(shrink)), 5),
            "top_k_agreement": len(set(top_a) & set(top_b)), "top_k": top_k,
            "spearman_halves": rank_correlation(a, b)}


def position_section(hm, inputs, imp: Importance, *, progress: bool = False) -> dict:
    """Check 3, ``position``: for a causal LM, every head's effect on the next-token loss of the
    first half and of the second half of each text's positions, and the heads whose effect is
    largest on one half only. For an encoder (one embedding per text) it is not measured."""
    if not hm.causal:
        return {"measured": False, "why": f"{hm.name} is an encoder: its metric is one embedding per text, "
                "with no position to condition on"}
    batch = hm.tokenize(inputs)
    real = batch["attention_mask"].bool()
    length = real.sum(-1, keepdim=True)  # (n, 1)
    pos = torch.arange(real.shape[1], device=real.device)[None]
    early = real & (pos < length // 2)
    late = real & (pos >= length // 2) & (pos < length - 1)
    means = {}
    for name, mask in (("early", early), ("late", late)):
        result = sweep(hm, batch, metric=Metric("loss", loss_mask=mask), progress=progress)
        means[name] = Importance.from_sweep(result).mean()
    gap = means["late"] - means["early"]
    rows = [{"head": Head(*h).to_json(), "early": round(float(means["early"][h]), 5),
             "late": round(float(means["late"][h]), 5)} for h in top_heads(gap.abs(), top_count(gap.numel()))]
    return {"measured": True, "spearman_early_late": rank_correlation(means["early"], means["late"]),
            "early": [[round(float(x), 5) for x in r] for r in means["early"].tolist()],
            "late": [[round(float(x), 5) for x in r] for r in means["late"].tolist()],
            "largest_gaps": rows}


def next_token_error(output: torch.Tensor, batch) -> torch.Tensor:
    """Per input, the share of next-token predictions that are wrong (argmax is not the next token),
    over real positions: a second metric for a causal LM, beside the loss."""
    ids, mask = batch["input_ids"], batch["attention_mask"].bool()
    wrong = output[:, :-1].argmax(-1) != ids[:, 1:]  # (rows, pos - 1)
    counted = mask[:, 1:] & mask[:, :-1]
    return (wrong & counted).sum(-1).float() / counted.sum(-1).clamp(min=1).float()


def modes_section(hm, inputs, imp: Importance, metric: Metric | None = None, seed: int = 0,
                  top_k: int | None = None) -> dict:
    """Check 7, ``modes``: the ``top_k`` heads by mean effect (default
    :func:`~headlab.report.thresholds.top_count`) re-measured under mean and resample
    ablation (reference: the same texts) and, under zero ablation, with a second metric
    (:data:`SECOND_METRIC`). For each condition: each head's mean effect, the condition's own
    order of those heads, and its rank correlation with the zero-ablation order."""
    heads = top_heads(imp.mean(), top_count(imp.n_layers * imp.n_heads) if top_k is None else top_k)
    base = torch.tensor([float(imp.mean()[h]) for h in heads])
    second = Metric(next_token_error) if hm.causal else Metric("retrieval")
    conditions = {
        "mean ablation": dict(ablation=Ablation("mean", reference=inputs), metric=metric),
        "resample ablation": dict(ablation=Ablation("resample", reference=inputs, seed=seed), metric=metric),
        "second metric": dict(ablation=None, metric=second),
    }
    out = {"heads": [Head(*h).to_json() for h in heads], "zero": [round(float(x), 5) for x in base],
           "second_metric": SECOND_METRIC["causal LM" if hm.causal else "encoder"], "conditions": {}}
    for name, kwargs in conditions.items():
        result = sweep(hm, inputs, groups=[[h] for h in heads], **kwargs)
        values = result.effects.mean(dim=-1)
        order = sorted(range(len(heads)), key=lambda i: (-round(float(values[i]), 6), i))
        out["conditions"][name] = {"effects": [round(float(x), 5) for x in values],
                                   "order": [Head(*heads[i]).to_json() for i in order],
                                   "spearman_with_zero": rank_correlation(values, base),
                                   "mode": result.mode, "metric": result.kind if isinstance(result.kind, str) else
                                   "custom"}
    return out
