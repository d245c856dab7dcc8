"""Attribution patching: every patch of activation patching estimated from one forward/backward.

:func:`~headlab.analysis.patching.activation_patch` runs the model once per patched component.
Attribution patching (Nanda 2023; Syed et al. 2023) replaces each run by its first-order Taylor
estimate around the *base* run (the run patched into: clean for noising, corrupted for denoising)::

    metric(base, a <- a_source)
        ~ metric(base) + (a_source - a_base) . d metric / d a |base

One forward of the source run and one forward/backward of the base run give the gradient at every
head's ``z`` (through the gate before ``W_O``) and at every layer's residual stream, hence every
estimate at once. The estimate is exact where the metric is linear in the patched activation
(e.g. a logit difference read from the last layer's ``z`` of a model without a final norm), and
poor where the metric saturates. Integrated gradients (``steps > 1``; Sundararajan et al. 2017, as
EAP-IG uses them, Hanna et al. 2024) average the gradient along the straight path from the base
activation to the source one: each layer's activations move together, so the estimates of one
layer sum to the exact effect of patching that whole layer as ``steps`` grows.

* :func:`attribution_patch`: heads, heads x positions, the residual stream after each layer;
* :func:`pair_run`: the two runs and the gradients, shared with :mod:`headlab.analysis.edges`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from headlab.analysis.patching import check_flags, normalised, paired_batches
from headlab.heads.model import HeadModel, check_model
from headlab.metrics import Metric

__all__ = ["attribution_patch", "pair_run", "PairRun", "finish_values", "checked_values"]


def checked_values(values: torch.Tensor, metric) -> torch.Tensor:
    """``values`` (one per input, as ``Metric.evaluator`` checks) if every one is finite; else a
    ``ValueError`` naming the inputs where the metric is NaN or infinite."""
    bad = (~torch.isfinite(values.detach())).nonzero().flatten().tolist()
    if bad:
        name = Metric.of(metric).name or "(the model's default)"
        raise ValueError(f"the metric {name} is NaN or infinite for inputs {bad}: each input needs a finite score")
    return values


@dataclass
class PairRun:
    """The two runs of a patching experiment, the base one differentiated (built by :func:`pair_run`).

    Attributes:
        base, source: the tokenized inputs patched into and taken from.
        direction: ``"noising"`` (base = clean) or ``"denoising"`` (base = corrupted).
        evaluate: the metric on the base batch, ``evaluate(output, k)`` for ``k`` tiled copies.
        values: ``(n,)`` the metric of the base run.
        ends: ``(clean, corrupted)``, each ``(n,)``: the metric of each run, read on the base batch.
        z_base, z_source, grad_z: per layer ``(n, pos, head, d_head)``: each run's ``z`` and
            ``d metric / d z`` at the base run.
        stream_base, stream_source, grad_stream: per layer ``(n, pos, d_model)``: the residual
            stream after each layer and its gradient (empty unless asked for).
    """

    base: dict
    source: dict
    direction: str
    evaluate: object
    values: torch.Tensor
    ends: tuple
    z_base: list
    z_source: list
    grad_z: list
    stream_base: list
    stream_source: list
    grad_stream: list


def pair_run(hm: HeadModel, clean, corrupted, metric=None, direction: str = "noising",
             stream: bool = False) -> PairRun:
    """One forward of the source run, one forward/backward of the base run (see :class:`PairRun`).

    ``metric`` as in :func:`~headlab.analysis.patching.activation_patch` (``"kl"`` included);
    ``stream=True`` also records the residual stream after each layer and its gradient.

    Raises:
        TypeError: ``hm`` is not a :class:`~headlab.heads.model.HeadModel`.
        ValueError: an unknown direction, inputs of different lengths, a logit metric on an encoder,
            a metric that does not return one finite value per input.
    """
    hm = check_model(hm, "attribution patching")
    if direction not in ("noising", "denoising"):
        raise ValueError(f"direction must be 'noising' or 'denoising', not {direction!r}")
    a, b = paired_batches(hm, clean, corrupted)
    base, source = (a, b) if direction == "noising" else (b, a)
    metric = Metric.of(metric).bound(hm)  # refuses a kind the model cannot read, naming it
    # as activation_patch: "kl" compares every run with the clean run, an encoder's metric with the base run
    _, evaluate = metric.evaluator(hm, base, reference_batch=a if metric.kind == "kl" else base)
    L, H = hm.n_layers, hm.n_heads
    streaming = hm.residual_stream if stream else (lambda: contextlib.nullcontext([]))
    with torch.no_grad(), hm.capture(("z",)) as cache, streaming() as seen:
        out_source = hm.forward(source)
    z_source, stream_source = [cache.z(l) for l in range(L)], [s.detach() for s in seen[1:]]
    gate = torch.ones(L, H, device=hm.device, requires_grad=True)  # every z in the graph, frozen weights or not
    with torch.enable_grad(), hm.gated(gate), hm.capture(("z",), detach=False) as cache, streaming() as seen:
        values = checked_values(evaluate(hm.forward(base), 1), metric)
        wrt = [cache.z(l) for l in range(L)] + list(seen[1:])
        grads = torch.autograd.grad(values.sum(), wrt, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(wrt, grads)]
    with torch.no_grad():
        other = evaluate(out_source, 1)
    values = values.detach()
    ends = (values, other) if direction == "noising" else (other, values)
    return PairRun(base, source, direction, evaluate, values, ends, [t.detach() for t in wrt[:L]], z_source,
                   grads[:L], [t.detach() for t in wrt[L:]], stream_source, grads[L:])


def finish_values(run: PairRun, effects: torch.Tensor, normalise: bool, effect: bool) -> torch.Tensor:
    """``effects`` (first-order changes, input first) as activation patching reports them: the
    metric of the patched run, ``normalise``-d as there, or (``effect=True``) minus the base run's."""
    shape = (-1,) + (1,) * (effects.dim() - 1)
    values = run.values.float().cpu().reshape(shape) + effects.float().cpu()
    base = run.values.float().cpu().reshape(shape)
    if normalise:
        values, base = normalised(values, run.ends), normalised(base, run.ends)
    return values - base if effect else values


