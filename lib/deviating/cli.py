"""The book's ``report`` command: the checklist report of :mod:`headlab.report` with the book's
models' own data.

    python -m deviating report --model attn-only-2l --out report_2l --replicas attn-only-2l-s1 attn-only-2l-s2

It is ``python -m headlab report`` with ``--data deviating.report:book_data`` as the default
(:func:`deviating.report.book_data`: an organism's span task, the synthetic language's texts,
repeats and per-task margins); on any other model the two commands write the same report.
"""

from __future__ import annotations

from headlab.cli import add_report

BOOK_DATA = "deviating.report:book_data"


def add_commands(sub) -> None:
    add_report(sub, data=BOOK_DATA)
