"""Command line: ``python -m headlab <command> ...`` (also installed as ``headlab``).

Each command lives in the module that owns the idea; that module exposes
``add_commands(subparsers)`` which adds its sub-parser(s) and sets
``func=<callable(args) -> int>``. Heavy imports happen inside the callables so
``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Modules that contribute commands, in the order they appear in --help.
COMMAND_MODULES = [
    "headlab.cli",             # heads, sweep, atlas, report (the checklist)
    "headlab.training.runs",   # train
    "headlab.exercises.grading",  # grade
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m headlab",
        description="Tools of the book 'Deviating Attention': inspect, ablate and train attention heads.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # the module is not written yet
                continue
            raise
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError, RuntimeError) as err:
        # Bad input or an unavailable model: say what was wrong, without a traceback.
        # (Set HEADLAB_TRACEBACK=1 to see it.)
        if os.environ.get("HEADLAB_TRACEBACK"):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
