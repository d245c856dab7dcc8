#!/usr/bin/env python3
"""Train chapter 7's sparse autoencoders and ship them with their provenance.

For one layer of a model organism trained on the synthetic language: collect the layer's
concatenated head outputs ``z`` on ``--windows`` windows of the language (documents drawn
with ``--data-seed``), train a top-k SAE for each ``--seeds`` (and, with ``--l1``, one L1 SAE
at the first seed), evaluate each on held-out windows (``--data-seed + 1``) and write
``<out>/<model>-L<layer>-<kind>-s<seed>.safetensors`` and ``.json`` (command, seed, config,
training log, held-out metrics, sha256 of the weights and of the model's weights). With
``--head-features N``, also one small top-k SAE per head on that head's own ``d_head``-dimensional
output (``<model>-L<layer>-head<h>-topk-s<seed>``, first seed only).

    python scripts/train_saes.py --model organism --layer 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "lib" / "headlab" / "results" / "saes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="organism")
    parser.add_argument("--layer", type=int, required=True)
    parser.add_argument("--windows", type=int, default=1200, help="training windows (default 1200)")
    parser.add_argument("--eval-windows", type=int, default=128)
    parser.add_argument("--data-seed", type=int, default=7000)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--l1", type=float, default=None, help="also train an L1 SAE with this coefficient")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--head-features", type=int, default=None, help="also train one SAE per head with N features")
    parser.add_argument("--head-k", type=int, default=2)
    parser.add_argument("--head-steps", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import headlab
    from headlab.data.language import Language
    from headlab.analysis.sae.model import SAEConfig, collect_z, evaluate_sae, loss_recovered, save_sae, train_sae
    from headlab.analysis.sae.compare import language_windows

    torch.set_num_threads(args.threads)
    command = "python scripts/train_saes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    hm = headlab.load(args.model)
    lang = Language.from_description(hm.provenance["data"]["language"])
    n_ctx = hm.model.config.n_ctx
    _, train_ids = language_windows(lang, args.windows, n_ctx, seed=args.data_seed)
    _, eval_ids = language_windows(lang, args.eval_windows, n_ctx, seed=args.data_seed + 1)
    acts = collect_z(hm, args.layer, train_ids).flatten(0, 1)  # (n_tokens, n_heads * d_head)
    eval_acts = collect_z(hm, args.layer, eval_ids).flatten(0, 1)
    d_in = acts.shape[1]
    runs = [("topk", seed, SAEConfig(d_in, args.features, "topk", k=args.k), None) for seed in args.seeds]
    if args.l1 is not None:
        runs.append(("l1", args.seeds[0], SAEConfig(d_in, args.features, "l1", k=None, l1_coeff=args.l1), None))
    if args.head_features is not None:
        runs += [(f"head{h}-topk", args.seeds[0], SAEConfig(hm.d_head, args.head_features, "topk", k=args.head_k), h)
                 for h in range(hm.n_heads)]
    for kind, seed, config, head in runs:
        cut = slice(None) if head is None else slice(head * hm.d_head, (head + 1) * hm.d_head)
        steps = args.steps if head is None else args.head_steps
        sae, log = train_sae(acts[:, cut].contiguous(), config, seed=seed, steps=steps, batch_size=args.batch_size,
                             lr=args.lr)
        stats = evaluate_sae(sae, eval_acts[:, cut].contiguous())
        metrics = {k: round(v, 5) for k, v in stats.items() if k != "fire_rate"}
        recovered = {}
        if head is None:
            recovered = {f: loss_recovered(hm, sae, args.layer, eval_ids, floor=f) for f in ("zero", "mean")}
        metrics.update({f"loss_{floor}": {k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()}
                        for floor, r in recovered.items()})
        provenance = {
            "command": command, "seed": seed, "model": args.model, "model_sha256": hm.provenance["sha256"],
            "layer": args.layer, "kind": kind, "head": head,
            "data": {"language": lang.describe(), "train_windows": args.windows, "eval_windows": args.eval_windows,
                     "n_ctx": n_ctx, "train_seed": args.data_seed, "eval_seed": args.data_seed + 1,
                     "train_tokens": len(acts)},
            "training": log.to_dict(), "eval_metrics": metrics,
            "torch_version": torch.__version__, "threads": args.threads,
        }
        path = args.out / f"{args.model}-L{args.layer}-{kind}-s{seed}"
        save_sae(sae, path, provenance)
        lost = "".join(f", loss recovered {r['fraction']:.3f} ({f} floor)" for f, r in recovered.items())
        print(f"{path.name}: EV {metrics['explained_variance']:.3f}, L0 {metrics['l0']:.1f}, dead {metrics['dead']}, "
              f"resampled {log.n_resampled}{lost}, {log.seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
