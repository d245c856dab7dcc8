"""Which position predicts what in a causal language model, and where a subject head must look from.

At position ``i`` a causal model reads tokens ``0 .. i`` and predicts token ``i + 1``. So the form
of a verb (*is* or *are*) is chosen at the position *before* the verb, and any attention that
gathers the subject's number has to happen there. :func:`plot_causal_positions` draws a sentence as
a row of tokens, under each the token it predicts, and marks the predicting position of one word,
the word it predicts, and the attention arc from it back to the word that decides it.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["plot_causal_positions"]

QUERY = "#ff7f0e"   # the predicting position
TARGET = "#1f77b4"  # the word it must attend to
PREDICTED = "#2ca02c"


def plot_causal_positions(ax, words: Sequence[str] = ("The", "keys", "to", "the", "cabinet", "are", "here"),
                          word: int = 5, source: int = 1, *, source_name: str = "subject",
                          word_name: str = "verb"):
    """Draw ``words`` as a causal model reads them, for one predicted ``word`` and its ``source``.

    Args:
        ax: matplotlib axes to draw on.
        words: the tokens of one sentence.
        word: index of the word whose form is predicted (e.g. the verb); its predicting position is
            ``word - 1``.
        source: index of the word that decides it (e.g. the subject); it must come before ``word``.
        source_name, word_name: what to call them in the labels.

    Returns:
        ``ax``, with one box per token (its ``patches`` hold them first, in order).

    Raises:
        ValueError: fewer than two words, or indices that do not satisfy ``0 <= source < word``
            and ``1 <= word < len(words)``.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    n = len(words)
    if n < 2:
        raise ValueError(f"need at least two words, got {n}")
    if not 1 <= word < n:
        raise ValueError(f"word must index a token after the first (1..{n - 1}), got {word}")
    if not 0 <= source < word:
        raise ValueError(f"source must come before the predicted word (0..{word - 1}), got {source}")
    query = word - 1
    for i, w in enumerate(words):
        colour = QUERY if i == query else (TARGET if i == source else "white")
        ax.add_patch(FancyBboxPatch((i - 0.42, -0.25), 0.84, 0.5, boxstyle="round,pad=0.02",
                                    facecolor=colour, edgecolor="0.3", linewidth=0.8, alpha=0.9))
        ax.text(i, 0, w, ha="center", va="center", fontsize=9)
        ax.text(i, 0.42, str(i), ha="center", va="bottom", fontsize=7, color="0.4")
        if i + 1 < n:  # what position i predicts
            strong = i == query
            ax.add_patch(FancyArrowPatch((i, -0.28), (i, -0.82), arrowstyle="-|>", mutation_scale=8,
                                         color=PREDICTED if strong else "0.6", linewidth=1.4 if strong else 0.7))
            ax.text(i, -1.0, words[i + 1], ha="center", va="top", fontsize=8 if not strong else 9,
                    color=PREDICTED if strong else "0.45", fontweight="bold" if strong else "normal")
    ax.add_patch(FancyArrowPatch((query, 0.3), (source, 0.3), connectionstyle="arc3,rad=0.45",
                                 arrowstyle="-|>", mutation_scale=10, color=TARGET, linewidth=1.6))
    ax.text((query + source) / 2, 1.25, f"attention from the predicting position to the {source_name}",
            ha="center", va="bottom", fontsize=8, color=TARGET)
    ax.text(-0.6, -1.0, "predicts:", ha="right", va="top", fontsize=8, color="0.3")
    ax.text(query, -1.55, f"the {word_name}'s form is chosen here,\none step before it exists",
            ha="center", va="top", fontsize=8, color=QUERY)
    ax.set_xlim(-1.9, n - 0.4)
    ax.set_ylim(-2.3, 1.8)
    ax.set_axis_off()
    return ax
