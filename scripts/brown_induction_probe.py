"""Probes and evidence: do 2-layer attention-only models on the Brown Corpus form induction heads?

Train a variant of a recipe of :mod:`deviating.training.recipes.brown` (one torch thread), saving its
evaluation curve and a summary under OUT (no weights):

    python scripts/brown_induction_probe.py run OUT --recipe brown-attn-2l [--steps N] [--lr X]
        [--batch B] [--vocab V] [--ctx N] [--repeat F] [--min-span L] [--max-span L]
        [--heads H] [--d-model D] [--wd W] [--warmup S]

Print the evidence table of runs saved by ``run`` or by ``python -m deviating train NAME --out DIR``
(a folder with ``loss_curve.json``, or the ``curve.jsonl`` of a run stopped early), and with
``--curve`` each run's curve (so the phase change shows):

    python scripts/brown_induction_probe.py table DIR [DIR ...] [--curve]

The first probes (BPE 2048, ctx 256, batch 16, lr 2e-3, 4000 steps; then BPE 1024, ctx 128, batch
32, lr 5e-3, 1600 steps, on plain text and with a quarter of the windows repeated: no induction)
were run by this script's previous version (git history); then, with this one:

    run p3 --repeat 0.5 --heads 4 --lr 5e-3 --steps 3000                   # stopped at 1300: none
    run p4 --repeat 0.5 --steps 3000                                       # stopped at 1400: none
    run p5                                                                 # brown-attn-2l: step 1900

Columns: validation loss beside the unigram and bigram baselines; the loss on the first and second
copy of repeated validation text and of repeated random tokens; the best induction score (on
the random repeats) beside chance (a uniform causal pattern's score); the best layer-0
previous-token score beside chance; CPU minutes of the run; the first step meeting
:meth:`~deviating.data.brown_windows.BrownWindows.phase_change`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

from deviating.data.brown_windows import BrownWindows  # noqa: E402
from deviating.training.loop import train  # noqa: E402
from deviating.training.recipes import get_recipe  # noqa: E402

COLUMNS = ("val_loss", "unigram_loss", "bigram_loss", "loss_text_first", "loss_text_second", "loss_random_first",
           "loss_random_second", "induction_best", "induction_chance", "previous_token_l0", "previous_token_chance")
CRITERION = BrownWindows()  # its phase_change reads a curve row (no corpus is loaded)
SHORT = ("val", "uni", "bi", "text1", "text2", "rand1", "rand2", "ind", "ind0", "prev0", "prv0")


def variant(args):
    """The recipe ``args.recipe`` with the options given on the command line changed."""
    base = get_recipe(args.recipe)
    pick = lambda pairs: {k: v for k, v in pairs if v is not None}  # noqa: E731
    task = dataclasses.replace(base.task, **pick((("vocab_size", args.vocab), ("n_ctx", args.ctx),
                                                  ("repeat_fraction", args.repeat), ("min_span", args.min_span),
                                                  ("max_span", args.max_span))))
    config = dataclasses.replace(base.config, d_vocab=task.d_vocab, n_ctx=task.n_ctx, d_head=None, init_std=None,
                                 **pick((("n_heads", args.heads), ("d_model", args.d_model))))
    return dataclasses.replace(base, task=task, config=config, **pick((
        ("steps", args.steps), ("lr", args.lr), ("batch_size", args.batch), ("weight_decay", args.wd),
        ("warmup", args.warmup))))


def run(args) -> int:
    torch.set_num_threads(1)
    recipe = variant(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "curve.jsonl").open("w")

    def write(row: str) -> None:
        log.write(row + "\n")
        log.flush()
        print(row, flush=True)

    cpu0 = time.process_time()
    result = train(recipe, progress=False, log=write)
    (out / "loss_curve.json").write_text(json.dumps(result.curve, indent=1) + "\n")
    summary = {"recipe": recipe.to_dict(), "phase_change": result.phase_change, "final_metrics": result.metrics,
               "cpu_seconds": round(time.process_time() - cpu0, 1), "train_seconds": round(result.train_seconds, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return 0


def table(args) -> int:
    print("run".ljust(28) + "".join(s.rjust(7) for s in SHORT) + "  cpu_min  phase_step")
    for folder in map(Path, args.dirs):
        if (folder / "loss_curve.json").is_file():
            curve = json.loads((folder / "loss_curve.json").read_text())
        else:  # a run stopped before its end: the rows logged so far
            curve = [json.loads(line) for line in (folder / "curve.jsonl").read_text().splitlines() if line]
        info = next((json.loads((folder / f).read_text()) for f in ("summary.json", "provenance.json")
                     if (folder / f).is_file()), {})
        last = curve[-1]
        cpu = info.get("cpu_seconds")
        phase = next((r["step"] for r in curve if CRITERION.phase_change(r)), "-")  # today's criterion
        print(folder.name[:27].ljust(28) + "".join(f"{last[c]:7.2f}" if c in last else "      -" for c in COLUMNS)
              + (f"{cpu / 60:9.1f}" if cpu else "        -") + f"  {phase}")
        if args.curve:
            print("   step   wall   val   text1 text2 rand1 rand2  ind    prev0")
            for r in curve:
                print(f"  {r['step']:5d} {r['seconds']:6.0f}s {r['val_loss']:.2f}  {r['loss_text_first']:.2f}  "
                      f"{r['loss_text_second']:.2f}  {r['loss_random_first']:.2f}  {r['loss_random_second']:.2f}  "
                      f"{r['induction_best']:.3f}  {r['previous_token_l0']:.3f}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train a variant of a Brown recipe and save its curve")
    p.add_argument("out")
    p.add_argument("--recipe", default="brown-attn-2l")
    for flag, kind in (("--steps", int), ("--lr", float), ("--batch", int), ("--vocab", int), ("--ctx", int),
                       ("--repeat", float), ("--min-span", int),
                       ("--max-span", int), ("--heads", int), ("--d-model", int), ("--wd", float), ("--warmup", int)):
        p.add_argument(flag, type=kind, default=None)
    p.set_defaults(func=run)
    t = sub.add_parser("table", help="print the evidence table of saved runs")
    t.add_argument("dirs", nargs="+")
    t.add_argument("--curve", action="store_true", help="also print each run's curve")
    t.set_defaults(func=table)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
