"""The book's part of the checklist report; the report itself is :mod:`headlab.report`.

* :func:`book_data` (:mod:`deviating.report.book`): the book's models' own data for the report
  (an organism's span task, the synthetic language's texts, repeats and per-task margins), the
  plug-in ``python -m deviating report`` passes (``--data deviating.report:book_data``);
  :func:`checklist` and :func:`own_text_repeats`: the library's, with the book's data for the model;
* :mod:`deviating.report.worked`: chapter 9's worked example (the loss an ablation adds at the
  queries induction predicts);
* :mod:`deviating.report.real_model`: the chapters' "same code on a real model" cells (GPT-2 small
  where the hub is reachable, else the book's ``brown-gpt``).
"""

from __future__ import annotations

from deviating.report.book import book_data, checklist, own_text_repeats, span_task

__all__ = ["book_data", "checklist", "own_text_repeats", "span_task"]
