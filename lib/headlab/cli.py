"""Command-line tools over the head interface: ``heads`` and ``sweep``.

    python -m headlab heads --model minilm
    python -m headlab sweep --model minilm --texts sentences.txt --json sweep.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_MODEL = "minilm"

# A few sentences used when no --texts file is given (the book's offline default).
DEFAULT_TEXTS = [
    "The cat that chased the mice sleeps on the warm mat.",
    "When Mary met John at the station, she gave him the keys.",
    "The keys to the old cabinet are on the kitchen table.",
    "Paris is the capital of France, and Rome is the capital of Italy.",
    "He poured the coffee, added milk, and sat down by the window.",
    "The students who the teacher praised were happy.",
    "A B C D E F A B C D E F",
    "Birds sing in the morning; owls hunt at night.",
]


def read_texts(path: str | None) -> list[str]:
    """One text per line of a UTF-8 file (blank lines skipped); the defaults when ``path`` is None."""
    if path is None:
        return list(DEFAULT_TEXTS)
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"error: --texts {path}: no such file")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise SystemExit(f"error: --texts {path} is not UTF-8 text ({err})") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise SystemExit(f"error: --texts {path} holds no text (one text per line)")
    return texts


def _cmd_heads(args: argparse.Namespace) -> int:
    from headlab.heads.loading import load

    hm = load(args.model, device=args.device)
    info = {
        "model": hm.name, "architecture": hm.arch.name, "kind": "causal LM" if hm.causal else "encoder",
        "n_layers": hm.n_layers, "n_heads": hm.n_heads, "d_head": hm.d_head, "d_model": hm.d_model,
        "n_heads_total": hm.n_layers * hm.n_heads,
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            print(f"{key:>14}: {value}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from headlab.heads.loading import load
    from headlab.analysis.sweep import sweep

    texts = read_texts(args.texts)
    hm = load(args.model, device=args.device)
    reference = read_texts(args.reference) if args.reference else (texts if args.mode != "zero" else None)
    result = sweep(hm, texts, mode=args.mode, reference=reference, kind=args.metric,
                   max_batch=args.max_batch, progress=not args.quiet)
    payload = {"model": hm.name, "n_texts": len(texts), **result.to_json()}
    Path(args.json).write_text(json.dumps(payload, indent=1))
    top = sorted(zip(result.mean().tolist(), result.groups), reverse=True)[: args.top]
    print(f"{hm.name}: {len(result.groups)} ablations x {len(texts)} texts, mode={result.mode}, "
          f"metric={result.kind}; wrote {args.json}")
    for value, group in top:
        print(f"  {' + '.join(f'{l}.{h}' for l, h in group):>8}  mean effect {value:+.4f}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("heads", help="print a model's head geometry")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_heads)

    p = sub.add_parser("sweep", help="ablate every head in turn, per text, in batched forward passes")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--texts", help="UTF-8 file, one text per line (default: a few built-in sentences)")
    p.add_argument("--json", required=True, help="where to write the results")
    p.add_argument("--mode", default="zero", choices=["zero", "mean", "resample"])
    p.add_argument("--reference", help="texts file for mean/resample (default: the texts themselves)")
    p.add_argument("--metric", default=None, help="loss (causal LMs), cosine or retrieval (encoders)")
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--top", type=int, default=10, help="print the N largest mean effects")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)


