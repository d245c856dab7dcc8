"""The book's analysis command: ``report``, chapter 9's checklist on any model.

    python -m deviating report --model minilm --out report_minilm

A thin layer over :func:`deviating.report.checklist`; it reuses the input checks of
:mod:`headlab.cli` (texts files, output folders, devices).
"""

from __future__ import annotations

import argparse

from headlab.cli import DEFAULT_MODEL, check_device, check_output_folder, positive_int, read_texts


def _cmd_report(args: argparse.Namespace) -> int:
    import textwrap

    from headlab.heads.head import format_head
    from headlab.heads.loading import load
    from headlab.metrics import Metric
    from deviating.report import checklist, write_report

    texts = read_texts(args.texts) if args.texts else None
    out = check_output_folder(args.out, "--out")
    check_device(args.device)
    hm = load(args.model, device=args.device)
    replicas = [load(name, device=args.device) for name in args.replicas or []]
    for other in replicas:
        if (other.n_layers, other.n_heads) != (hm.n_layers, hm.n_heads):
            raise ValueError(f"--replicas {other.name} has {other.n_layers} x {other.n_heads} heads, {hm.name} "
                             f"{hm.n_layers} x {hm.n_heads}: give the same recipe trained with other seeds")
    report = checklist(hm, texts, n_texts=args.n_texts, seed=args.seed, scope=args.pairs, top_k=args.top_k,
                       metric=Metric(args.metric), replicas=replicas, progress=not args.quiet)
    path = write_report(report, out)
    print(f"{hm.name}: checklist on {report['inputs']['n_texts']} texts in {report['seconds']['total']:.0f} s; "
          f"wrote {path} and {out / 'report.json'}")
    for row in report["checklist"]:
        status = "" if row["measured"] else "not measured: "
        print(textwrap.fill(f"{row['check']}: {status}{row['finding']}", width=100, initial_indent="  ",
                            subsequent_indent="    "))
    k, dist = report["keep"], report["distillation"]
    print(f"  keep {k['n_keep']} heads: {', '.join(format_head(x['head']) for x in k['heads'])}")
    print(textwrap.fill("distillation: " + (dist["advice"] if dist["measured"] else "not measured: " + dist["why"]),
                        width=100, initial_indent="  ", subsequent_indent="    "))
    return 0



def add_commands(sub) -> None:
    _add_report(sub)


def _add_report(sub) -> None:
    from deviating.report.thresholds import N_TEXTS, PAIR_TOP_K

    p = sub.add_parser("report", help="run chapter 9's checklist (baselines, held-out selection, conditioning, "
                                      "detectors on the model's own text, seeds, tasks, ablation modes)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--out", required=True, help="folder for report.md, report.json and the figures")
    p.add_argument("--texts", help="UTF-8 file, one text per line (default: the model's default set)")
    p.add_argument("--n-texts", type=positive_int, default=None,
                   help=f"use this many texts, evenly spread (default: {N_TEXTS} of a default set, every given text)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random sequences (default: %(default)s)")
    p.add_argument("--pairs", default="auto", choices=["auto", "layer", "top"],
                   help="pairs to ablate: within layers, among the top-k heads, or auto (default)")
    p.add_argument("--top-k", type=positive_int, default=PAIR_TOP_K, help="heads whose pairs --pairs top ablates")
    p.add_argument("--metric", default=None, choices=["loss", "cosine", "retrieval"],
                   help="loss (causal LMs), cosine or retrieval (encoders)")
    p.add_argument("--replicas", nargs="+", default=None, metavar="NAME",
                   help="the same recipe trained with other seeds, for the seeds check (e.g. attn-only-2l-s1 "
                        "attn-only-2l-s2)")
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_report)


