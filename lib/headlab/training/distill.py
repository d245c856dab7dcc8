"""Treating attention as one mechanism: averaging heads, and distilling mean vs per-head patterns.

Two ways to erase the division of labour between the heads of a layer, as interventions on a
trained model (no training):

* :func:`layer_mean_z` — every head's output ``z`` replaced by the layer's mean head output at
  the same position (through :meth:`HeadModel.patch_z`): the layer then writes
  ``mean_h(z_h) @ sum_h W_O^h``, one "generalist" head repeated;
* :func:`layer_mean_pattern` — every head weighs its own values with the layer's mean
  attention pattern (through :meth:`HeadModel.patch_pattern`, the book's GPT only): each head
  keeps its value and output projections but loses *where* it looks.

:func:`average_heads` applies either to a set of layers inside a ``with`` block.

And one way to erase it during training: **attention transfer**. A student is trained with the
next-token loss plus ``weight`` times a loss that pulls its attention patterns towards a
teacher's (:func:`attention_transfer_loss`). The target decides what is transferred:

* ``"per_head"``: student head ``(l, h)`` towards teacher head ``(l, h)`` (same geometry);
* ``"mean"``: every student head of layer ``l`` towards the teacher's layer-mean pattern;
* ``"mean_to_mean"``: only the student's layer-mean pattern towards the teacher's (the heads
  may differ from each other as long as their average matches);
* ``"none"``: no transfer (the control: the same steps, data and schedule).

The transfer loss is the KL divergence ``KL(target || student)`` of each attention row (a
distribution over keys), averaged over query rows, heads, layers and inputs, in nats.
:func:`distill` trains a student this way; the same seed gives every target the same
initialisation and the same batches, so the targets compare at equal compute.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from headlab.metrics import next_token_loss
from headlab.heads.model import HeadModel

__all__ = [
    "TRANSFER_TARGETS", "layer_mean_z", "layer_mean_pattern", "average_heads",
    "transfer_targets", "attention_transfer_loss", "DistillResult", "distill", "specialists",
]

TRANSFER_TARGETS = ("none", "mean", "mean_to_mean", "per_head")


# --------------------------------------------------------------------------- averaging


def layer_mean_z(layer: int, z: torch.Tensor) -> torch.Tensor:
    """Every head's output replaced by the layer's mean head output at the same position.

    ``z``: ``(batch, pos, head, d_head)`` -> same shape (a function for :meth:`HeadModel.patch_z`).
    """
    if z.dim() != 4:
        raise ValueError(f"z must be (batch, pos, head, d_head), got shape {tuple(z.shape)}")
    return z.mean(dim=2, keepdim=True).expand_as(z).clone()  # (batch, pos, head, d_head)


def layer_mean_pattern(layer: int, pattern: torch.Tensor) -> torch.Tensor:
    """Every head given the layer's mean attention pattern.

    ``pattern``: ``(batch, head, q_pos, k_pos)`` -> same shape (for :meth:`HeadModel.patch_pattern`).
    The mean of distributions is a distribution, so every row still sums to 1.
    """
    if pattern.dim() != 4:
        raise ValueError(f"pattern must be (batch, head, q_pos, k_pos), got shape {tuple(pattern.shape)}")
    return pattern.mean(dim=1, keepdim=True).expand_as(pattern).clone()  # (batch, head, q_pos, k_pos)


@contextlib.contextmanager
def average_heads(hm: HeadModel, layers: Iterable[int], what: str = "z") -> Iterator[HeadModel]:
    """Inside the block, the heads of ``layers`` are averaged: ``what="z"`` replaces their outputs
    by the layer mean (:func:`layer_mean_z`), ``what="pattern"`` their attention patterns
    (:func:`layer_mean_pattern`; the book's GPT only)."""
    layers = sorted(set(int(l) for l in layers))
    if what == "z":
        with hm.patch_z(layer_mean_z, layers=layers):
            yield hm
    elif what == "pattern":
        with hm.patch_pattern(layer_mean_pattern, layers=layers):
            yield hm
    else:
        raise ValueError(f"what must be 'z' (head outputs) or 'pattern' (attention patterns), not {what!r}")


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


def distill(recipe, teacher: HeadModel, target: str = "per_head", weight: float = 1.0,
            seed: int | None = None, steps: int | None = None, eval_every: int | None = None,
            progress: bool = True, log: Callable[[str], None] | None = None) -> DistillResult:
    """Train ``recipe``'s student with the next-token loss plus ``weight`` x the attention-transfer
    loss towards ``teacher``'s patterns on the same batch (``target`` as in :data:`TRANSFER_TARGETS`).

    The optimiser, learning-rate schedule, initialisation and batch stream are exactly those of
    :func:`headlab.training.loop.train` for the same recipe and seed (the student with ``target="none"``
    is that function's run), so targets differ only in the transfer term. The teacher must read
    the recipe's token ids (same tokenizer) and, for ``"per_head"``, have the student's layers
    and heads. ``eval_every``: evaluate every that many steps (default: the recipe's).
    """
    from headlab.progress import tqdm  # text lines on the website (HEADLAB_PROGRESS=text)

    from headlab.models.gpt import GPT
    from headlab.training.loop import _lr_at

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
    if teacher.tokenizer is not None and teacher.tokenizer.get_vocab() != recipe.task.tokenizer().get_vocab():
        raise ValueError("the teacher's tokenizer differs from the student's task: they must read the same ids")
    seed = recipe.seed if seed is None else seed
    steps = recipe.steps if steps is None else steps
    eval_every = eval_every or recipe.eval_every
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")

    torch.manual_seed(seed)
    model = GPT(config)
    student = HeadModel(model)  # sets eval mode; the GPT has no dropout, so the mode changes nothing
    task = recipe.task
    gen = torch.Generator().manual_seed(seed)
    eval_data = task.eval_data(recipe.eval_size)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.98))
    curve: list[dict[str, Any]] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    running = {"lm": None, "transfer": None}

    def evaluate(step: int) -> dict[str, Any]:
        metrics = task.evaluate(model, eval_data)
        curve.append({"step": step, "seconds": round(time.perf_counter() - t0, 2),
                      "train_lm_loss": running["lm"], "train_transfer_loss": running["transfer"],
                      **{k: v for k, v in metrics.items() if isinstance(v, (int, float))}})
        if log is not None:
            log(str(curve[-1]))
        return metrics

    metrics = evaluate(0)
    batches = task.train_batches(recipe.batch_size, gen)
    bar = tqdm(range(1, steps + 1), desc=f"student ({target})", disable=not progress, mininterval=0.5)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = _lr_at(step - 1, recipe, steps)
        ids = next(batches)  # (batch, n_ctx), full windows: no padding
        if target == "none":
            lm = model.loss(ids)
            transfer = None
            loss = lm
        else:
            with torch.no_grad():
                _, goal = _patterns(teacher, ids, detach=True)
            logits, mine = _patterns(student, ids, detach=False)
            lm = next_token_loss(logits, ids, reduction="mean")
            transfer = attention_transfer_loss(mine, goal, target)
            loss = lm + weight * transfer
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        for key, value in (("lm", lm), ("transfer", transfer)):
            if value is not None:
                v = float(value.detach())
                running[key] = v if running[key] is None else 0.95 * running[key] + 0.05 * v
        if step % eval_every == 0 or step == steps:
            metrics = evaluate(step)
            bar.set_postfix({"lm": f"{running['lm']:.3f}", "val": f"{metrics['val_loss']:.3f}"}, refresh=False)
    model.eval()
    info = {"target": target, "weight": weight, "seed": seed, "steps": steps,
            "train_seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - cpu0, 2), "threads": torch.get_num_threads()}
    return DistillResult(model, task.tokenizer(), metrics, curve, info)


# ------------------------------------------------------------------------ specialists


def specialists(hm: HeadModel, windows: Sequence, tokenizer=None) -> dict[str, torch.Tensor]:
    """Per-head specialist scores of a synthetic-language model, ``(n_layers, n_heads)`` each:

    * ``previous_token``, ``induction``: lifts over uniform attention of the pattern scores
      (:func:`headlab.analysis.detect.head_scores`; 0 = like uniform, 1 = perfect);
    * ``subject``: accuracy of pointing, from the position before each agreeing verb, at the
      verb's subject (``before verb->subject`` of :mod:`headlab.analysis.detect.predictive`);
    * ``antecedent``: the same from the position before each pronoun to its antecedent.

    ``windows``: packed windows of the language (``Document`` s of equal length).
    """
    from headlab.analysis.detect import head_scores, relation_scores
    from headlab.analysis.detect.predictive import BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT, predictive_relation_set
    from headlab.data.language import encode

    tok = tokenizer or hm.tokenizer
    if tok is None:
        raise ValueError(f"{hm.name} has no tokenizer; pass the language's tokenizer")
    windows = list(windows)
    ids = encode(tok, windows)
    scores = head_scores(hm, ids, scores=["previous_token", "induction"])
    relations = relation_scores(hm, predictive_relation_set(windows, tok))
    return {"previous_token": scores.lift("previous_token"), "induction": scores.lift("induction"),
            "subject": relations[BEFORE_VERB_SUBJECT].accuracy.float(),
            "antecedent": relations[BEFORE_PRONOUN_ANTECEDENT].accuracy.float()}
