"""The specialists of a synthetic-language model: per head, how well it does the jobs the book names.

Chapter 7 measures them before and after a layer is averaged (:mod:`deviating.analysis.averaging`)
and in distilled students (:mod:`deviating.training.distill`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from headlab.heads.model import HeadModel

__all__ = ["specialists"]


def specialists(hm: HeadModel, windows: Sequence, tokenizer=None) -> dict[str, torch.Tensor]:
    """Per-head specialist scores of a synthetic-language model, ``(n_layers, n_heads)`` each:

    * ``previous_token``, ``induction``: lifts over uniform attention of the pattern scores
      (:func:`headlab.analysis.detect.head_scores`; 0 = like uniform, 1 = perfect);
    * ``subject``: accuracy of pointing, from the position before each agreeing verb, at the
      verb's subject (``before verb->subject`` of :mod:`headlab.analysis.detect.predictive`);
    * ``antecedent``: the same from the position before each pronoun to its antecedent.

    ``windows``: packed windows of the language (``Document`` s of equal length).
    """
    from headlab.analysis.detect import head_scores, relation_scores
    from headlab.analysis.detect.predictive import BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT
    from deviating.data.language import encode, predictive_relation_set

    tok = tokenizer or hm.tokenizer
    if tok is None:
        raise ValueError(f"{hm.name} has no tokenizer; pass the language's tokenizer")
    windows = list(windows)
    ids = encode(tok, windows)
    scores = head_scores(hm, ids, scores=["previous_token", "induction"])
    relations = relation_scores(hm, predictive_relation_set(windows, tok))
    return {"previous_token": scores.lift("previous_token"), "induction": scores.lift("induction"),
            "subject": relations[BEFORE_VERB_SUBJECT].accuracy.float(),
            "antecedent": relations[BEFORE_PRONOUN_ANTECEDENT].accuracy.float()}
