"""Training the book's model organisms, reproducibly.

A :class:`Recipe` names everything that makes a checkpoint: the model config,
the data task, steps, batch size and learning rate. :data:`ORGANISMS` maps
each shipped organism's name to its recipe, so

    python -m headlab train attn-only-2l --seed 0 --out lib/headlab/checkpoints/attn-only-2l

reproduces the shipped checkpoint (up to floating-point noise between
machines and thread counts). Two data tasks, defined in :mod:`headlab.data.tasks`
and re-exported here:

* :class:`RepeatedSpans` (``attn-only-1l``, ``attn-only-2l``, ``tiny-attn-2l``):
  random tokens with one random span repeated at a random distance, the
  data on which induction heads form;
* :class:`SyntheticLanguage` (``organism``, ``organism-small-s0..2``): the
  annotated language of :mod:`headlab.data.language`, evaluated per phenomenon
  (agreement, pronouns, copying, rare words).
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import torch

from headlab.models.gpt import GPT, GPTConfig, save_checkpoint
from headlab.data.tasks import (  # noqa: F401  (re-exported: the tasks live there)
    EVAL_SEED, LANGUAGE_EVAL_SEED, LanguageEval, RepeatedSpans, SpanBatch, SyntheticLanguage,
    per_input_head_scores, summarize_head_scores,
)


# ---------------------------------------------------------------------------- recipes

class Task(Protocol):
    kind: str
    version: str

    @property
    def d_vocab(self) -> int: ...
    def tokenizer(self): ...
    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]: ...
    def eval_data(self, n: int) -> Any: ...
    def evaluate(self, model: GPT, data: Any) -> dict[str, Any]: ...
    def describe(self) -> dict[str, Any]: ...


@dataclass
class Recipe:
    """Everything that determines a training run, given a seed."""

    name: str
    description: str
    config: GPTConfig
    task: Task
    steps: int
    batch_size: int
    lr: float
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_size: int = 256
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["config"], d["task"] = self.config.to_dict(), self.task.describe()
        return d


def _span_recipe(name: str, description: str, n_layers: int, steps: int, **overrides: Any) -> Recipe:
    task = overrides.pop("task", None) or RepeatedSpans()
    config = GPTConfig(d_vocab=task.d_vocab, n_ctx=task.n_ctx, d_mlp=0,
                       **{"d_model": 64, "n_heads": 4, **overrides.pop("config", {}), "n_layers": n_layers})
    return Recipe(name, description, config, task, steps=steps, **{"batch_size": 32, "lr": 2e-3, **overrides})


# The language organisms see more repeated sentences than the language's default (p_copy 0.3, not
# 0.12) and a higher learning rate: measured on the 2-layer model, the defaults with lr 1e-3 gave
# copy accuracy 0.41 after 3000 steps (no previous-token or induction heads; the grammar alone
# gets ~0.38), while p_copy 0.3 with lr 2e-3 reached 0.86 by step 2000.
LANGUAGE_OPTIONS = {"p_copy": 0.3}


def _language_recipe(name: str, description: str, steps: int, seed: int = 0, **config: Any) -> Recipe:
    task = SyntheticLanguage(n_ctx=128, language_config=dict(LANGUAGE_OPTIONS))
    return Recipe(name, description, GPTConfig(d_vocab=task.d_vocab, n_ctx=task.n_ctx, **config), task,
                  steps=steps, batch_size=32, lr=2e-3, warmup=200, eval_every=250, eval_size=256, seed=seed)


ORGANISMS: dict[str, Recipe] = {
    r.name: r for r in [
        _language_recipe("organism", "the book's GPT on the synthetic language (4 layers x 8 heads)",
                         steps=4000, d_model=128, n_layers=4, n_heads=8, d_mlp=512),
        *[_language_recipe(f"organism-small-s{s}", f"a 2-layer x 4-head GPT on the synthetic language, seed {s}",
                           steps=3000, seed=s, d_model=128, n_layers=2, n_heads=4, d_mlp=512) for s in range(3)],
        _span_recipe("attn-only-1l", "1-layer attention-only model on repeated random spans: "
                     "cannot form induction heads", n_layers=1, steps=1500),
        _span_recipe("attn-only-2l", "2-layer attention-only model on repeated random spans: "
                     "forms induction heads in a phase change", n_layers=2, steps=1500),
        _span_recipe("tiny-attn-2l", "a tiny 2-layer attention-only model, retrained by the tests in seconds",
                     n_layers=2, steps=400, task=RepeatedSpans(n_tokens=16, n_ctx=32, min_span=4, max_span=15),
                     config={"d_model": 32, "n_heads": 2}, lr=3e-3, eval_every=25, eval_size=128, warmup=20),
    ]
}


# ---------------------------------------------------------------------------- training

@dataclass
class TrainResult:
    model: GPT
    tokenizer: Any
    metrics: dict[str, Any]  # final evaluation
    curve: list[dict[str, Any]]  # one row per evaluation
    phase_change: dict[str, Any] | None  # {"step", "seconds"} of the first evaluation meeting the criterion
    train_seconds: float
    info: dict[str, Any] = field(default_factory=dict)


def _lr_at(step: int, recipe: Recipe, steps: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of ``lr`` at ``steps``."""
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    progress = (step - recipe.warmup) / max(1, steps - recipe.warmup)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def train(recipe: Recipe, seed: int | None = None, steps: int | None = None, device: str = "cpu",
          progress: bool = True, log: Callable[[str], None] | None = None) -> TrainResult:
    """Train ``recipe`` from scratch; deterministic given ``seed`` (and the thread count).

    The model is initialised under ``torch.manual_seed(seed)`` on the CPU and
    moved to ``device``; batches come from a CPU generator seeded with
    ``seed``; the task's fixed evaluation data (the same for every seed) is
    scored at step 0, every ``recipe.eval_every`` steps and at the end. The
    learning rate warms up, then decays over ``steps`` (so ``steps`` other than
    the recipe's changes the schedule, not just the length). ``train_seconds``
    includes the evaluations.
    """
    from headlab.progress import tqdm  # text lines on the website (HEADLAB_PROGRESS=text)

    seed = recipe.seed if seed is None else seed
    steps = recipe.steps if steps is None else steps
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    torch.manual_seed(seed)
    model = GPT(recipe.config).to(device)
    task = recipe.task
    gen = torch.Generator().manual_seed(seed)
    eval_data = task.eval_data(recipe.eval_size)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.98))
    curve: list[dict[str, Any]] = []
    phase = None
    check_phase = getattr(task, "phase_change", None)
    t0, cpu0 = time.perf_counter(), time.process_time()
    running = None

    def evaluate(step: int) -> dict[str, Any]:
        nonlocal phase
        model.eval()
        m = task.evaluate(model, eval_data)
        model.train()
        row = {"step": step, "seconds": round(time.perf_counter() - t0, 3), "train_loss": running,
               **{k: v for k, v in m.items() if isinstance(v, (int, float)) or k.endswith("_head")}}
        curve.append(row)
        if phase is None and check_phase is not None and check_phase(m):
            phase = {"step": step, "seconds": row["seconds"]}
        return m

    model.train()
    evaluate(0)
    batches = task.train_batches(recipe.batch_size, gen)
    bar = tqdm(range(1, steps + 1), desc=recipe.name, disable=not progress, mininterval=0.5)
    for step in bar:
        for g_ in opt.param_groups:
            g_["lr"] = _lr_at(step - 1, recipe, steps)
        tokens = next(batches).to(device)  # (batch, n_ctx), full windows: no padding
        loss = model.loss(tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        loss_value = float(loss.detach())
        running = loss_value if running is None else 0.95 * running + 0.05 * loss_value
        if step % recipe.eval_every == 0 or step == steps:
            metrics = evaluate(step)
            post = {"loss": f"{running:.3f}"}
            for key, short in (("loss_repeat", "rep"), ("val_loss", "val"), ("induction_best", "ind")):
                if key in metrics:
                    post[short] = f"{metrics[key]:.2f}"
            bar.set_postfix(post, refresh=False)
            if log is not None:
                log(json.dumps(curve[-1]))
    train_seconds = time.perf_counter() - t0
    model.eval()
    return TrainResult(model.cpu(), task.tokenizer(), metrics, curve, phase, train_seconds,
                       {"seed": seed, "steps": steps, "device": device,
                        "cpu_seconds": round(time.process_time() - cpu0, 2)})


# ---------------------------------------------------------------------------- checkpoints

def save_run(result: TrainResult, recipe: Recipe, out: str | Path, command: str) -> dict[str, Any]:
    """Save a training run as a checkpoint (:func:`headlab.models.gpt.save_checkpoint`) with
    its loss curve (loss_curve.json, loss_curve.png); returns the provenance written."""
    out = Path(out)
    provenance = {
        "name": recipe.name,
        "description": recipe.description,
        "command": command,
        "seed": result.info["seed"],
        "steps": result.info["steps"],
        "device": result.info["device"],
        "threads": torch.get_num_threads(),
        "config": recipe.config.to_dict(),
        "n_params": result.model.num_params(),
        "data": {**recipe.task.describe(), "eval_size": recipe.eval_size},
        "recipe": {k: v for k, v in recipe.to_dict().items() if k not in ("config", "task", "name", "description")},
        "final_metrics": result.metrics,
        "phase_change": result.phase_change,
        "train_seconds": round(result.train_seconds, 2),
        # CPU time of this process: on a shared machine, a steadier measure of cost than wall-clock
        "cpu_seconds": result.info.get("cpu_seconds"),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
    }
    if hasattr(recipe.task, "phase_change"):
        provenance["phase_change_definition"] = " ".join(recipe.task.phase_change.__doc__.split())
    provenance = save_checkpoint(out, result.model, result.tokenizer, provenance)
    (out / "loss_curve.json").write_text(json.dumps(result.curve, indent=1) + "\n")
    plot_curve(result.curve, out / "loss_curve.png", title=recipe.name, phase_change=result.phase_change)
    return provenance


def plot_curve(curve: list[dict[str, Any]], path: str | Path, title: str = "",
               phase_change: dict[str, Any] | None = None) -> None:
    """Losses (left axis) and scores in [0, 1] (right axis: best induction score, accuracies) against step."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    steps = [r["step"] for r in curve]
    series = [(ax, "-", "loss", "eval loss"), (ax, "-", "loss_repeat", "loss, repeated tokens"),
              (ax, "-", "loss_random", "loss, other tokens"), (ax, "-", "val_loss", "validation loss"),
              (ax2, "--", "induction_best", "best induction score"), (ax2, "--", "agreement_acc", "agreement acc."),
              (ax2, "--", "pronoun_acc", "pronoun acc."), (ax2, "--", "copy_acc", "copy acc.")]
    for color, (axis, style, key, label) in enumerate(s for s in series if s[2] in curve[0]):
        axis.plot(steps, [r[key] for r in curve], style, color=f"C{color}", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("score / accuracy")
    if phase_change is not None:
        ax.axvline(phase_change["step"], color="grey", lw=0.8)
    ax.legend(loc="upper right", fontsize=8)
    ax2.legend(loc="center right", fontsize=8)
    ax.set_title(title)
    fig.savefig(str(path), dpi=100)


# ---------------------------------------------------------------------------- command line

def add_commands(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model organism from its recipe and save a checkpoint",
                              description="Train a named model organism (see headlab.training.loop.ORGANISMS).")
    p.add_argument("name", help="recipe name: " + ", ".join(ORGANISMS))
    p.add_argument("--seed", type=int, default=None, help="training seed (default: the recipe's)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps (default: the recipe's; the learning-rate schedule stretches to fit)")
    p.add_argument("--out", default=None, help="checkpoint folder (default: runs/NAME)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared machine more threads can be much slower)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train_command)


def _train_command(args) -> int:
    if args.name not in ORGANISMS:
        print(f"unknown organism {args.name!r}; recipes: {', '.join(ORGANISMS)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda asked for, but no CUDA device is available; use --device cpu", file=sys.stderr)
        return 2
    recipe = ORGANISMS[args.name]
    seed = recipe.seed if args.seed is None else args.seed
    steps = recipe.steps if args.steps is None else args.steps
    out = args.out or f"runs/{args.name}"
    torch.set_num_threads(args.threads)
    command = (f"python -m headlab train {args.name} --seed {seed} --steps {steps} "
               f"--device {args.device} --threads {args.threads} --out {out}")
    result = train(recipe, seed=seed, steps=steps, device=args.device, progress=not args.no_progress)
    provenance = save_run(result, recipe, out, command)
    summary = {k: v for k, v in provenance["final_metrics"].items() if not isinstance(v, list) or k.endswith("_head")}
    print(json.dumps({"name": recipe.name, "out": str(out), "train_seconds": provenance["train_seconds"],
                      "phase_change": provenance["phase_change"], "final_metrics": summary}, indent=1))
    return 0


# ---------------------------------------------------------------------------- recipes of chapters 1 and 2
# One appended block (the task classes live in headlab.data.two_relations). Each checkpoint is trained with
#   python -m headlab train NAME --threads 1 --out lib/headlab/checkpoints/NAME

def _chapter_1_2_recipes() -> list[Recipe]:
    from headlab.data.two_relations import LanguageWindows, TwoRelations

    relations = TwoRelations(n_letters=32, n_triples=8)

    def two_relations(name: str, description: str, seed: int, **config: Any) -> Recipe:
        config = GPTConfig(d_vocab=relations.d_vocab, n_ctx=relations.n_ctx, d_model=32, n_layers=1, d_mlp=0,
                           **config)
        return Recipe(name, description, config, relations, steps=3000, batch_size=64, lr=3e-3, warmup=50,
                      eval_every=100, eval_size=512, seed=seed)

    recipes = []
    for seed in range(3):
        for ln in (False, True):
            for n_heads in (1, 2):
                recipes.append(two_relations(
                    f"two-relations-{n_heads}h{'-ln' if ln else ''}-s{seed}",
                    f"chapter 1: one attention layer, {n_heads} head(s) of d_head {32 // n_heads}, "
                    f"{'with' if ln else 'without'} LayerNorm, on two relations at once; seed {seed}",
                    seed, n_heads=n_heads, layer_norm=ln))
        for d_head in (1, 2, 4, 8):  # chapter 2: the two-head model with narrower heads (16 is above)
            recipes.append(two_relations(
                f"two-relations-2h-dh{d_head}-s{seed}",
                f"chapter 2: one attention layer, 2 heads of d_head {d_head} (d_model 32), without "
                f"LayerNorm, on two relations at once; seed {seed}",
                seed, n_heads=2, d_head=d_head, layer_norm=False))
    language = LanguageWindows(n_ctx=32)
    for n_heads in (1, 2, 4, 8):
        config = GPTConfig(d_vocab=language.d_vocab, n_ctx=language.n_ctx, d_model=64, n_layers=2,
                           n_heads=n_heads, d_mlp=128)
        recipes.append(Recipe(
            f"heads-{n_heads}", f"chapter 2: a 2-layer GPT on the synthetic language with {n_heads} head(s) "
            f"of d_head {64 // n_heads} per layer (the adjustable-heads widget)",
            config, language, steps=4000, batch_size=32, lr=3e-3, warmup=200, eval_every=250, eval_size=256))
    return recipes


ORGANISMS.update({r.name: r for r in _chapter_1_2_recipes()})


# ---------------------------------------------------------------------------- chapter 6: distillation students
# Appended for headlab.training.distill (scripts/distill_students.py): the student trained with and without attention
# transfer from organism-small-s0. Half the width of the small organism (d_model 64, d_mlp 256), the same
# 2 layers x 4 heads, so that every student head has a teacher head; half its steps. Not a shipped organism:
# its runs live in headlab/results/ with their provenance.
ORGANISMS.update({r.name: r for r in [
    _language_recipe("distill-student", "a 2-layer x 4-head GPT of half the small organism's width, the "
                     "student of chapter 6's attention-transfer distillation", steps=1500,
                     d_model=64, n_layers=2, n_heads=4, d_mlp=256),
]})
