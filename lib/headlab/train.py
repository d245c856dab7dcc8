"""Training the book's model organisms, reproducibly.

A :class:`Recipe` names everything that makes a checkpoint: the model config,
the data task, steps, batch size and learning rate. :data:`ORGANISMS` maps
each shipped organism's name to its recipe, so

    python -m headlab train attn-only-2l --seed 0 --out lib/headlab/checkpoints/attn-only-2l

reproduces the shipped checkpoint (up to floating-point noise between
machines and thread counts). The attention-only organisms learn
:class:`RepeatedSpans`: random tokens with one random span repeated at a
random distance, the data on which induction heads form.
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
from typing import Any, Callable, Protocol

import torch

from headlab.detect import induction_score, previous_token_score
from headlab.metrics import next_token_loss
from headlab.organisms import GPT, GPTConfig, sha256_file

EVAL_SEED = 1234  # the evaluation data is the same whatever the training seed


# ---------------------------------------------------------------------------- data: repeated spans

@dataclass
class SpanBatch:
    """A batch of :class:`RepeatedSpans` sequences and where their repeat is.

    ``tokens[b, start[b] + period[b] + k] == tokens[b, start[b] + k]`` for
    ``0 <= k < span_len[b]``. ``predictable[b, i]`` marks target positions
    ``i`` inside the second copy that an induction head can predict: the
    copy's positions after its first token (``k >= 1``).
    """

    tokens: torch.Tensor  # (batch, n_ctx) int64, BOS at position 0
    start: torch.Tensor  # (batch,) first position of the first copy
    period: torch.Tensor  # (batch,) distance between the copies (>= span_len)
    span_len: torch.Tensor  # (batch,)
    predictable: torch.Tensor  # (batch, n_ctx) bool


@dataclass
class RepeatedSpans:
    """Random tokens ``t0 .. t{n_tokens-1}`` after a BOS, with one span repeated.

    Per sequence, independently: a span length ``L`` uniform in
    ``[min_span, max_span]``, a period ``d`` uniform in ``[L, n_ctx - 1 - L]``
    (copies never overlap), a start ``s`` uniform in ``[1, n_ctx - d - L]``.
    Because ``d`` and ``s`` vary, no fixed-offset (positional) head can find
    the earlier copy: only an induction mechanism can.
    Token ids: ``t{i}`` is ``i``, then ``<bos>``, then ``<pad>``.
    """

    n_tokens: int = 64
    n_ctx: int = 64
    min_span: int = 8
    max_span: int = 31
    kind: str = "repeated_spans"
    version: str = "1"

    def __post_init__(self) -> None:
        if not 1 <= self.min_span <= self.max_span:
            raise ValueError(f"need 1 <= min_span <= max_span, got {self.min_span}, {self.max_span}")
        if 2 * self.max_span > self.n_ctx - 1:
            raise ValueError(f"two copies of a span of {self.max_span} tokens do not fit after the BOS in "
                             f"n_ctx={self.n_ctx}; need 2 * max_span <= n_ctx - 1")

    @property
    def bos_id(self) -> int:
        return self.n_tokens

    @property
    def pad_id(self) -> int:
        return self.n_tokens + 1

    @property
    def d_vocab(self) -> int:
        return self.n_tokens + 2

    def sample(self, batch_size: int, generator: torch.Generator) -> SpanBatch:
        """Draw ``batch_size`` sequences of ``n_ctx`` tokens (see the class docstring)."""
        B, n, g = batch_size, self.n_ctx, generator

        def uniform_int(low: torch.Tensor | int, count: torch.Tensor | int) -> torch.Tensor:
            """Integers uniform in [low, low + count), count >= 1 (elementwise)."""
            return low + (torch.rand(B, generator=g) * count).long()

        span_len = uniform_int(self.min_span, self.max_span - self.min_span + 1)  # (batch,)
        period = uniform_int(span_len, n - 2 * span_len)  # (batch,) in [L, n - 1 - L]
        start = uniform_int(1, n - period - span_len)  # (batch,) in [1, n - d - L]
        tokens = torch.randint(0, self.n_tokens, (B, n), generator=g)  # (batch, n_ctx)
        tokens[:, 0] = self.bos_id
        idx = torch.arange(n)[None, :]  # (1, n_ctx)
        second_start = (start + period)[:, None]  # (batch, 1)
        in_second = (idx >= second_start) & (idx < second_start + span_len[:, None])  # (batch, n_ctx)
        source = (idx - period[:, None]).clamp(min=0)  # (batch, n_ctx)
        tokens = torch.where(in_second, tokens.gather(1, source), tokens)
        predictable = in_second & (idx > second_start)
        return SpanBatch(tokens, start, period, span_len, predictable)

    def tokenizer(self):
        """A ``PreTrainedTokenizerFast`` over ``t0 .. t{n-1}``, ``<bos>`` and ``<pad>`` (whitespace-separated)."""
        from tokenizers import Tokenizer, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        vocab = {f"t{i}": i for i in range(self.n_tokens)}
        vocab.update({"<bos>": self.bos_id, "<pad>": self.pad_id})
        tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", self.bos_id)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", pad_token="<pad>")

    # -- the task interface used by the training loop
    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.sample(batch_size, generator).tokens, None

    def eval_data(self, n: int) -> SpanBatch:
        return self.sample(n, torch.Generator().manual_seed(EVAL_SEED))

    @torch.no_grad()
    def evaluate(self, model: GPT, data: SpanBatch) -> dict[str, Any]:
        """Losses and head scores on the fixed evaluation batch.

        ``loss``: mean next-token loss over all targets; ``loss_repeat``: over
        predictable targets (second copy, k >= 1); ``loss_random``: over the
        others (their best possible loss is ``ln n_tokens``).
        ``induction``/``prev_token``: per (layer, head), the batch mean of
        :func:`~headlab.detect.induction_score` / ``previous_token_score``.
        """
        tokens = data.tokens.to(model.device)
        logits, patterns = run_with_patterns(model, tokens)
        losses = next_token_loss(logits, tokens, reduction="token")  # (batch, pos-1)
        pred = data.predictable[:, 1:].to(losses.device)  # (batch, pos-1), target i+1 predictable
        ind = torch.stack([induction_score(p, tokens).mean(0) for p in patterns])  # (layer, head)
        prev = torch.stack([previous_token_score(p).mean(0) for p in patterns])  # (layer, head)
        best_ind, best_prev = int(ind.argmax()), int(prev.argmax())
        n_heads = ind.shape[1]
        return {
            "loss": float(losses.mean()),
            "loss_repeat": float(losses[pred].mean()),
            "loss_random": float(losses[~pred].mean()),
            "induction_best": float(ind.max()),
            "induction_best_head": [best_ind // n_heads, best_ind % n_heads],
            "prev_token_best": float(prev.max()),
            "prev_token_best_head": [best_prev // n_heads, best_prev % n_heads],
            "induction": [[round(float(x), 4) for x in row] for row in ind],
            "prev_token": [[round(float(x), 4) for x in row] for row in prev],
        }

    def phase_change(self, metrics: dict[str, Any]) -> bool:
        """The induction phase change has happened at an evaluation when the best
        head's induction score exceeds 0.3 **and** the loss on predictable
        targets is below half of ``ln n_tokens`` (the loss of a uniform guess)."""
        return metrics["induction_best"] > 0.3 and metrics["loss_repeat"] < 0.5 * math.log(self.n_tokens)

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_with_patterns(model: GPT, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and each layer's attention pattern ``(batch, head, q_pos, k_pos)`` (hooks removed after)."""
    patterns: list[torch.Tensor] = []
    handles = [b.attn.hook_pattern.register_forward_hook(lambda m, i, out: patterns.append(out.detach()))
               for b in model.blocks]
    try:
        logits = model(tokens, attention_mask)
    finally:
        for h in handles:
            h.remove()
    return logits, patterns