def _integrated(hm: HeadModel, run: PairRun, layer: int, delta: torch.Tensor, component: str,
                steps: int) -> torch.Tensor:
    """The mean of ``d metric / d a`` over ``a = a_base + (j / steps) * delta``, ``j = 0 .. steps-1``,
    layer ``layer``'s activations all moved together (the steps run as tiles of one batch)."""
    n = delta.shape[0]
    alphas = (torch.arange(steps, device=delta.device, dtype=delta.dtype) / steps).repeat_interleave(n)
    shift = alphas.reshape((-1,) + (1,) * (delta.dim() - 1)) * delta.repeat(steps, *([1] * (delta.dim() - 1)))
    held: list[torch.Tensor] = []

    def move(l: int, x: torch.Tensor) -> torch.Tensor:
        held.append((x.detach() + shift.to(x.dtype)).requires_grad_())
        return held[-1]

    tiled = {key: v.repeat(steps, 1) for key, v in run.base.items()}
    patch = hm.patch_z if component == "z" else hm.patch_resid
    with torch.enable_grad(), patch(move, layers=[layer]):
        values = run.evaluate(hm.forward(tiled), steps)
        (grad,) = torch.autograd.grad(values.sum(), held[0])
    return grad.reshape(steps, *delta.shape).mean(0)


def attribution_patch(hm: HeadModel, clean, corrupted, component: str = "z", *, metric=None,
                      direction: str = "noising", positions: bool = False, normalise: bool = False,
                      effect: bool = False, steps: int = 1) -> torch.Tensor:
    """Estimate :func:`~headlab.analysis.patching.activation_patch`'s grid from gradients.

    Same arguments, shapes and sign as ``activation_patch``: each entry estimates the metric of the
    base run with one component patched from the other run. With ``steps=1`` (attribution
    patching) the estimate is ``metric(base) + (a_source - a_base) . grad`` with the gradient at
    the base run: for denoising, ``(z_clean - z_corrupted) . d metric / d z`` at the corrupted run.
    With ``steps=k > 1`` the gradient is the mean over ``a_base + (j / k)(a_source - a_base)``,
    ``j = 0 .. k-1`` (integrated gradients, a left Riemann sum, so ``steps=1`` is plain attribution),
    one layer at a time (``n_layers`` forward/backward passes of ``k`` tiled copies).

    Example::

        diff = Metric(LogitMetric("logit_diff", (a, b)))
        # (n, L, H, pos)
        est = attribution_patch(hm, clean, corrupted, metric=diff, positions=True)
        # (n, L, H): integrated gradients in 16 steps
        ig = attribution_patch(hm, clean, corrupted, metric=diff, steps=16, effect=True)

    Args:
        hm, clean, corrupted, metric, direction, positions, normalise: as in ``activation_patch``
            (a callable metric must be differentiable and return one value per input). A metric at
            its minimum at the base run (``"kl"`` when noising; an encoder's default 1 - cos) has
            zero gradient there: every plain estimate is the base value; use ``steps > 1`` or
            another metric.
        component: ``"z"`` (each head's output before ``W_O``) or ``"resid"`` (the residual stream
            after a layer, at one position). Patterns are not estimated.
        effect: return the estimated change of the metric (minus the base run's value).
        steps: integration steps, ``1`` for plain attribution patching.

    Returns:
        ``(n, n_layers, n_heads)``, ``(n, n_layers, n_heads, pos)`` (``positions``) or
        ``(n, n_layers, pos)`` (``"resid"``), on the CPU.

    Raises:
        TypeError: ``hm`` not a :class:`~headlab.heads.model.HeadModel`; ``positions``,
            ``normalise`` or ``effect`` not a bool.
        ValueError: an unknown component or direction, ``positions`` with ``"resid"``, steps not a
            positive int, inputs of different lengths, a logit metric on an encoder, a metric that
            does not return one finite value per input.
    """
    check_flags(positions=positions, normalise=normalise, effect=effect)
    if component not in ("z", "resid") or positions and component != "z":
        raise ValueError(f"attribution_patch estimates component 'z' or 'resid', not {component!r}"
                         f"{' with positions=True' * positions} (positions=True is for 'z'; 'resid' is per position)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int (1: plain attribution patching), not {steps!r}")
    run = pair_run(hm, clean, corrupted, metric, direction, stream=component == "resid")
    if component == "z":
        deltas = [s - b for s, b in zip(run.z_source, run.z_base)]  # (n, pos, head, d_head)
        grads = run.grad_z
    else:
        deltas = [s - b for s, b in zip(run.stream_source, run.stream_base)]  # (n, pos, d_model)
        grads = run.grad_stream
    if steps > 1:
        grads = [_integrated(hm, run, l, d, component, steps) for l, d in enumerate(deltas)]
    cells = torch.stack([(d * g).sum(-1) for d, g in zip(deltas, grads)], dim=1)  # (n, L, pos[, head])
    if component == "z":
        cells = cells.transpose(2, 3)  # (n, L, head, pos)
        cells = cells if positions else cells.sum(-1)
    return finish_values(run, cells.detach(), normalise, effect)
