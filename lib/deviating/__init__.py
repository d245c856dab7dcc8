"""deviating: the book's own code, beside the library it teaches (:mod:`headlab`).

What lives here serves the course rather than a researcher's own work: the experiments
behind the stored results (``results/``), the exercises with their checks and the grader,
the claims ledger and its verdict rule, the synthetic language and the training recipes of
the book's models, the checklist report, the diagrams, and the analyses one chapter uses.

It imports :mod:`headlab`; :mod:`headlab` never imports it. Importing it has no side effects.
"""

__all__: list[str] = []
