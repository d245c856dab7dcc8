"""The command line's analysis commands: ``heads``, ``sweep``, ``atlas`` and ``report``.

    python -m headlab heads --model minilm
    python -m headlab sweep --model minilm --texts sentences.txt --json sweep.json
    python -m headlab atlas --model minilm --json atlas.json --png atlas.png
    python -m headlab report --model minilm --out report_minilm

Each command is a thin layer over one library function (:meth:`HeadModel` geometry,
:func:`headlab.analysis.sweep.sweep`, :func:`headlab.analysis.atlas.compute_atlas`,
:func:`headlab.report.checklist`). Without ``--metric``, ``sweep`` measures the model's default
metric (:func:`headlab.metrics.default_kind`). A model's own data reaches ``atlas`` and ``report``
as a function of the loaded model named ``MODULE:FUNCTION`` (``--corpus``, ``--data``). The book's
own commands (``train``, ``grade``, and ``report`` with the book's data) are ``python -m deviating COMMAND``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import textwrap
from pathlib import Path

from headlab.analysis.atlas import (EFFECT_KINDS, EFFECT_TEXTS, INDUCTION_LENGTH, INDUCTION_TEXTS, atlas_scores,
                                    compute_atlas)
from headlab.analysis.sweep import sweep
from headlab.devices import resolve_device
from headlab.heads.ablation import Ablation
from headlab.heads.head import format_head
from headlab.heads.loading import load
from headlab.metrics import METRIC_KINDS, Metric
from headlab.report import checklist, write_report
from headlab.report.thresholds import N_TEXTS, PAIR_TOP_K
from headlab.viz.atlas import plot_atlas

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


class ExitStatus(int):
    """An exit status that reads as its message: ``int(code) == 2``, ``str(code) == "error: ..."``."""

    def __new__(cls, status: int, message: str):
        code = super().__new__(cls, status)
        code.message = message
        return code

    def __str__(self) -> str:
        return self.message

    __repr__ = __str__


class CommandError(SystemExit):
    """A command's input file is wrong. ``python -m headlab`` prints ``str(err)``, one line
    starting ``error:``, and exits with status 2: ``err.code`` is the status 2, and reads as the
    message (``str(err.code)``), as the ``SystemExit("error: ...")`` of headlab 0.1 did."""

    def __init__(self, message: str):
        super().__init__(ExitStatus(2, f"error: {message}"))


def read_texts(path: str | None, option: str = "--texts") -> list[str]:
    """One text per line of a UTF-8 file (blank lines skipped); the defaults when ``path`` is None.

    Raises:
        CommandError: naming ``option`` and the file, when it is missing, not UTF-8 or empty.
    """
    if path is None:
        return list(DEFAULT_TEXTS)
    p = Path(path)
    if p.is_dir():
        raise CommandError(f"{option} {path} is a folder; give a UTF-8 file with one text per line")
    if not p.is_file():
        raise CommandError(f"{option} {path}: no such file")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise CommandError(f"{option} {path} is not UTF-8 text ({err})") from None
    except OSError as err:
        raise CommandError(f"{option} {path} cannot be read ({err.strerror or err})") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise CommandError(f"{option} {path} holds no text (one text per line)")
    return texts


def _probe_folder(folder: Path) -> str | None:
    """Why nothing can be written in ``folder`` (an existing folder), or None: a real write,
    since ``os.access`` says yes to root on a read-only file system."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".headlab-write-test-"):
            return None
    except OSError as err:
        return err.strerror or str(err)


def check_output_file(path: str, option: str) -> Path:
    """``path`` if a file can be written there; else a ``ValueError`` naming ``option``,
    raised before any computation."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{option} {path} is a folder; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist"
        raise ValueError(f"{option} {path}: cannot write there, {parent} {what}")
    why = _probe_folder(parent)
    if why is not None:
        raise ValueError(f"{option} {path}: cannot write in {parent} ({why})")
    return p


def check_output_folder(path: str, option: str) -> Path:
    """``path`` if a folder can be made (or written) there; else a ``ValueError``."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option} {path} is a file; give a folder for the output")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option} {path}: cannot make it, {existing} is a file")
    why = _probe_folder(existing)
    if why is not None:
        raise ValueError(f"{option} {path}: cannot write in {existing} ({why})")
    return p


