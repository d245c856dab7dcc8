"""Plausible wrong solutions, one module per chapter (``chNN.py``, each with its ``CATALOGUE``:
exercise label -> wrong functions). ``tests/test_wrong_solutions.py`` gathers them."""
