"""A head's role as a statement about a distribution: "the subject head", construction by construction.

Chapter 7 asks whether the organism's subject head points at the subject in every construction,
against the best *fixed offset* ("the subject is always k tokens back"), a positional rule that
needs no content. Both are read from the position before each agreeing verb (where a causal
model must already know the subject's number). The head is chosen on one half of the windows
and measured on the other (:func:`headlab.stats.split_items` over windows); the offset of each
construction is chosen on the same selection half.

:func:`subject_head` is the one place that decides which head is "the subject head"; the rest
of the module only measures it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from headlab.heads.model import HeadModel

__all__ = ["SEPARATED", "ADJACENT", "PointingTable", "pointing_table", "subject_head", "construction_of",
           "offset_baseline"]

SEPARATED = ("pp", "subj_rel", "obj_rel")  # words can stand between a noun subject and its verb
ADJACENT = ("simple", "pron_subj", "pron_obj")  # the subject is the token right before the verb


@dataclass(frozen=True)
class PointingTable:
    """Where every head points from the position before each agreeing verb.

    Attributes:
        points: ``(n_items, n_layers, n_heads)`` bool, the head's largest weight is on the subject.
        on_antecedent: ``(n_items, n_layers, n_heads)`` bool, it is on the antecedent of a
            pronoun subject (False for noun subjects).
        offset: ``(n_items,)`` the subject's position minus the query's (0: the query token is
            the subject).
        construction: ``(n_items,)`` the construction, with ``"+attr"`` when an attractor
            intervenes.
        window: ``(n_items,)`` the window each item comes from.
    """

    points: np.ndarray
    on_antecedent: np.ndarray
    offset: np.ndarray
    construction: np.ndarray
    window: np.ndarray


def construction_of(item) -> str:
    """An agreement item's construction, ``"+attr"`` added when a noun of the other number intervenes."""
    return item.construction + ("+attr" if item.attractor else "")


def pointing_table(hm: HeadModel, data) -> PointingTable:
    """Every head's pointing at the subject (and at a pronoun subject's antecedent) for the
    agreement items of ``data`` (a :class:`headlab.data.windows.LanguageEval`)."""
    items = list(data.agreement)
    if not items:
        raise ValueError("no agreement items in these windows")
    antecedent = {(p.doc, p.pronoun_pos): p.antecedent_pos for p in data.pronoun}
    doc = torch.tensor([i.doc for i in items])
    pos = torch.tensor([i.pos for i in items])
    subject = torch.tensor([i.subject_pos for i in items])
    ante = torch.tensor([antecedent.get((i.doc, i.subject_pos), -1) if i.construction == "pron_subj" else -1
                         for i in items])
    with torch.no_grad():
        _, cache = hm.run_with_cache(data.ids, names=("pattern",))
    rows = torch.stack([cache.pattern(l)[doc, :, pos] for l in range(hm.n_layers)], 1)  # (item, layer, head, key)
    top = rows.argmax(-1)  # first maximum: ties go to the earlier key
    return PointingTable((top == subject[:, None, None]).numpy(), (top == ante[:, None, None]).numpy(),
                         (subject - pos).numpy(), np.array([construction_of(i) for i in items]), doc.numpy())


def _base(construction: np.ndarray) -> np.ndarray:
    return np.array([c.split("+")[0] for c in construction])


def subject_head(table: PointingTable, select: np.ndarray, constructions=SEPARATED) -> tuple[int, int]:
    """The subject head: the head that points at the subject most often on the selection items
    ``select`` (bool mask) of ``constructions`` (ties: the lower layer-major index)."""
    mask = select & np.isin(_base(table.construction), constructions)
    if not mask.any():
        raise ValueError(f"no selection items of constructions {constructions}")
    acc = table.points[mask].mean(0)  # (layer, head)
    flat = np.round(acc.ravel(), 9)
    i = int(np.flatnonzero(flat == flat.max())[0])
    return divmod(i, acc.shape[1])


def offset_baseline(table: PointingTable, select: np.ndarray, construction: str) -> tuple[int, np.ndarray]:
    """The best fixed offset for ``construction`` (chosen on ``select``: the most common subject
    offset there, ties to the nearer offset) and, per item, whether it finds the subject."""
    mask = select & (table.construction == construction)
    if not mask.any():
        raise ValueError(f"no selection items of construction {construction!r}")
    counts = Counter(table.offset[mask].tolist())
    best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]  # offsets are <= 0: ties to the nearer
    return int(best), table.offset == best
