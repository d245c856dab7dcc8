"""Distillation with attention transfer: erasing (or keeping) the division of labour during training.

A student is trained with the next-token loss plus ``weight`` times a loss that pulls its
attention patterns towards a teacher's (:func:`attention_transfer_loss`), the extra loss term of
the one training loop (:func:`deviating.training.loop.run_loop`). The target decides what is
transferred:

* ``"per_head"``: student head ``(l, h)`` towards teacher head ``(l, h)`` (same geometry);
* ``"mean"``: every student head of layer ``l`` towards the teacher's layer-mean pattern;
* ``"mean_to_mean"``: only the student's layer-mean pattern towards the teacher's (the heads
  may differ from each other as long as their average matches);
* ``"none"``: no transfer (the control: the same steps, data and schedule).

The transfer loss is the KL divergence ``KL(target || student)`` of each attention row (a
distribution over keys), averaged over query rows, heads, layers and inputs, in nats.
:func:`distill` trains a student this way; the same seed gives every target the same
initialisation and the same batches, so the targets compare at equal compute. (Averaging the
heads of a trained model, with no training, is :mod:`deviating.analysis.averaging`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from headlab.heads.model import HeadModel
from headlab.metrics import next_token_loss
from deviating.training.loop import ExtraLoss, Objective, train
from deviating.training.recipe import Recipe

__all__ = ["TRANSFER_TARGETS", "transfer_targets", "attention_transfer_loss", "DistillResult", "transfer_objective",
           "distill"]

TRANSFER_TARGETS = ("none", "mean", "mean_to_mean", "per_head")


# --------------------------------------------------------------------- attention transfer


def _check_target(target: str) -> None:
    if target not in TRANSFER_TARGETS:
        raise ValueError(f"unknown transfer target {target!r}: choose from {', '.join(TRANSFER_TARGETS)}")


def transfer_targets(teacher: Sequence[torch.Tensor], target: str) -> list[torch.Tensor]:
    """What each student layer is pulled towards: per layer ``(batch, head | 1, q_pos, k_pos)``.

    ``"per_head"``: the teacher's patterns themselves; ``"mean"`` and ``"mean_to_mean"``: the
    teacher's layer mean over heads, with a head axis of size 1.
    """
    _check_target(target)
    if target == "none":
        raise ValueError("target 'none' transfers nothing: there is no target pattern")
    if target == "per_head":
        return list(teacher)
    return [t.mean(dim=1, keepdim=True) for t in teacher]  # (batch, 1, q_pos, k_pos)


def _row_kl(target: torch.Tensor, student: torch.Tensor, eps: float) -> torch.Tensor:
    """KL(target || student) of every row: ``(..., q_pos, k_pos) -> (..., q_pos)``. Terms where the
    target is 0 contribute 0 (also at keys a causal row cannot see)."""
    t = target.clamp_min(0.0)
    log_ratio = torch.log(t.clamp_min(eps)) - torch.log(student.clamp_min(eps))
    return torch.where(t > 0, t * log_ratio, torch.zeros_like(t)).sum(-1)


def attention_transfer_loss(student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor],
                            target: str = "per_head", eps: float = 1e-9) -> torch.Tensor:
    """The attention-transfer loss: mean over inputs, layers, heads and query rows of
    ``KL(target row || student row)``, in nats (a scalar).

    Args:
        student, teacher: one pattern per layer, ``(batch, head, q_pos, k_pos)``, rows summing
            to 1 (padding rows should be excluded by the caller, e.g. by using full windows).
        target: ``"per_head"`` (head ``(l, h)`` to teacher head ``(l, h)``: same number of layers
            and heads), ``"mean"`` (every student head to the teacher's layer mean),
            ``"mean_to_mean"`` (the student's layer mean to the teacher's layer mean).
        eps: floor inside the logarithms.
    """
    _check_target(target)
    if target == "none":
        raise ValueError("target 'none' has no transfer loss; train without it (weight 0)")
    if len(student) != len(teacher):
        raise ValueError(f"the student has {len(student)} layers and the teacher {len(teacher)}: "
                         "attention transfer pairs layer l with layer l")
    goals = transfer_targets(teacher, target)
    losses = []
    for layer, (s, t) in enumerate(zip(student, goals)):
        if s.dim() != 4 or t.dim() != 4:
            raise ValueError(f"layer {layer}: patterns must be (batch, head, q_pos, k_pos), got "
                             f"{tuple(s.shape)} and {tuple(t.shape)}")
        if s.shape[0] != t.shape[0] or s.shape[2:] != t.shape[2:]:
            raise ValueError(f"layer {layer}: student pattern {tuple(s.shape)} and teacher pattern "
                             f"{tuple(t.shape)} differ in batch or positions")
        if target == "per_head" and s.shape[1] != t.shape[1]:
            raise ValueError(f"layer {layer}: per-head transfer needs as many student heads as teacher "
                             f"heads, got {s.shape[1]} and {t.shape[1]}; use target='mean'")
        if target == "mean_to_mean":
            s = s.mean(dim=1, keepdim=True)  # (batch, 1, q_pos, k_pos)
        t = t.to(s.dtype).expand_as(s)
        losses.append(_row_kl(t, s, eps).mean())
    return torch.stack(losses).mean()


# ---------------------------------------------------------------------------- training


@dataclass
class DistillResult:
    """A trained student: the model, its final metrics (``task.evaluate``), the evaluation curve,
    and what the run was (target, weight, seed, steps, seconds)."""

    model: Any
    tokenizer: Any
    metrics: dict[str, Any]
    curve: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


def _patterns(hm: HeadModel, ids: torch.Tensor, detach: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and every layer's pattern ``(batch, head, q_pos, k_pos)`` (with gradients unless ``detach``)."""
    with hm.capture(("pattern",), detach=detach) as cache:
        logits = hm.forward(ids)
    return logits, [cache.pattern(layer) for layer in range(hm.n_layers)]


def transfer_objective(model, teacher: HeadModel, target: str, weight: float) -> Objective:
    """The student's loss: the next-token loss (``lm_loss``) plus ``weight`` x the attention-transfer
    loss (``transfer_loss``) towards ``teacher``'s patterns on the same batch.

    With ``target="none"`` the loss is ``model.loss`` itself (the plain training run) and the
    transfer term adds nothing (its curve column stays ``None``).
    """
    _check_target(target)
    if target == "none":
        return Objective(model.loss, name="lm_loss", extra=ExtraLoss("transfer_loss", lambda ids: None, 0.0))
    student = HeadModel(model)
    mine: list[torch.Tensor] = []  # the student's patterns of the current batch, for the transfer term

    def lm_loss(ids: torch.Tensor) -> torch.Tensor:
        logits, patterns = _patterns(student, ids, detach=False)
        mine[:] = patterns
        return next_token_loss(logits, ids, reduction="mean")

    def transfer_loss(ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            _, goal = _patterns(teacher, ids, detach=True)
        return attention_transfer_loss(mine, goal, target)

    return Objective(lm_loss, name="lm_loss", extra=ExtraLoss("transfer_loss", transfer_loss, weight))


def distill(recipe: Recipe, teacher: HeadModel, target: str = "per_head", weight: float = 1.0,
            seed: int | None = None, steps: int | None = None, eval_every: int | None = None,
            device: str = "cpu", progress: bool = True, log: Callable[[str], None] | None = None) -> DistillResult:
    """Train ``recipe``'s student with the next-token loss plus ``weight`` x the attention-transfer
    loss towards ``teacher``'s patterns on the same batch (``target`` as in :data:`TRANSFER_TARGETS`).

    The run is :func:`deviating.training.loop.train` of the same recipe and seed with the transfer
    term added (:func:`transfer_objective`): the same optimiser, learning-rate schedule,
    initialisation and batch stream, so that targets differ only in the transfer term, and the
    student with ``target="none"`` is that function's run. The curve records the running
    ``train_lm_loss`` and ``train_transfer_loss`` beside the task's metrics.

    Args:
        recipe: the student's recipe (e.g. ``RECIPES["distill-student"]``).
        teacher: reads the recipe's token ids (same tokenizer), on ``device``; for ``"per_head"``
            it has the student's layers and heads.
        target: what is transferred (see the module docstring).
        weight: the transfer term's weight, > 0 unless ``target="none"``.
        seed: default the recipe's.
        steps: default the recipe's.
        eval_every: evaluate every that many steps (default: the recipe's).
        device: where the student trains.
        progress: show a progress bar.
        log: called with each curve row as JSON.
    """
    _check_target(target)
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    if target != "none" and weight == 0:
        raise ValueError(f"target {target!r} with weight 0 transfers nothing; use target='none'")
    config = recipe.config
    if target != "none":
        if teacher.n_layers != config.n_layers:
            raise ValueError(f"the teacher has {teacher.n_layers} layers, the student {config.n_layers}: "
                             "attention transfer pairs layer l with layer l")
        if target == "per_head" and teacher.n_heads != config.n_heads:
            raise ValueError(f"per-head transfer needs as many heads as the teacher ({teacher.n_heads}); "
                             f"the student has {config.n_heads}")
        if teacher.device.type != torch.device(device).type:
            raise ValueError(f"the teacher is on {teacher.device} but the student trains on {device}: "
                             f"move the teacher with teacher.model.to({device!r})")
    if teacher.tokenizer is not None and teacher.tokenizer.get_vocab() != recipe.task.tokenizer().get_vocab():
        raise ValueError("the teacher's tokenizer differs from the student's task: they must read the same ids")
    seed = recipe.seed if seed is None else seed
    run = train(recipe, seed=seed, steps=steps, device=device, progress=progress, log=log,
                objective=lambda model: transfer_objective(model, teacher, target, weight),
                eval_every=eval_every, desc=f"student ({target})")
    info = {"target": target, "weight": weight, "seed": seed, "steps": run.info["steps"],
            "train_seconds": round(run.train_seconds, 2), "cpu_seconds": run.info["cpu_seconds"],
            "threads": torch.get_num_threads()}
    return DistillResult(run.model, run.tokenizer, run.metrics, run.curve, info)
