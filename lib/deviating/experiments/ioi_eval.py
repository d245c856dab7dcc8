"""How well a trained indirect-object model (``ioi-gpt``) does, measured beyond its training log.

The training loop scores each run on 256 prompts per split (:data:`~deviating.data.ioi.windows.EVAL_SPLITS`),
enough to watch the task form but not to state its accuracy to better than a few points.
:func:`ioi_scores` draws a fresh, larger set of prompts per split (another seed than the training
evaluation's, so nothing was chosen on them) and reports, per split, the share of prompts with
``logit(IO) - logit(S) > 0`` with its Wilson interval, and the mean logit difference.

:func:`brown_losses` puts the model's next-token loss on held-out Brown Corpus windows beside
``brown-gpt``'s on windows of the same length from the same held-out texts (each model reads them
with its own tokenizer: ``ioi-gpt``'s is ``brown-gpt``'s plus the names, so the two token streams
differ only where a name occurs).

:func:`heldout_breakdown` says where the held-out split's errors sit: its accuracy on the same
fresh prompts grouped by order (ABBA, BABA) and by each part of the template (lead-in, activity,
giving clause; :data:`~deviating.data.ioi.sentences.TEMPLATE_PARTS`).

Run on checkpoint folders::

    python -m deviating.experiments.ioi_eval runs/ioi-gpt runs/ioi-gpt-s1 --prompts 1024 [--breakdown]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Sequence

import torch

from deviating.data.ioi.prompts import logit_diff, make_prompts
from deviating.data.ioi.sentences import TEMPLATE_PARTS
from deviating.data.ioi.windows import EVAL_SPLITS, IOI_EVAL_SEED, IoiSplit

__all__ = ["FRESH_SEED_OFFSET", "wilson", "ioi_scores", "heldout_breakdown", "brown_losses", "main"]

FRESH_SEED_OFFSET = 1000  # the fresh prompts' seed: IOI_EVAL_SEED + FRESH_SEED_OFFSET + the split's index


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (95% by default)."""
    if not isinstance(n, int) or n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k!r}, n={n!r}")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@torch.no_grad()
def ioi_scores(model, tokenizer, split: IoiSplit, n: int = 1024, batch: int = 256) -> dict[str, dict]:
    """Per split of :data:`EVAL_SPLITS`: ``{"n", "accuracy", "low", "high", "logit_diff"}`` on ``n``
    fresh prompts (seed ``IOI_EVAL_SEED + FRESH_SEED_OFFSET + i``)."""
    if not isinstance(n, int) or n < 2 or n % 2:
        raise ValueError(f"n must be an even number of prompts (half of each order), at least 2; got {n!r}")
    names = {"train": split.train_names, "heldout": split.heldout_names}
    templates = {"train": split.train_templates, "heldout": split.heldout_templates}
    out = {}
    for i, (key, (who, which)) in enumerate(EVAL_SPLITS.items()):
        prompts = make_prompts(tokenizer, names[who], templates[which], n, IOI_EVAL_SEED + FRESH_SEED_OFFSET + i)
        diffs = []
        for start in range(0, n, batch):
            part = prompts.subset(range(start, min(n, start + batch)))
            diffs.append(logit_diff(model(part.tokens), part).float())
        diff = torch.cat(diffs)
        right = int((diff > 0).sum())
        low, high = wilson(right, n)
        out[key] = {"n": n, "accuracy": right / n, "low": low, "high": high, "logit_diff": float(diff.mean())}
    return out


@torch.no_grad()
def heldout_breakdown(model, tokenizer, split: IoiSplit, n: int = 1024, batch: int = 256) -> dict[str, dict]:
    """The held-out split of :func:`ioi_scores` (the same ``n`` fresh prompts), its accuracy grouped
    by ``"order"`` and by each template part (``"lead_in"``, ``"activity"``, ``"giving"``): per group
    key (the part's text, the lead-in as its words before the names), ``{"n", "accuracy"}``."""
    if not isinstance(n, int) or n < 2 or n % 2:
        raise ValueError(f"n must be an even number of prompts (half of each order), at least 2; got {n!r}")
    prompts = make_prompts(tokenizer, split.heldout_names, split.heldout_templates, n,
                           IOI_EVAL_SEED + FRESH_SEED_OFFSET + list(EVAL_SPLITS).index("heldout"))
    right = torch.cat([logit_diff(model(part.tokens), part).float() > 0
                       for part in (prompts.subset(range(s, min(n, s + batch))) for s in range(0, n, batch))]).tolist()
    keys = {"order": lambda x: x.order, "lead_in": lambda x: TEMPLATE_PARTS[x.template][0][0].strip(),
            "activity": lambda x: TEMPLATE_PARTS[x.template][1], "giving": lambda x: TEMPLATE_PARTS[x.template][2]}
    out = {}
    for name, key in keys.items():
        groups: dict[str, list[bool]] = {}
        for sentence, ok in zip(prompts.sentences, right):
            groups.setdefault(key(sentence), []).append(ok)
        out[name] = {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(groups.items())}
    return out


@torch.no_grad()
def brown_losses(ioi_model, windows: int = 256) -> dict[str, float]:
    """The mean next-token loss on ``windows`` held-out Brown windows of the ``ioi-gpt`` task's length:
    ``{"ioi-gpt": ..., "brown-gpt": ...}`` (``brown-gpt`` on windows of the same length cut from the
    same validation texts with its own tokenizer). Needs the cached Brown Corpus."""
    import headlab
    from deviating.training.recipes import RECIPES
    from deviating.training.recipes.ioi import ioi_task
    from headlab.metrics.functions import next_token_loss

    task = ioi_task()
    mine = task.eval_data(windows)["brown"].windows
    theirs_task = dataclasses.replace(RECIPES["brown-gpt"].task, n_ctx=task.n_ctx, min_span=task.min_span,
                                      max_span=task.max_span)  # the repeats are not read here
    theirs = theirs_task.eval_data(windows).windows
    brown_gpt = headlab.load("brown-gpt").model.eval()
    return {"ioi-gpt": float(next_token_loss(ioi_model(mine), mine, reduction="mean")),
            "brown-gpt": float(next_token_loss(brown_gpt(theirs), theirs, reduction="mean"))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deviating.experiments.ioi_eval", description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", help="checkpoint folders of ioi-gpt runs")
    parser.add_argument("--prompts", type=int, default=1024, help="fresh prompts per split (even; default 1024)")
    parser.add_argument("--brown", action="store_true", help="also the Brown validation loss beside brown-gpt's")
    parser.add_argument("--breakdown", action="store_true",
                        help="also the held-out split's accuracy by order and by template part")
    args = parser.parse_args(argv)
    from headlab.models.checkpoints import load_checkpoint

    torch.set_num_threads(1)
    for folder in args.folders:
        if not (Path(folder) / "provenance.json").is_file():
            print(f"{folder}: no provenance.json there; give the folder a `deviating train` run wrote", file=sys.stderr)
            return 2
        org = load_checkpoint(folder)
        model = org.model.eval()
        record = {"folder": str(folder), "steps": org.provenance["steps"],
                  "cpu_seconds": org.provenance.get("cpu_seconds"),
                  "splits": ioi_scores(model, org.tokenizer, IoiSplit.from_provenance(org.provenance), args.prompts)}
        if args.breakdown:
            record["heldout_breakdown"] = heldout_breakdown(model, org.tokenizer,
                                                            IoiSplit.from_provenance(org.provenance), args.prompts)
        if args.brown:
            record["brown_val_loss"] = brown_losses(model)
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
