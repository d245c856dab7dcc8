"""The one training loop, and training a recipe's GPT on it.

:func:`run_loop` is the loop every model of the book is trained with (like nanoGPT's single
loop): per step, set the learning rate, draw a batch, compute the loss (the :class:`Objective`:
a main term plus, optionally, an :class:`ExtraLoss` term), back-propagate, clip, update; score
the model every ``eval_every`` steps. Its hooks serve the three kinds of training:

* :func:`train` — a recipe's GPT on its task (the shipped checkpoints, the width/depth family);
* :func:`deviating.training.distill.distill` — the same run with an attention-transfer term
  (the extra loss);
* :func:`deviating.training.sae.train_sae` — a sparse autoencoder, with a gradient projection
  before each update (``before_update``) and dead-feature resampling after it (``on_step``).

A recipe's run is deterministic given its seed (and the torch thread count): the model is
initialised under ``torch.manual_seed(seed)`` on the CPU, batches come from a CPU generator
seeded with ``seed``, and the task's evaluation data is the same for every seed. So

    python -m deviating train attn-only-2l --seed 0 --out lib/headlab/checkpoints/attn-only-2l

reproduces the shipped checkpoint (up to floating-point noise between machines).
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from headlab.devices import resolve_device
from headlab.models.gpt import GPT
from deviating.training.recipe import Recipe
from headlab.progress import tqdm

__all__ = ["ExtraLoss", "Objective", "StepLosses", "LoopResult", "run_loop", "adamw", "warmup_cosine",
           "TrainResult", "train", "WeightAverage"]


# ---------------------------------------------------------------------------- the loop

@dataclass
class ExtraLoss:
    """A term added to a loop's loss: ``weight * fn(batch)``, recorded in the curve as ``train_<name>``.

    ``fn`` may return ``None`` at a step: nothing is added then (a term switched off, as for the
    control run of a distillation).
    """

    name: str
    fn: Callable[[Any], torch.Tensor | None]
    weight: float = 1.0


@dataclass
class Objective:
    """What a loop minimises: ``loss(batch)`` (recorded as ``train_<name>``) plus an optional extra term."""

    loss: Callable[[Any], torch.Tensor]
    name: str = "loss"
    extra: ExtraLoss | None = None


@dataclass
class StepLosses:
    """The losses of one step, as floats: ``total`` (what was back-propagated) and each term by name
    (``None`` for a term that added nothing)."""

    step: int
    total: float
    terms: dict[str, float | None]


@dataclass
class LoopResult:
    """What :func:`run_loop` did: one ``curve`` row per evaluation, the last evaluation's ``metrics``
    (``None`` without an ``evaluate``), and wall-clock and CPU seconds, evaluations included."""

    curve: list[dict[str, Any]]
    metrics: dict[str, Any] | None
    seconds: float
    cpu_seconds: float


def run_loop(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Iterator[Any], steps: int,
             objective: Objective, *, lr_at: Callable[[int], float] | None = None, grad_clip: float | None = None,
             device: str | torch.device | None = None, before_update: Callable[[], None] | None = None,
             on_step: Callable[[StepLosses], None] | None = None,
             evaluate: Callable[[], dict[str, Any]] | None = None, eval_every: int | None = None,
             progress: bool = True, desc: str = "train", log: Callable[[str], None] | None = None) -> LoopResult:
    """Train ``model`` for ``steps`` optimizer steps.

    Args:
        model: the module trained (put in train mode, and in eval mode for each evaluation and at the end).
        optimizer: its optimizer.
        batches: an endless iterator of batches, drawn once per step, in order.
        steps: number of steps, at least 1.
        objective: the loss of a batch (see :class:`Objective`).
        lr_at: the learning rate of step ``i`` (counted from 0), set on every parameter group
            before the step; ``None`` keeps the optimizer's.
        grad_clip: clip the gradients' total norm to this value (``None`` or 0: no clipping).
        device: where each batch is moved (``None``: left where it is).
        before_update: called after the backward pass (and clipping), before the update.
        on_step: called after each update with the step's :class:`StepLosses`.
        evaluate: returns the metrics of the model at this point; called at step 0, every
            ``eval_every`` steps and after the last. Each evaluation adds a row to the curve:
            ``step``, ``seconds``, the running mean (0.95 exponential average) of every loss term
            as ``train_<name>`` (``None`` before any step), then the metrics that are numbers
            and the ``*_head`` ones.
        eval_every: steps between evaluations (needed with ``evaluate``).
        progress: show a progress bar labelled ``desc``.
        desc: the progress bar's label.
        log: called with each curve row as JSON.
    """

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    if evaluate is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"evaluate needs eval_every, an int >= 1; got {eval_every!r}")
    extra = objective.extra
    running: dict[str, float | None] = {objective.name: None, **({extra.name: None} if extra else {})}
    curve: list[dict[str, Any]] = []
    metrics = None
    t0, cpu0 = time.perf_counter(), time.process_time()

    def evaluation(step: int) -> dict[str, Any]:
        model.eval()
        m = evaluate()
        model.train()
        curve.append({"step": step, "seconds": round(time.perf_counter() - t0, 3),
                      **{f"train_{name}": value for name, value in running.items()},
                      **{k: v for k, v in m.items() if isinstance(v, (int, float)) or k.endswith("_head")}})
        if log is not None:
            log(json.dumps(curve[-1]))
        return m

    model.train()
    if evaluate is not None:
        metrics = evaluation(0)
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, mininterval=0.5)
    for step in bar:
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step - 1)
        batch = next(batches)
        if device is not None:
            batch = batch.to(device)
        main = objective.loss(batch)
        values = {objective.name: main}
        loss = main
        if extra is not None:
            values[extra.name] = term = extra.fn(batch)
            if term is not None:
                loss = main + extra.weight * term
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if before_update is not None:
            before_update()
        optimizer.step()
        terms = {name: None if v is None else float(v.detach()) for name, v in values.items()}
        for name, v in terms.items():
            if v is not None:
                running[name] = v if running[name] is None else 0.95 * running[name] + 0.05 * v
        if on_step is not None:
            on_step(StepLosses(step, float(loss.detach()), terms))
        if evaluate is not None and (step % eval_every == 0 or step == steps):
            metrics = evaluation(step)
            post = {"loss": f"{running[objective.name]:.3f}"}
            for key, short in (("loss_repeat", "rep"), ("val_loss", "val"), ("induction_best", "ind")):
                if key in metrics:
                    post[short] = f"{metrics[key]:.2f}"
            bar.set_postfix(post, refresh=False)
    model.eval()
    return LoopResult(curve, metrics, time.perf_counter() - t0, time.process_time() - cpu0)


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with betas (0.9, 0.98), weight decay on the matrices (parameters of 2 or more dimensions)
    only, in the order of ``model.named_parameters()``."""
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98))


