"""Chapter 7's hijacking experiment (the ``adversarial`` part of :func:`deviating.experiments.what_breaks.run_what_breaks`).

On one organism: agreement and copy predictions of the evaluation windows that the model gets
right (at most one per window first), attacked by gradient-guided trigger search
(:func:`deviating.analysis.adversarial.trigger_search`, 3 slots before the sentence). The
controls, on the same items and slots: random triggers with the search's budget (the best of as
many draws as the search evaluated), and ``random_trigger_draws`` single random triggers, whose
flips and attention give the distribution a trigger that was not searched for produces. The
*captured head* is chosen on one half of the items (the head whose weight on the trigger grows
most under the search, beyond what single random triggers cause) and its weights are stored for
every item, so that it can be measured on the other half. Each inspector
(:func:`deviating.analysis.inspection.inspector_scores`) scores every item's clean, searched and
random-trigger input against clean calibration inputs of other windows, so that inspectors can
be compared threshold-free (ROC AUC) and at a matched false-positive rate.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from deviating.analysis.adversarial import agreement_targets, copy_targets, margins, random_triggers, trigger_search
from deviating.analysis.inspection import INSPECTORS, inspector_scores, query_rows
from deviating.data.language import agreement_items, copy_items
from headlab.stats import split_items

__all__ = ["pick_targets", "weight_on_slots", "adversarial_part"]


def pick_targets(hm, targets, n: int) -> tuple[list, list[int], int]:
    """Up to ``n`` targets the model predicts right, taken window by window: the first target of
    every window, then the second, ... (margins are computed only as far as needed).

    Returns ``(picked, window of each, how many targets were scored)``."""
    groups: dict[tuple, list] = {}
    for t in targets:
        groups.setdefault(tuple(t.ids.tolist()), []).append(t)
    windows = list(groups.values())
    order = [(w, g[k]) for k in range(max((len(g) for g in windows), default=0))
             for w, g in enumerate(windows) if k < len(g)]
    picked, where, scored = [], [], 0
    for start in range(0, len(order), max(2 * n, 1)):
        chunk = order[start:start + 2 * n]
        m = margins(hm, [t for _, t in chunk])
        scored += len(chunk)
        for (w, t), mm in zip(chunk, m.tolist()):
            if mm > 0 and len(picked) < n:
                picked.append(t)
                where.append(w)
        if len(picked) >= n:
            break
    return picked, where, scored


def weight_on_slots(rows: torch.Tensor, targets) -> torch.Tensor:
    """``(n, layer, head)``: the attention each head puts on the target's slots (the trigger),
    from query rows ``(n, layer, head, pos)``."""
    slots = torch.tensor([list(t.slots) for t in targets])  # (n, k)
    index = slots[:, None, None, :].expand(-1, rows.shape[1], rows.shape[2], -1)
    return rows.gather(3, index).sum(-1)


def _pad(rows: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(rows, (0, width - rows.shape[-1]))


def _kind(hm, attacked, windows, calibration, sizes, progress: bool, name: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    search = trigger_search(hm, attacked, n_steps=sizes.search_steps, top_k=sizes.search_top_k)
    search_seconds = time.perf_counter() - t0
    budget = max(int(search.evaluations.float().mean().round()), 1)
    best = random_triggers(hm, attacked, n_draws=budget, seed=0)
    singles = [random_triggers(hm, attacked, n_draws=1, seed=1 + r) for r in range(sizes.random_trigger_draws)]
    length = search.ids.shape[1]
    queries = torch.tensor([t.query for t in attacked])
    rows = {"clean": query_rows(hm, torch.stack([t.ids[:length] for t in attacked]), queries),
            "search": query_rows(hm, search.ids, queries), "random": query_rows(hm, best.ids, queries)}
    on = {k: weight_on_slots(r, attacked) for k, r in rows.items()}  # (n, layer, head)
    single_on = torch.stack([weight_on_slots(query_rows(hm, s.ids, queries), attacked) for s in singles]).mean(0)
    split = split_items(len(attacked), seed=0)
    gain = (on["search"] - single_on)[torch.as_tensor(split.select)].mean(0)  # (layer, head)
    l, h = divmod(int(torch.argmax(gain.flatten())), hm.n_heads)  # first maximum: ties go to the lower index
    measure = torch.as_tensor(split.measure)
    res: dict[str, Any] = {
        "n_attacked": len(attacked), "windows": windows,
        "labels": [t.label for t in attacked],
        "search": {"n_steps": sizes.search_steps, "top_k": sizes.search_top_k, "slots": 3,
                   "seconds": search_seconds, "mean_evaluations": budget},
        "random_best_draws": budget, "random_single_draws": sizes.random_trigger_draws,
        "clean_margin": search.clean_margin.tolist(), "margin": search.margin.tolist(),
        "random_margin": best.margin.tolist(),
        "success": search.success.tolist(), "random_success": best.success.tolist(),
        "single_flips": torch.stack([s.success for s in singles]).sum(0).tolist(),
        "split": {"seed": split.seed, "select": split.select.tolist()},
        "captured_head": [l, h],
        "captured_weight": {"clean": on["clean"][:, l, h].tolist(), "search": on["search"][:, l, h].tolist(),
                            "random": on["random"][:, l, h].tolist(), "single_mean": single_on[:, l, h].tolist()},
        "head_weight_on_trigger": {k: v[measure].mean(0).tolist() for k, v in
                                   (("clean", on["clean"]), ("search", on["search"]), ("single_mean", single_on))},
    }
    cq = torch.tensor([t.query for t in calibration])
    calib_rows = query_rows(hm, torch.stack([t.ids[:max(t.query for t in calibration) + 1] for t in calibration]), cq)
    width = max(calib_rows.shape[-1], length)
    calib_rows = _pad(calib_rows, width)
    boundary = torch.tensor([max(t.slots) + 1 for t in attacked])  # the trigger is before the sentence
    calib_boundary = torch.tensor([max(t.slots) + 1 for t in calibration])
    res["inspectors"] = {
        f"{inspector}, {mode}": {k: inspector_scores(_pad(r, width), boundary, calib_rows, calib_boundary,
                                                     inspector, mode).tolist() for k, r in rows.items()}
        for inspector in INSPECTORS for mode in ("per_head", "mean")}
    res["n_calibration"] = len(calibration)
    if progress:
        print(f"{name}: search {float(search.success.float().mean()):.3f}, best of {budget} random "
              f"{float(best.success.float().mean()):.3f} ({search_seconds:.0f} s)", flush=True)
    return res


def adversarial_part(hm, task, data, vocab, sizes, progress: bool = False) -> dict[str, Any]:
    """Trigger search against agreement and copy predictions of one organism (see the module
    docstring). ``data`` and ``vocab`` are unused: the part draws its own
    ``sizes.adversarial_windows`` evaluation windows and calibration windows (seed
    ``sizes.calibration_seed``); ``sizes`` is a :class:`deviating.experiments.what_breaks.WhatBreaksSizes`."""
    tok = hm.tokenizer
    adv = task.eval_data(sizes.adversarial_windows)
    sets = {"agreement": agreement_targets(adv.windows, adv.agreement, tok, k=3),
            "copy": copy_targets(adv.windows, adv.copy, tok, k=3)}
    other = task.windows(sizes.adversarial_windows, seed=sizes.calibration_seed)
    calibration = {"agreement": agreement_targets(other, agreement_items(other), tok, k=3),
                   "copy": copy_targets(other, copy_items(other, task.lang), tok, k=3)}
    out = {}
    for name, targets in sets.items():
        attacked, windows, scored = pick_targets(hm, targets, sizes.adversarial_targets)
        calib, _, _ = pick_targets(hm, calibration[name], sizes.adversarial_targets)
        if len(attacked) < 4 or len(calib) < 4:
            raise ValueError(f"{name}: only {len(attacked)} attackable and {len(calib)} calibration predictions; "
                             "use more adversarial_windows")
        out[name] = {"n_candidates": len(targets), "n_scored": scored,
                     **_kind(hm, attacked, windows, calib, sizes, progress, name)}
    return out
