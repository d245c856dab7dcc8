"""The checklist's inputs: the texts it measures on, checked before any measurement."""

from __future__ import annotations

import re

import numpy as np

from headlab.analysis.atlas import check_lengths, default_texts
from headlab.report.data import ReportData, check_data
from headlab.report.thresholds import N_TEXTS

__all__ = ["report_inputs", "check_word_lengths", "LONGEST_WORD"]


def _spread(n: int, k: int) -> list[int]:
    """``k`` indices evenly spread over ``range(n)`` (all of them when ``k >= n``)."""
    return list(range(n)) if k >= n else sorted({int(round(x)) for x in np.linspace(0, n - 1, k)})


LONGEST_WORD = 1000  # characters: no tokenizer of the book reads a longer run without spaces as a word


def _word_limit(tokenizer) -> tuple[int, bool]:  # noqa: ANN001
    """The longest word ``tokenizer`` reads, and whether a longer one becomes one unknown token (WordPiece)."""
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    for owner in (tokenizer, getattr(tokenizer, "wordpiece_tokenizer", None), model):
        n = getattr(owner, "max_input_chars_per_word", None)
        if isinstance(n, int) and n > 0:
            return n, True
    return LONGEST_WORD, False


def check_word_lengths(hm, texts: list[str]) -> None:
    """Refuse a text holding a word (a run without spaces) too long to read, naming the text, the word's
    length and its start, never the word itself (it may be megabytes long)."""
    limit, wordpiece = _word_limit(getattr(hm, "tokenizer", None))
    long_run = re.compile(r"\S{%d,}" % (limit + 1))
    for i, text in enumerate(texts):
        match = long_run.search(text)
        if match is None:
            continue
        word = match.group()
        what = (f"{hm.name}'s tokenizer reads any word longer than {limit} characters as one unknown token "
                f"({getattr(hm.tokenizer, 'unk_token', None) or '[UNK]'}), so the text would say nothing"
                if wordpiece else f"longer than any word a tokenizer reads ({limit} characters)")
        raise ValueError(f"text {i + 1} has a word of {len(word):,} characters ({word[:20]!r}...): {what}; "
                         "split it into words (spaces between them) or leave it out")


def report_inputs(hm, texts=None, n_texts: int | None = None, seed: int = 0,
                  data: ReportData | None = None) -> tuple[object, str, list[str]]:
    """The report's inputs: ``(inputs for hm, a sentence saying what they are, texts as strings)``.

    ``texts``: a list of strings, or None for the model's default set: ``data.texts`` (the
    model's own data, :class:`~headlab.report.ReportData`), else
    :func:`headlab.analysis.atlas.default_texts`, spread down to ``n_texts`` (default ``N_TEXTS``).
    Given texts are all used unless ``n_texts`` is set.
    """
    check_data(data)
    if n_texts is not None and n_texts < 2:
        raise ValueError(f"n_texts must be at least 2 (a worst case needs several texts), got {n_texts}")
    if texts is not None:
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("texts must be a non-empty list of non-empty strings")
        if len(texts) < 2:
            raise ValueError("give at least 2 texts: the worst case over one text is its mean")
        keep = _spread(len(texts), n_texts or len(texts))
        texts = [texts[i] for i in keep]
        check_word_lengths(hm, texts)
        try:
            hm.tokenize(texts[:1])
        except Exception as err:  # noqa: BLE001 - the tokenizers library raises a bare Exception
            raise ValueError(f"{hm.name} cannot read the given texts ({str(err)[:300]}); give texts in its "
                             "vocabulary") from None
        check_lengths(hm, texts)  # the atlas's check: no text longer than the model's maximum length
        return texts, f"{len(texts)} given texts", list(texts)
    n = n_texts or N_TEXTS
    own = data is not None and data.texts is not None
    inputs, source = data.texts(hm, n, seed) if own else default_texts(hm, seed=seed)
    if isinstance(inputs, list):
        total = len(inputs)
        inputs = [inputs[i] for i in _spread(total, n)]
        if len(inputs) < total:
            source += f", {len(inputs)} of them evenly spread"
    else:
        inputs = {k: v[:n] for k, v in inputs.items()}
    if isinstance(inputs, list):
        return inputs, source, list(inputs)
    ids = inputs["input_ids"]
    shown = [hm.tokenizer.decode(row) if hm.tokenizer is not None else " ".join(map(str, row.tolist())) for row in ids]
    return inputs, source, shown
