"""The book's models' own data for the checklist report (:class:`headlab.report.ReportData`).

The report runs on any model (:mod:`headlab.report`). The book's models bring what only the book
knows about their data:

* an **attention-only organism** was trained on a span task (:class:`deviating.data.spans.RepeatedSpans`,
  read from its provenance, :func:`span_task`): its default texts are samples of that task, and its
  own text for the induction check is the task's evaluation batch (``OWN_TASK_SEQUENCES``
  sequences, the ones chapter 5 measures on);
* a model of the **synthetic language** (:func:`deviating.data.language.synthetic_language`): its
  default texts are the language's corpus (:func:`deviating.data.language.corpus_for`), its own
  text is windows of the language that hold a sentence it repeats, counting only the queries
  inside the copies (the ``copy->source`` relation of
  :func:`deviating.data.language.copy_relation_set`), and its per-task margins are each head's
  share of the agreement, pronoun and copy margins
  (:func:`deviating.analysis.task_shares.margin_share_lost`) on windows of the language.

:func:`book_data` is the plug-in (``--data deviating.report:book_data``, which
``python -m deviating report`` passes, as :func:`checklist` does); every other model gets None,
the report's generic path.
"""

from __future__ import annotations

from dataclasses import fields

import torch

from deviating.analysis.task_shares import TASKS, margin_share_lost
from deviating.data.language import copy_relation_set, corpus_for, pack, synthetic_language
from deviating.data.spans import RepeatedSpans
from headlab.analysis.atlas import default_texts
from headlab.analysis.detect.predictive import COPY_SOURCE
from headlab.report import checklist as generic_checklist
from headlab.report.data import ReportData
from headlab.report.detectors import TargetSet, own_text_repeats as generic_own_text_repeats
from headlab.report.detectors import previous_occurrence_targets

__all__ = ["book_data", "checklist", "span_task", "own_text_repeats", "OWN_TEXT_WINDOWS", "OWN_TEXT_CTX", "OWN_TASK_SEQUENCES",
           "TASK_DOCUMENTS"]

OWN_TEXT_WINDOWS = 48     # windows of the synthetic language drawn for the own-text check
OWN_TEXT_CTX = 64         # tokens per window (the atlas's window)
OWN_TASK_SEQUENCES = 256  # a span-task organism's own text: its evaluation batch (chapter 5's)
TASK_DOCUMENTS = 200      # documents of the language sampled for the per-task margins


def span_task(hm) -> RepeatedSpans | None:
    """The RepeatedSpans task an attention-only organism was trained on, from its provenance, or None."""
    data = (getattr(hm, "provenance", None) or {}).get("data") or {}
    if data.get("kind") != "repeated_spans":
        return None
    names = {f.name for f in fields(RepeatedSpans)}
    return RepeatedSpans(**{k: v for k, v in data.items() if k in names})


def _span_texts(hm, n: int, seed: int) -> tuple[dict, str]:
    batch = span_task(hm).sample(n, torch.Generator().manual_seed(seed)).tokens
    return ({"input_ids": batch, "attention_mask": torch.ones_like(batch)},
            f"{n} sequences of the model's training data (random tokens with one span repeated, RepeatedSpans, "
            f"seed {seed})")


def _span_own_text(hm, seed: int) -> TargetSet:
    ids = span_task(hm).eval_data(OWN_TASK_SEQUENCES).tokens  # fixed: the seed does not draw it
    real = torch.ones_like(ids, dtype=torch.bool)
    targets = previous_occurrence_targets(ids, real, torch.zeros(len(ids), dtype=torch.long))
    return TargetSet({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, targets,
                     f"the {len(ids)} evaluation sequences of the model's training task (random tokens with "
                     f"one span repeated)", "own text", every_repeat=True)


def _language_texts(hm, n: int, seed: int):
    return default_texts(hm, seed=seed, corpus=corpus_for(hm))


def _language_own_text(hm, seed: int) -> TargetSet:
    lang = synthetic_language(hm)
    windows = pack(lang.sample(4 * OWN_TEXT_WINDOWS, seed=seed), n_ctx=OWN_TEXT_CTX, drop_last=True)
    rs = copy_relation_set(windows[:OWN_TEXT_WINDOWS], hm.tokenizer)
    targets = rs.relations[COPY_SOURCE].bool()
    rows = torch.nonzero(targets.flatten(1).any(-1)).flatten()  # windows that hold a repeated sentence
    batch = {"input_ids": rs.input_ids[rows], "attention_mask": rs.attention_mask[rows]}
    return TargetSet(batch, targets[rows],
                     f"{len(rows)} windows of the synthetic language that hold a sentence it repeats, the "
                     f"queries inside the copies (Language.sample, seed {seed})", "own text")


def _language_task_shares(hm, n_windows: int, seed: int) -> dict[str, torch.Tensor]:
    docs = pack(synthetic_language(hm).sample(TASK_DOCUMENTS, seed=seed), n_ctx=OWN_TEXT_CTX, drop_last=True)
    return {task: margin_share_lost(hm, docs, task, n_windows=n_windows) for task in TASKS}


SPAN_TASK = ReportData(texts=_span_texts, own_text=_span_own_text)
LANGUAGE = ReportData(texts=_language_texts, own_text=_language_own_text, task_shares=_language_task_shares)


def book_data(hm) -> ReportData | None:
    """The book's data for ``hm`` (see the module docstring): an organism's span task, the
    synthetic language, or None for any other model."""
    if span_task(hm) is not None:
        return SPAN_TASK
    if synthetic_language(hm) is not None:
        return LANGUAGE
    return None


def own_text_repeats(hm, texts=None, seed: int = 0) -> TargetSet:
    """:func:`headlab.report.detectors.own_text_repeats` with the book's data for ``hm``: the own
    text of the induction check, as the report builds it (chapter 9 reads it)."""
    return generic_own_text_repeats(hm, texts, seed, book_data(hm))


def checklist(hm, texts=None, **kwargs) -> dict:
    """:func:`headlab.report.checklist` with the book's data for ``hm`` (:func:`book_data`), as
    ``python -m deviating report`` runs it; ``kwargs`` are the library's."""
    return generic_checklist(hm, texts, data=book_data(hm), **kwargs)
