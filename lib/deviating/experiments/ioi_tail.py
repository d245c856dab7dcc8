"""The indirect-object task as the tail of a model of English (issue 36, items 3 and 4).

Two questions about ``ioi-gpt``, each seed a separate model:

* **Task against text** (chapter 6, claim C20): every head's importance on the task (how much of
  ``logit(IO) - logit(S)`` at END is lost when the head alone is removed) beside its importance on
  held-out Brown text (how much the next-token loss rises). Are the task's heads the text's heads,
  and is the task's importance more concentrated than the text's?
* **Pruning by the average** (chapter 7, claims C9 and C10): remove heads in the order of their
  importance on *text*, least important first (what a pruning method judged on an average
  benchmark does), and watch both the text's loss and the task's accuracy at each count.

Both use the same ablation (mean over the prompts and windows themselves by default). The prompts
are of held-out names and *training* templates (:func:`task_prompts`): the shipped models do the
task there (0.98 and 0.995), while on held-out templates they are far less reliable, and a head's
share of a task the model does not do would mean little.
:func:`run` writes ``results/ioi_tail.json`` for the three seeds; the chapters read it::

    python -m deviating.experiments.ioi_tail --out lib/deviating/results/ioi_tail.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import time
from pathlib import Path
from typing import Sequence

import torch

from deviating.analysis.ioi import IoiMetric, prompt_batch
from deviating.data.ioi.prompts import IoiPrompts
from headlab.analysis.importance import head_importance
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel
from headlab.metrics import Metric
from deviating.experiments.ioi_circuit import IOI_MODELS  # the recipe's training seeds, named once

__all__ = ["IOI_MODELS", "TASK_SEED", "task_prompts", "task_importance", "text_importance", "text_order", "prune_by_text", "seed_record", "run",
           "main"]

TASK_SEED = 7  # the prompts' draw (held-out names, training templates), the same for every model


def task_prompts(hm: HeadModel, n: int = 128, seed: int = TASK_SEED) -> IoiPrompts:
    """``n`` prompts of the names ``hm`` (an ``ioi-gpt`` checkpoint) never saw in an indirect-object
    sentence, in its training templates."""
    from deviating.data.ioi.prompts import make_prompts
    from deviating.data.ioi.windows import IoiSplit

    split = IoiSplit.from_provenance(hm.provenance)
    return make_prompts(hm.tokenizer, split.heldout_names, split.train_templates, n, seed)


def _ablation(kind: str, reference) -> Ablation:
    if kind not in ("zero", "mean"):
        raise ValueError(f"ablation must be 'zero' or 'mean', got {kind!r}")
    return Ablation("zero") if kind == "zero" else Ablation("mean", reference=reference)


def task_importance(hm: HeadModel, prompts: IoiPrompts, ablation: str = "mean") -> torch.Tensor:
    """``(n_layers, n_heads, n_prompts)``: the logit difference lost when each head alone is removed
    (clean minus ablated; positive where the head helps the task). Mean ablation takes each head's
    mean output over the prompts themselves."""
    batch = prompt_batch(prompts)
    imp = head_importance(hm, batch, ablation=_ablation(ablation, batch), metric=Metric(IoiMetric(prompts)))
    return -imp.effects


def text_importance(hm: HeadModel, windows: torch.Tensor, ablation: str = "mean") -> torch.Tensor:
    """``(n_layers, n_heads, n_windows)``: the rise of the next-token loss on ``windows`` (token ids,
    ``(n, pos)``) when each head alone is removed."""
    if not isinstance(windows, torch.Tensor) or windows.dim() != 2:
        raise ValueError(f"windows must be a (n, pos) tensor of token ids, got {getattr(windows, 'shape', windows)!r}")
    batch = {"input_ids": windows, "attention_mask": torch.ones_like(windows)}
    return head_importance(hm, batch, ablation=_ablation(ablation, batch)).effects


def text_order(text: torch.Tensor) -> list[Head]:
    """The heads from least to most important on text (mean over windows; ties by head index)."""
    mean = text.mean(-1)
    heads = [(l, h) for l in range(mean.shape[0]) for h in range(mean.shape[1])]
    return sorted(heads, key=lambda lh: (round(float(mean[lh]), 9), lh))


@torch.no_grad()
def prune_by_text(hm: HeadModel, prompts: IoiPrompts, windows: torch.Tensor, order: Sequence[Head],
                  counts: Sequence[int], ablation: str = "mean") -> list[dict]:
    """For each ``k`` of ``counts``: the first ``k`` heads of ``order`` removed together, the text's
    mean loss and the task's accuracy (share of prompts with ``logit(IO) - logit(S) > 0``) and mean
    logit difference."""
    from deviating.data.ioi.prompts import logit_diff
    from headlab.metrics.functions import next_token_loss

    order = [tuple(h) for h in order]
    bad = [k for k in counts if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(order)]
    if bad:
        raise ValueError(f"counts must be whole numbers from 0 to {len(order)} (the heads in order), got {bad}")
    p_batch = prompt_batch(prompts)
    w_batch = {"input_ids": windows, "attention_mask": torch.ones_like(windows)}
    how = {"task": _ablation(ablation, p_batch), "text": _ablation(ablation, w_batch)}
    rows = []
    for k in counts:
        removed = order[:k]
        with hm.ablate(removed, how["task"]) if removed else contextlib.nullcontext():
            diff = logit_diff(hm.forward(p_batch), prompts).float()
        with hm.ablate(removed, how["text"]) if removed else contextlib.nullcontext():
            loss = next_token_loss(hm.forward(w_batch), windows, reduction="mean")
        rows.append({"removed": k, "heads": [list(h) for h in removed], "text_loss": round(float(loss), 5),
                     "task_accuracy": round(float((diff > 0).float().mean()), 5),
                     "task_logit_diff": round(float(diff.mean()), 5)})
    return rows


def seed_record(hm: HeadModel, prompts: IoiPrompts, windows: torch.Tensor, ablation: str = "mean",
                counts: Sequence[int] | None = None) -> dict:
    """One model's record: both importances per head (mean over inputs, and per input for intervals)
    and the pruning curve by text importance."""
    task, text = task_importance(hm, prompts, ablation), text_importance(hm, windows, ablation)
    order = text_order(text)
    counts = list(range(len(order) + 1)) if counts is None else list(counts)
    return {"task": [[round(float(x), 6) for x in row] for row in task.mean(-1).tolist()],
            "text": [[round(float(x), 6) for x in row] for row in text.mean(-1).tolist()],
            "task_per_prompt": [[[round(float(x), 5) for x in cell] for cell in row] for row in task.tolist()],
            "text_per_window": [[[round(float(x), 5) for x in cell] for cell in row] for row in text.tolist()],
            "text_order": [list(h) for h in order],
            "pruning": prune_by_text(hm, prompts, windows, order, counts, ablation)}


def run(out: Path | None, models: Sequence[str] = IOI_MODELS, n_prompts: int = 128, n_windows: int = 64,
        ablation: str = "mean", command: str = "") -> dict:
    """Every model of ``models``: its :func:`seed_record` on ``n_prompts`` :func:`task_prompts` and
    ``n_windows`` held-out Brown windows of its own task; written to ``out``."""
    import headlab
    from deviating.training.recipes import RECIPES

    start, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    record = {"command": command, "ablation": ablation, "n_prompts": n_prompts, "n_windows": n_windows,
              "models": {}}
    for name in models:
        hm = headlab.load(name)
        prompts = task_prompts(hm, n=n_prompts)
        windows = RECIPES[name].task.eval_data(n_windows)["brown"].windows
        record["models"][name] = seed_record(hm, prompts, windows, ablation)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    record["wall_seconds"] = round(time.time() - start, 1)
    record["cpu_seconds"] = round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1)
    if out is not None:
        Path(out).write_text(json.dumps(record) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deviating.experiments.ioi_tail", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the JSON file to write")
    parser.add_argument("--models", nargs="+", default=list(IOI_MODELS))
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--ablation", default="mean", choices=["zero", "mean"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    command = "python -m deviating.experiments.ioi_tail " + " ".join(argv if argv is not None else [])
    run(Path(args.out), args.models, args.prompts, args.windows, args.ablation, command=command.strip())
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
