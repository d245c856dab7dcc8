"""The two small formatting helpers the chapters use for their comparison tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlab.report.writing import best_head, markdown_table


def test_markdown_table_escapes_bars_and_checks_the_row_length():
    text = markdown_table(["what", "a | b"], [["x", 1.5], ["two\nlines", "p|q"]])
    assert text.splitlines() == ["| what | a \\| b |", "|---|---|", "| x | 1.5 |", "| two lines | p\\|q |"]
    with pytest.raises(ValueError, match="every row needs 2 cells.*\\[1, 3\\]"):
        markdown_table(["a", "b"], [["x"], ["x", "y", "z"]])


def test_best_head_names_the_largest_entry_of_a_grid():
    grid = np.array([[0.1, 0.4], [0.9, -2.0]])
    assert best_head(grid) == "1.0: 0.90"
    assert best_head(torch.tensor([[0.0, 3.0]]), ".1f") == "0.1: 3.0"
    assert best_head(np.array([[np.nan, 0.2]])) == "0.1: 0.20"  # a missing entry is skipped
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        best_head(np.ones(3))