def warmup_cosine(step: int, lr: float, warmup: int, steps: int) -> float:
    """The learning rate at ``step`` (from 0): linear warm-up over ``warmup`` steps, then cosine
    decay to 10% of ``lr`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


# ---------------------------------------------------------------------------- a recipe's GPT

@dataclass
class TrainResult:
    """A trained model: its tokenizer, final metrics, evaluation curve, the phase change
    (``{"step", "seconds"}`` of the first evaluation meeting the task's criterion, or ``None``)
    and what the run was (``info``: seed, steps, device, cpu_seconds)."""

    model: GPT
    tokenizer: Any
    metrics: dict[str, Any]  # final evaluation
    curve: list[dict[str, Any]]  # one row per evaluation
    phase_change: dict[str, Any] | None
    train_seconds: float
    info: dict[str, Any] = field(default_factory=dict)
    # with weight averaging (Recipe.average_share): the weights after the last step, before averaging
    unaveraged: GPT | None = None


def train(recipe: Recipe, seed: int | None = None, steps: int | None = None, device: str = "cpu",
          progress: bool = True, log: Callable[[str], None] | None = None,
          objective: Callable[[GPT], Objective] | None = None, eval_every: int | None = None,
          desc: str | None = None) -> TrainResult:
    """Train ``recipe``'s GPT from scratch on :func:`run_loop`; deterministic given ``seed`` (and the thread count).

    The model is initialised under ``torch.manual_seed(seed)`` on the CPU and moved to ``device``;
    batches come from a CPU generator seeded with ``seed``; the task's fixed evaluation data (the
    same for every seed) is scored at step 0, every ``eval_every`` steps and at the end. The
    learning rate warms up, then decays over ``steps`` (:func:`warmup_cosine`), so ``steps``
    other than the recipe's changes the schedule, not just the length. ``train_seconds``
    includes the evaluations.

    Args:
        recipe: what to train (:data:`deviating.training.recipes.RECIPES`).
        seed: default the recipe's.
        steps: default the recipe's.
        device: ``"cpu"``, ``"cuda"``, ``"mps"`` or ``"auto"`` (:func:`headlab.devices.resolve_device`).
        progress: show a progress bar.
        log: called with each curve row as JSON.
        objective: builds the loss from the new model (default: its next-token loss,
            ``Objective(model.loss)``); distillation adds a term here.
        eval_every: default the recipe's.
        desc: progress bar label (default: the recipe's name).
    """
    seed = recipe.seed if seed is None else seed
    steps = recipe.steps if steps is None else steps
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    device = str(resolve_device(device))
    torch.manual_seed(seed)
    model = GPT(recipe.config).to(device)
    if recipe.tie_embeddings:
        model.unembed.weight = model.embed.weight  # one matrix: W_U = W_E^T
    task = recipe.task
    gen = torch.Generator().manual_seed(seed)
    eval_data = task.eval_data(recipe.eval_size)
    opt = adamw(model, recipe.lr, recipe.weight_decay)
    goal = Objective(model.loss) if objective is None else objective(model)
    average = WeightAverage(model, recipe.averaged_steps(steps))
    run = run_loop(model, opt, task.train_batches(recipe.batch_size, gen), steps, goal,
                   lr_at=lambda i: warmup_cosine(i, recipe.lr, recipe.warmup, steps), grad_clip=recipe.grad_clip,
                   device=device, on_step=average.on_step, evaluate=lambda: task.evaluate(model, eval_data),
                   eval_every=eval_every or recipe.eval_every, progress=progress, desc=desc or recipe.name, log=log)
    if recipe.tie_embeddings:  # saved as an ordinary GPT: two equal, separate matrices
        model.unembed.weight = torch.nn.Parameter(model.embed.weight.detach().clone())
    check = getattr(task, "phase_change", None)
    phase = next(({"step": r["step"], "seconds": r["seconds"]} for r in run.curve if check and check(r)), None)
    info = {"seed": seed, "steps": steps, "device": device, "cpu_seconds": round(run.cpu_seconds, 2)}
    metrics, unaveraged = run.metrics, None
    if average.steps:
        unaveraged = copy.deepcopy(model).cpu()
        average.load_into(model)
        model.eval()
        info["unaveraged_metrics"], metrics = metrics, task.evaluate(model, eval_data)
        info["averaged_steps"] = {"first": average.steps[0], "last": average.steps[-1], "count": len(average.steps)}
    return TrainResult(model.cpu(), task.tokenizer(), metrics, run.curve, phase, run.seconds, info, unaveraged)


class WeightAverage:
    """The running uniform mean of a model's weights after chosen steps (float64 sums, so that
    the mean of many snapshots does not depend on their order beyond rounding)."""

    def __init__(self, model: torch.nn.Module, steps: list[int]):
        self.model, self.steps = model, list(steps)
        self._wanted = set(self.steps)
        self._sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def on_step(self, losses: StepLosses) -> None:
        """Add the weights to the mean if ``losses.step`` is one of the chosen steps (a ``run_loop`` hook)."""
        if losses.step not in self._wanted:
            return
        with torch.no_grad():
            for name, value in self.model.state_dict().items():
                if name in self._sums:
                    self._sums[name] += value.double()
                else:
                    self._sums[name] = value.double().clone()
        self.count += 1

    def load_into(self, model: torch.nn.Module) -> None:
        """Load the mean into ``model`` (of the averaged model's shape)."""
        if self.count != len(self.steps):
            raise RuntimeError(f"the average has {self.count} snapshots of the {len(self.steps)} chosen "
                               f"(steps {self.steps[0]}..{self.steps[-1]}); did the run stop early?")
        state = model.state_dict()
        model.load_state_dict({k: (v / self.count).to(state[k].dtype) for k, v in self._sums.items()})
