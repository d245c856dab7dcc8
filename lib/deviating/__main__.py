"""The book's command line: ``python -m deviating <command> ...``: ``train``, ``report``, ``grade``, ``fetch-brown``.

The library's own commands (``heads``, ``sweep``, ``atlas``) are ``python -m headlab``; both
share one parser and one rule for errors (:mod:`headlab.__main__`).
"""

from __future__ import annotations

import sys

from headlab.__main__ import build_parser
from headlab.__main__ import main as run

COMMAND_MODULES = [
    "deviating.training.runs",      # train
    "deviating.cli",                # report (the checklist with the book's data)
    "deviating.exercises.grading",  # grade
    "deviating.data.brown",         # fetch-brown
]


def parser():
    """The book's command-line parser (the API page documents it)."""
    return build_parser("python -m deviating", COMMAND_MODULES,
                        "The book 'Deviating Attention': train its models, run its checklist, grade its exercises.")


def main(argv: list[str] | None = None) -> int:
    return run(argv, parser())


if __name__ == "__main__":
    sys.exit(main())