def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
    return value


def check_device(device: str) -> None:
    try:
        resolve_device(device)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--device: {err}") from None


def _cmd_heads(args: argparse.Namespace) -> int:
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
    texts = read_texts(args.texts)
    reference = read_texts(args.reference, "--reference") if args.reference else (texts if args.mode != "zero" else None)
    target = check_output_file(args.json, "--json")
    check_device(args.device)
    hm = load(args.model, device=args.device)
    result = sweep(hm, texts, ablation=Ablation(args.mode, reference=reference), metric=Metric(args.metric),
                   max_batch=args.max_batch, progress=not args.quiet)
    payload = {**result.to_json(), "model": hm.name, "n_texts": len(texts)}
    target.write_text(json.dumps(payload, indent=1))
    top = sorted(zip(result.mean().tolist(), result.groups), reverse=True)[: args.top]
    print(f"{hm.name}: {len(result.groups)} ablations x {len(texts)} texts, mode={result.mode}, "
          f"metric={result.kind}; wrote {args.json}")
    for value, group in top:
        print(f"  {' + '.join(format_head(h) for h in group):>8}  mean effect {value:+.4f}")
    return 0


def _cmd_atlas(args: argparse.Namespace) -> int:
    texts = read_texts(args.texts) if args.texts else None
    target = check_output_file(args.json, "--json")
    png = check_output_file(args.png, "--png") if args.png else None
    check_device(args.device)
    factory = corpus_factory(args.corpus) if args.corpus else None
    hm = load(args.model, device=args.device)
    atlas = compute_atlas(hm, texts, effect=args.effect, effect_texts=args.effect_texts,
                          induction_texts=args.induction_texts, induction_length=args.induction_length,
                          seed=args.seed, batch_size=args.batch_size, relations=args.relations,
                          streaming=args.streaming, corpus=None if factory is None else factory(hm))
    target.write_text(json.dumps(atlas, indent=1))
    print(f"{hm.name}: {hm.n_layers * hm.n_heads} heads on {atlas['n_texts']} texts; wrote {args.json}")
    if png is not None:
        plot_atlas(atlas).savefig(png, dpi=120)
        print(f"wrote {args.png}")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(atlas["label_counts"].items(), key=lambda kv: -kv[1]))
    print(f"labels: {counts}")
    for name in atlas_scores():
        values = [(e["scores"][name], tuple(e["head"])) for e in atlas["heads"] if e["scores"][name] is not None]
        if values and name != "entropy":
            value, head = max(values)
            print(f"  top {name:>15}: {format_head(head)}  {value:.3f}")
    for key in ("argmax", "argmax_without_special"):
        for name, r in atlas.get("relations", {}).get(key, {}).items():
            held = atlas["relations"][f"{key}_held_out"].get(name, {})
            base = f", {r['baseline']['name']} {r['baseline']['accuracy']:.3f}" if "baseline" in r else ""
            print(f"  {key} {name}: best head {format_head(r['best_head'])} {r['best_accuracy']:.3f} "
                  f"vs offset {r['best_offset']:+d} {r['offset_accuracy']:.3f}{base}; held out: "
                  f"{held.get('accuracy', float('nan')):.3f} vs offset {held.get('offset_accuracy', float('nan')):.3f}")
    return 0


def model_function(spec: str, option: str = "--corpus", example: str = "deviating.data.language:corpus_for"):
    """The function ``MODULE:NAME`` names, a function of the loaded model (``option`` and
    ``example`` go into the error), e.g. the book's ``deviating.data.language:corpus_for``
    (``--corpus``, returning a :class:`headlab.analysis.atlas.Corpus` or None) or
    ``deviating.report:book_data`` (``--data``, returning a :class:`headlab.report.ReportData` or None)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{option} {spec!r}: give MODULE:FUNCTION, e.g. {example}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{option} {spec!r}: {err}") from err
    if not callable(factory):
        raise ValueError(f"{option} {spec!r} names {type(factory).__name__}, not a function of the model")
    return factory


def corpus_factory(spec: str):
    """``--corpus MODULE:FUNCTION``: :func:`model_function` for the atlas's corpus."""
    return model_function(spec)