# ---------------------------------------------------------------------------- recipes

class Task(Protocol):
    kind: str
    version: str

    @property
    def d_vocab(self) -> int: ...
    def tokenizer(self): ...
    def train_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]: ...
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


ORGANISMS: dict[str, Recipe] = {
    r.name: r for r in [
        _span_recipe("attn-only-1l", "1-layer attention-only model on repeated random spans: "
                     "cannot form induction heads", n_layers=1, steps=1500),
        _span_recipe("attn-only-2l", "2-layer attention-only model on repeated random spans: "
                     "forms induction heads in a phase change", n_layers=2, steps=1500),
        _span_recipe("tiny-attn-2l", "a tiny 2-layer attention-only model, retrained by the tests in seconds",
                     n_layers=2, steps=300, task=RepeatedSpans(n_tokens=16, n_ctx=32, min_span=4, max_span=15),
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
    ``seed``; evaluation uses a fixed batch (seed :data:`EVAL_SEED`) every
    ``recipe.eval_every`` steps and at the end.
    """
    from tqdm.auto import tqdm

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
    t0 = time.perf_counter()
    running = None

    def evaluate(step: int) -> dict[str, Any]:
        nonlocal phase
        model.eval()
        m = task.evaluate(model, eval_data)
        model.train()
        row = {"step": step, "seconds": round(time.perf_counter() - t0, 3), "train_loss": running,
               **{k: v for k, v in m.items() if not isinstance(v, list) or k.endswith("_head")}}
        curve.append(row)
        if phase is None and check_phase is not None and check_phase(m):
            phase = {"step": step, "seconds": row["seconds"]}
        return m

    model.train()
    evaluate(0)
    bar = tqdm(range(1, steps + 1), desc=recipe.name, disable=not progress, mininterval=0.5)
    for step in bar:
        for g_ in opt.param_groups:
            g_["lr"] = _lr_at(step - 1, recipe, steps)
        tokens, mask = task.train_batch(recipe.batch_size, gen)
        tokens = tokens.to(device)
        mask = mask.to(device) if mask is not None else None
        loss = model.loss(tokens, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        loss_value = float(loss.detach())
        running = loss_value if running is None else 0.95 * running + 0.05 * loss_value
        if step % recipe.eval_every == 0 or step == steps:
            m = evaluate(step)
            post = {"loss": f"{running:.3f}"}
            if "induction_best" in m:
                post.update(rep=f"{m['loss_repeat']:.2f}", ind=f"{m['induction_best']:.2f}")
            bar.set_postfix(post, refresh=False)
            if log is not None:
                log(json.dumps(curve[-1]))
    train_seconds = time.perf_counter() - t0
    model.eval()
    metrics = task.evaluate(model, eval_data)
    return TrainResult(model.cpu(), task.tokenizer(), metrics, curve, phase, train_seconds,
                       {"seed": seed, "steps": steps, "device": device})


# ---------------------------------------------------------------------------- checkpoints

def save_checkpoint(result: TrainResult, recipe: Recipe, out: str | Path, command: str) -> dict[str, Any]:
    """Write model.safetensors (float32), tokenizer files, loss_curve.json/.png and provenance.json to ``out``."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in result.model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    result.tokenizer.save_pretrained(str(out))
    (out / "loss_curve.json").write_text(json.dumps(result.curve, indent=1) + "\n")
    plot_curve(result.curve, out / "loss_curve.png", title=recipe.name, phase_change=result.phase_change)
    files = {f: sha256_file(out / f) for f in ("model.safetensors", "tokenizer.json")}
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
        "data": {**recipe.task.describe(), "eval_seed": EVAL_SEED, "eval_size": recipe.eval_size},
        "recipe": {k: v for k, v in recipe.to_dict().items() if k not in ("config", "task", "name", "description")},
        "final_metrics": result.metrics,
        "phase_change": result.phase_change,
        "train_seconds": round(result.train_seconds, 2),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "sha256": files["model.safetensors"],
        "files": files,
    }
    if hasattr(recipe.task, "phase_change"):
        provenance["phase_change_definition"] = " ".join(recipe.task.phase_change.__doc__.split())
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return provenance


def plot_curve(curve: list[dict[str, Any]], path: str | Path, title: str = "",
               phase_change: dict[str, Any] | None = None) -> None:
    """Loss curves (and the best induction score, when logged) against step, saved as a PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    steps = [r["step"] for r in curve]
    for key, label in [("loss", "eval loss"), ("loss_repeat", "loss, repeated tokens"),
                       ("loss_random", "loss, other tokens"), ("val_loss", "validation loss")]:
        if key in curve[0]:
            ax.plot(steps, [r[key] for r in curve], label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    if "induction_best" in curve[0]:
        ax2 = ax.twinx()
        ax2.plot(steps, [r["induction_best"] for r in curve], "k--", label="best induction score")
        ax2.set_ylim(0, 1)
        ax2.set_ylabel("best induction score")
        ax2.legend(loc="center right", fontsize=8)
    if phase_change is not None:
        ax.axvline(phase_change["step"], color="grey", lw=0.8)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)
    fig.savefig(str(path), dpi=100)


# ---------------------------------------------------------------------------- command line

def add_commands(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a model organism from its recipe and save a checkpoint",
                              description="Train a named model organism (see headlab.train.ORGANISMS).")
    p.add_argument("name", help="recipe name: " + ", ".join(ORGANISMS))
    p.add_argument("--seed", type=int, default=None, help="training seed (default: the recipe's)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    p.add_argument("--out", default=None, help="checkpoint folder (default: runs/NAME)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
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
    provenance = save_checkpoint(result, recipe, out, command)
    summary = {k: v for k, v in provenance["final_metrics"].items() if not isinstance(v, list) or k.endswith("_head")}
    print(json.dumps({"name": recipe.name, "out": str(out), "train_seconds": provenance["train_seconds"],
                      "phase_change": provenance["phase_change"], "final_metrics": summary}, indent=1))
    return 0


# ---------------------------------------------------------------------------- recipes of chapters 1 and 2
# One appended block (the task classes live in headlab.tasks). Each checkpoint is trained with
#   python -m headlab train NAME --threads 1 --out lib/headlab/checkpoints/NAME

def _chapter_1_2_recipes() -> list[Recipe]:
    from headlab.tasks import LanguageWindows, TwoRelations

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
