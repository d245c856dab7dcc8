"""Chapter 7's hijacking experiment (the ``adversarial`` part of :func:`headlab.experiments.what_breaks.run_what_breaks`).

Gradient-guided trigger search (:func:`headlab.analysis.adversarial.trigger_search`, 3 slots
before the sentence) against the agreement and copy predictions of the evaluation windows that
the organism gets right (at most one per window first); the random-token control with a matched
budget of evaluations, and a single random draw; which head moves its attention to the trigger
(the captured head); and whether an inspector of where heads look flags the attacked inputs, per
head vs on the layer's mean pattern, calibrated on the same kind of targets from other windows.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from headlab.analysis.adversarial import agreement_targets, copy_targets, margins, random_triggers, trigger_search
from headlab.analysis.inspection import detection_rates, flag_inputs, query_rows, rates_from_scores, weight_before
from headlab.data.language import agreement_items, copy_items
from headlab.experiments.what_breaks import WhatBreaksSizes

__all__ = ["adversarial_part"]


def adversarial_part(hm, task, data, vocab, sizes: WhatBreaksSizes = WhatBreaksSizes(),
                     progress: bool = False) -> dict[str, Any]:
    """Trigger search against agreement and copy predictions of the evaluation windows ``data``
    (see the module docstring); ``vocab`` is unused (the part signature of
    :func:`headlab.experiments.what_breaks.run_what_breaks`)."""
    n_targets = sizes.adversarial_targets

    tok = hm.tokenizer
    sets = {"agreement": agreement_targets(data.windows, data.agreement, tok, k=3),
            "copy": copy_targets(data.windows, data.copy, tok, k=3)}
    # calibration inputs: the same kind of target, from other windows (calibration seed), picked by the same rule
    other = task.windows(2 * sizes.eval_windows, seed=sizes.calibration_seed)
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
        search = trigger_search(hm, attacked_set, n_steps=sizes.search_steps, top_k=sizes.search_top_k)
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
               "search": {"n_steps": sizes.search_steps, "top_k": sizes.search_top_k, "slots": 3, "seconds": search_seconds,
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
        if progress:
            print(f"{name}: search {res['search']['success_rate']:.3f}, random {res['random_best_of_budget']['success_rate']:.3f}"
                  f" ({search_seconds:.0f} s)", flush=True)
    return out