def _cmd_report(args: argparse.Namespace) -> int:
    texts = read_texts(args.texts) if args.texts else None
    out = check_output_folder(args.out, "--out")
    check_device(args.device)
    factory = model_function(args.data, "--data", "deviating.report:book_data") if args.data else None
    hm = load(args.model, device=args.device)
    replicas = [load(name, device=args.device) for name in args.replicas or []]
    for other in replicas:
        if (other.n_layers, other.n_heads) != (hm.n_layers, hm.n_heads):
            raise ValueError(f"--replicas {other.name} has {other.n_layers} x {other.n_heads} heads, {hm.name} "
                             f"{hm.n_layers} x {hm.n_heads}: give the same recipe trained with other seeds")
    report = checklist(hm, texts, n_texts=args.n_texts, seed=args.seed, scope=args.pairs, top_k=args.top_k,
                       metric=Metric(args.metric), replicas=replicas, progress=not args.quiet,
                       data=None if factory is None else factory(hm))
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
    p = sub.add_parser("heads", help="print a model's head geometry")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_heads)

    p = sub.add_parser("sweep", help="ablate every head in turn, per text, in batched forward passes")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--texts", help="UTF-8 file, one text per line (default: a few built-in sentences)")
    p.add_argument("--json", required=True, help="where to write the results")
    p.add_argument("--mode", default="zero", choices=["zero", "mean", "resample"])
    p.add_argument("--reference", help="texts file for mean/resample (default: the texts themselves)")
    p.add_argument("--metric", default=None, choices=list(METRIC_KINDS),
                   help="loss (causal LMs), cosine or retrieval (encoders); default: loss for a causal LM, "
                        "cosine for an encoder")
    p.add_argument("--max-batch", type=positive_int, default=None,
                   help="cap on the inputs one tiled forward pass may hold (default: the measured tile budget decides)")
    p.add_argument("--top", type=positive_int, default=10, help="print the N largest mean effects")
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_sweep)

    _add_atlas(sub)
    add_report(sub)


def _add_atlas(sub) -> None:
    p = sub.add_parser("atlas", help="score and label every head (previous-token, first-token, induction, ...)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name (default: %(default)s)")
    p.add_argument("--texts", help="UTF-8 file, one text per line (default: a built-in set, see the docs)")
    p.add_argument("--json", required=True, help="where to write the atlas")
    p.add_argument("--png", help="also draw the layers x heads grid here")
    p.add_argument("--effect", default="ablation", choices=EFFECT_KINDS,
                   help="how to measure whether a head matters (default: %(default)s)")
    p.add_argument("--effect-texts", type=positive_int, default=EFFECT_TEXTS,
                   help="ablate on the first N texts (default: %(default)s)")
    p.add_argument("--induction-texts", type=positive_int, default=INDUCTION_TEXTS)
    p.add_argument("--induction-length", type=positive_int, default=INDUCTION_LENGTH)
    p.add_argument("--relations", action="store_true",
                   help="also score verb->subject, subject->verb and pronoun->antecedent against ground truth")
    p.add_argument("--streaming", action="store_true",
                   help="score heads with the fused kernel, without materializing any attention pattern")
    p.add_argument("--corpus", metavar="MODULE:FUNCTION",
                   help="a function of the model returning its corpus (texts, rare-word frequencies, relations), "
                        "e.g. deviating.data.language:corpus_for for the book's synthetic language")
    p.add_argument("--seed", type=int, default=0, help="seed of the random repeated sequences")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    p.set_defaults(func=_cmd_atlas)


def add_report(sub, data: str | None = None) -> None:
    """The ``report`` command; ``data``: the default of ``--data`` (the book's command passes its own)."""
    p = sub.add_parser("report", help="run the checklist (baselines, held-out selection, conditioning, detectors on "
                                      "the model's own text, seeds, tasks, ablation modes) and write a report")
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
    p.add_argument("--data", metavar="MODULE:FUNCTION", default=data,
                   help="a function of the model returning its own data (headlab.report.ReportData: default texts, "
                        "own text, per-task margins) or None" + (" (default: %(default)s)" if data else ""))
    p.add_argument("--device", default="auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda or mps")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_report)
