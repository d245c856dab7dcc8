"""The head catalogue on real English: each kind of head looked for in a Brown model, on
held-out text, chosen on one half of the inputs and measured on the other, against a baseline.

Two families of rows (:class:`CatalogueRow`):

* **pattern kinds** (:data:`PATTERN_KINDS`): a registered pattern score
  (:mod:`headlab.analysis.detect`) on held-out validation windows, on repeated held-out text
  or on repeated random tokens (:class:`~deviating.data.brown_windows.BrownEval`). The head
  with the largest mean lift over uniform causal attention on the selection half is measured
  on the other half: its score, uniform attention's score on the same inputs, and the lift
  ``(score - uniform) / (1 - uniform)`` per input, each with a bootstrap interval over inputs.
  The bar is the label rule's, the roles' own: a lift of 0.4 names a head, 0.3 an induction head
  (:meth:`headlab.analysis.detect.labels.Thresholds.bar`). There is no separator
  kind: in these models the one separator token, ``<|endoftext|>``, is also the first token, so a
  separator score would count the sink again;
* **tag-grounded relations** (:mod:`deviating.data.brown_relations`): the book's one
  relation-head definition (:mod:`headlab.roles.syntactic`), against the best fixed offset
  and the nearest candidate of the key's class, split by text file.

A kind is *found* when the lower end of the interval of its lift reaches the bar (of its lead
over the strongest baseline, above 0, for relations). The truth is known for the repeats (the copied position) and the
tags; the other kinds are defined by where the attention goes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from deviating.data.brown_relations import BrownRelations, file_split
from deviating.data.brown_tags import RELATIONS
from deviating.data.brown_windows import BrownEval
from headlab.report.writing import markdown_table
from headlab.roles.syntactic import relations_outcomes
from headlab.analysis.detect import head_scores
from headlab.analysis.detect.labels import DEFAULT_THRESHOLDS
from headlab.stats import Estimate, bootstrap_mean, split_items

__all__ = ["PATTERN_KINDS", "CatalogueRow", "pattern_rows", "relation_rows", "catalogue", "catalogue_table"]

# kind -> (registered score, the BrownEval inputs it is measured on)
PATTERN_KINDS = {
    "previous-token": ("previous_token", "windows"),
    "duplicate-token": ("duplicate_token", "windows"),
    "first-token (sink)": ("first_token", "windows"),
    "punctuation": ("punctuation", "windows"),
    "induction, repeated text": ("induction", "text_repeats"),
    "induction, random repeats": ("induction", "random_repeats"),
}


@dataclass(frozen=True)
class CatalogueRow:
    """One kind of head in one model: the head chosen, its score, the baseline, the lead."""

    kind: str
    head: tuple[int, int]
    score: Estimate
    baseline: Estimate
    baseline_name: str
    lead: Estimate  # the lift over uniform attention; for a relation, the lead over the baseline
    n_inputs: int
    bar: float = 0.0  # found when lead.low reaches it (relations: exceeds 0)
    others: tuple[tuple[str, Estimate], ...] = ()  # the weaker baselines, on the same inputs
    other_leads: tuple[tuple[str, Estimate], ...] = ()  # the head's lead over each of them (paired)

    @property
    def found(self) -> bool:
        return bool(self.lead.low >= self.bar if self.bar > 0 else self.lead.low > 0)


def pattern_rows(hm, held: BrownEval, *, kinds=PATTERN_KINDS, n: int = 64, seed: int = 0,
                 n_resamples: int = 2000) -> list[CatalogueRow]:
    """A row per kind in ``kinds``, on the first ``n`` inputs of each kind of ``held``."""
    rows, cache = [], {}
    for kind, (name, source) in kinds.items():
        inputs = getattr(held, source)[:n]
        if len(inputs) < 4:
            raise ValueError(f"{kind}: {len(inputs)} inputs of {source!r}; need at least 4 to split")
        key = source
        if key not in cache:
            wanted = sorted({s for s, src in kinds.values() if src == source})
            cache[key] = head_scores(hm, inputs, scores=wanted)
        scores = cache[key]
        per = scores.per_input[name].double()  # (inputs, layer, head)
        uni = scores.uniform[name].double()  # (inputs,)
        split = split_items(len(inputs), seed=seed)
        lifts = (per - uni[:, None, None]) / (1 - uni[:, None, None])
        chosen = torch.nan_to_num(lifts[split.select].nanmean(0), nan=-np.inf)
        layer, head = divmod(int(chosen.argmax()), per.shape[2])
        m = torch.as_tensor(split.measure)
        a, b, lift = per[m, layer, head].numpy(), uni[m].numpy(), lifts[m, layer, head].numpy()
        ok = ~np.isnan(a)
        ids = np.arange(len(a))[ok]
        kw = dict(n_resamples=n_resamples, seed=seed)
        rows.append(CatalogueRow(kind, (layer, head), bootstrap_mean(a[ok], ids, **kw),
                                 bootstrap_mean(b[ok], ids, **kw), "uniform attention",
                                 bootstrap_mean(lift[ok], ids, **kw), int(ok.sum()),
                                 DEFAULT_THRESHOLDS.bar(name)))
    return rows


def relation_rows(hm, relations: BrownRelations, *, seed: int = 0, n_resamples: int = 2000) -> list[CatalogueRow]:
    """A row per tag-grounded relation: the relation head chosen on half the text files and
    measured on the others, against the strongest of its two baselines."""
    split = file_split(relations.file_ids, seed=seed)
    out = []
    for name, outcomes in relations_outcomes(hm, relations.relation_set, RELATIONS).items():
        got = outcomes.choose_and_measure(split, n_resamples=n_resamples, seed=seed)
        others = tuple((k, v) for k, v in got.baselines.items() if k != got.strongest)
        other_leads = tuple((k, got.leads[k]) for k, _ in others)
        out.append(CatalogueRow(name, got.head, got.accuracy, got.baselines[got.strongest], got.strongest,
                                got.leads[got.strongest], got.n_items, others=others, other_leads=other_leads))
    return out


def catalogue(hm, held: BrownEval, relations: BrownRelations | None = None, *, n: int = 64, seed: int = 0,
              n_resamples: int = 2000) -> list[CatalogueRow]:
    """:func:`pattern_rows` and, given ``relations``, :func:`relation_rows`."""
    kw = dict(seed=seed, n_resamples=n_resamples)
    rows = pattern_rows(hm, held, n=n, **kw)
    return rows + (relation_rows(hm, relations, **kw) if relations is not None else [])


def _iv(e: Estimate) -> str:
    return f"{e.value:.2f} [{e.low:.2f}, {e.high:.2f}]"


def catalogue_table(by_model: dict[str, list[CatalogueRow]]) -> str:
    """A markdown table: a row per kind, a column per model (head, score vs baseline, the lift or
    lead, found or not)."""
    models = list(by_model)
    kinds = [r.kind for r in by_model[models[0]]]
    rows = []
    for i, kind in enumerate(kinds):
        cells = []
        for m in models:
            r = by_model[m][i]
            mark = "**found**" if r.found else "no"
            weaker = "".join(f", {k} {v.value:.2f}" for k, v in r.others)
            cells.append(f"{r.head[0]}.{r.head[1]}: {r.score.value:.2f} vs {r.baseline.value:.2f}{weaker}; "
                         f"{'lift' if r.bar else 'lead'} {_iv(r.lead)}: {mark}")
        baseline = by_model[models[0]][i].baseline_name
        rows.append([kind, baseline, *cells])
    return markdown_table(["kind", "baseline", *(f"{m}: head, score vs baseline; lift or lead [95%]"
                                                  for m in models)], rows)
