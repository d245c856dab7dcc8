"""Command line: ``python -m headlab <command> ...`` (also installed as ``headlab``).

Each command lives in the module that owns the idea; that module exposes
``add_commands(subparsers)`` which adds its sub-parser(s) and sets
``func=<callable(args) -> int>``. Heavy imports happen inside the callables so
``--help`` stays fast.

Every error -- a wrong argument, a file that cannot be read or written, a model that cannot
be loaded, bad input found by the library -- is reported as one line on stderr,
``error: ...``, with exit status 2 and no traceback (``HEADLAB_TRACEBACK=1`` shows it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Modules that contribute commands, in the order they appear in --help.
COMMAND_MODULES = [
    "headlab.cli",             # heads, sweep, atlas
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``error: ... (see PROG --help)``), status 2."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces folded into single spaces."""
    return " ".join(str(text).split())


def message_of(err: BaseException) -> str:
    """What the one error line says about ``err``: its message, with the exception's type when
    the type says something the message does not (an unexpected error)."""
    text = one_line(err.args[0] if isinstance(err, KeyError) and err.args else err)
    expected = (ValueError, TypeError, OSError, RuntimeError, KeyError, ImportError)
    if not text or not isinstance(err, expected):
        return f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text


def build_parser(prog: str = "python -m headlab", modules: list[str] | None = None,
                 description: str = "Inspect and ablate the attention heads of a model.") -> argparse.ArgumentParser:
    """The parser of ``prog``: the sub-commands of each module in ``modules`` (default
    :data:`COMMAND_MODULES`). The book's command line (``python -m deviating``) is built here too."""
    parser = Parser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if modules is None else modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # the module is not written yet
                continue
            raise
        module.add_commands(sub)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run one command of ``parser`` (default: headlab's) on ``argv``; every error is one line."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except SystemExit as err:
        code = err.code
        if code is None or (isinstance(code, int) and str(code) == str(int(code))):
            raise  # a plain exit status
        message = one_line(code)  # headlab.cli.CommandError, or an older SystemExit("error: ...")
        print(message if message.startswith("error:") else f"error: {message}", file=sys.stderr)
        if isinstance(code, int):
            raise  # its status is 2 (and in-process callers see the message in it)
        return 2
    except Exception as err:  # noqa: BLE001 - every error becomes one line, never a traceback
        # Bad input, an unavailable model, or a bug: say what was wrong, without a traceback.
        # (Set HEADLAB_TRACEBACK=1 to see it.)
        if os.environ.get("HEADLAB_TRACEBACK"):
            raise
        print(f"error: {message_of(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
