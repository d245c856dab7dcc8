"""The checklist's distillation test, measured instead of advised: what a layer loses when every
head of it gets the layer's mean attention pattern (the best a student trained to match the mean
pattern could do), and the sentence the report writes from that number.

For a model whose attention pattern can be replaced before it weighs the values (headlab's
GPT, :meth:`~headlab.heads.model.HeadModel.patch_pattern`), :func:`distillation_section` gives
each layer in turn the mean of its heads' patterns and measures the change of the model's metric
per text, with a paired bootstrap interval over texts. Other models are reported as not measured,
with the reason; the report never writes a recommendation it did not measure.
"""

from __future__ import annotations

import torch

from headlab import stats
from headlab.metrics import Metric

__all__ = ["distillation_section", "distillation_advice", "mean_pattern"]


def mean_pattern(layer: int, pattern: torch.Tensor) -> torch.Tensor:
    """Every head of the layer gets the layer's mean pattern: ``(batch, head, q_pos, k_pos)`` in and out."""
    return pattern.mean(dim=1, keepdim=True).expand_as(pattern)


def _metric(hm, batch) -> torch.Tensor:
    with torch.no_grad():
        return Metric().bound(hm).score(hm.forward(batch), batch).float().cpu()


def distillation_section(hm, inputs, seed: int = 0) -> dict:
    """The cost of each layer's mean pattern, per layer (see the module docstring).

    Returns ``{"measured": False, "why": ...}`` for a model whose pattern cannot be replaced, else
    ``{"measured": True, "metric", "layers": [{"layer", "cost", "low", "high", "n"}], "advice"}``:
    ``cost`` is the mean over texts of metric(mean pattern) - metric(clean), positive = the mean
    pattern is worse.
    """
    if not getattr(hm.arch, "pattern_replaceable", False):
        return {"measured": False, "why": f"{hm.name} computes its attention pattern inside its attention "
                "kernel, so the mean pattern cannot be substituted: not measured", "advice": None}
    if not hm.causal:
        raise ValueError(f"{hm.name}: the distillation test reads the next-token loss of a causal LM")
    batch = hm.tokenize(inputs)
    clean = _metric(hm, batch)
    layers = []
    for layer in range(hm.n_layers):
        with hm.patch_pattern(mean_pattern, layers=[layer]):
            averaged = _metric(hm, batch)
        est = stats.paired_difference(averaged.numpy(), clean.numpy(), seed=seed, n_resamples=1999,
                                      method="percentile")
        layers.append({"layer": layer, "cost": round(est.value, 5), "low": round(est.low, 5),
                       "high": round(est.high, 5), "n": est.n})
    return {"measured": True, "metric": "next-token loss (nats), mean pattern minus clean, per text",
            "layers": layers, "advice": distillation_advice(layers)}


def distillation_advice(layers: list[dict]) -> str:
    """The report's sentence on distillation, from the measured costs: the layers whose interval lies
    above 0 need per-head targets; the others lost nothing measurable to the mean pattern."""
    if not layers:
        raise ValueError("no layer measured: nothing to advise")
    costly = [r["layer"] for r in layers if r["low"] > 0]
    free = [r["layer"] for r in layers if r["low"] <= 0]
    if not costly:
        return ("No layer's mean pattern cost measurably on these texts (every interval reaches 0): "
                "on this evidence a mean-pattern target loses nothing here.")
    worst = max(layers, key=lambda r: (r["cost"], -r["layer"]))
    text = (f"Distil per-head patterns in layer{'s' if len(costly) > 1 else ''} {', '.join(map(str, costly))}: "
            f"the mean pattern costs up to {worst['cost']:.3g} (layer {worst['layer']}, 95% interval "
            f"[{worst['low']:.3g}, {worst['high']:.3g}]).")
    if free:
        text += f" Layer{'s' if len(free) > 1 else ''} {', '.join(map(str, free))} lost nothing measurable."
    return text
