"""Subject heads and antecedent heads, against ground truth: the one definition the book uses.

**Definition.** For a relation (verb -> subject, pronoun -> antecedent, or their predictive
forms in a causal model: from the token *before* the verb or pronoun), a head is *the* relation
head of a model when it is chosen and then beats its baseline as follows:

* **Pointing** (the special-token rule, fixed before any result was looked at): a head points at
  the target of an annotated query when its largest weight over *every* real key of the row --
  ``[CLS]``, ``[SEP]``, ``<bos>`` included -- falls on a target (any sub-token of the target word)
  and is strictly larger than on every other key. A tie is a miss. Special tokens are never
  dropped after the fact: a head that parks a row on ``[CLS]`` misses that query.
* **Selection split**: the head is the one with the highest accuracy on the *selection* inputs
  (ties: the lower layer, then the lower head index); the best fixed offset (``query + k``) is
  chosen on the same inputs (ties: smaller ``|k|``, then the negative one).
* **Measurement split**: the accuracy of that head, of that offset and of the relation's named
  baseline (the nearest preceding mention or noun, see ``headlab.analysis.detect.annotated``)
  are reported on the *other* inputs only: each with a bootstrap interval over inputs
  (sentences or windows, never queries), the head's lead over each baseline with a paired
  bootstrap interval over inputs, and an exact McNemar test of head against baseline on the
  annotated queries.
* **Threshold**: none beyond the baseline. The head *is* a relation head when the 95% interval
  of its lead over the **strongest baseline** -- the one more accurate on the selection inputs --
  lies above 0 (:attr:`RelationHead.beats_baseline`).

:func:`relation_outcomes` runs the model once and keeps every query's outcome, so that one run
serves the selection, the measurement and any subgroup (a construction, items with an attractor):
:meth:`RelationOutcomes.choose_and_measure` and :meth:`RelationOutcomes.measure`; a head chosen
on one subgroup is measured on another by :meth:`RelationOutcomes.measure_chosen` (the offset and
the strongest baseline still chosen on the selection inputs of the subgroup measured).
:func:`subject_head` and :func:`antecedent_head` are the two roles the book names (the book's
``deviating.data.language.subject_or_antecedent_set`` widens the subject relation of its
synthetic language with a pronoun subject's antecedent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from headlab.analysis.detect.annotated import RelationSet
from headlab.analysis.detect.predictive import BEFORE_PRONOUN_ANTECEDENT, BEFORE_VERB_SUBJECT
from headlab.analysis.detect.relations import PRONOUN_ANTECEDENT, VERB_SUBJECT, query_hits, visible_targets
from headlab.stats import Estimate, Split, TestResult, bootstrap_mean, mcnemar, paired_difference, split_items

__all__ = ["SPECIAL_TOKEN_RULE", "OFFSET", "RelationOutcomes", "RelationHead",
           "relation_outcomes", "relations_outcomes", "english_split", "relation_head", "subject_head", "antecedent_head"]

SPECIAL_TOKEN_RULE = ("a head points at a target when its largest weight over every real key, "
                      "[CLS], [SEP] and <bos> included, is on the target")
OFFSET = "best fixed offset"


@dataclass(frozen=True)
class RelationOutcomes:
    """Every annotated query of one relation, with each head's and each baseline's outcome.

    Attributes:
        relation: the relation's name.
        text: ``(n_queries,)`` the input each query belongs to.
        query: ``(n_queries,)`` its position.
        hits: ``(n_queries, n_layers, n_heads)`` bool: the head points at a target.
        offsets: offset ``k`` -> ``(n_queries,)`` bool: the key ``query + k`` is a target.
        named: ``(name, (n_queries,) bool)`` of the relation's named baseline, or None.
        n_texts: inputs of the relation set (queries index into them).
    """

    relation: str
    text: np.ndarray
    query: np.ndarray
    hits: np.ndarray
    offsets: dict[int, np.ndarray]
    named: tuple[str, np.ndarray] | None
    n_texts: int

    def _queries(self, texts, where) -> np.ndarray:
        keep = np.isin(self.text, np.asarray(texts))
        if where is not None:
            w = np.asarray(where, dtype=bool)
            if w.shape != self.text.shape:
                raise ValueError(f"where must mark each of the {self.text.size} queries; got shape {w.shape}")
            keep &= w
        return keep

    def choose(self, texts, where=None) -> tuple[tuple[int, int], float, int]:
        """``(head, its accuracy, best offset)`` on the queries of ``texts`` (input positions)."""
        keep = self._queries(texts, where)
        if not keep.any():
            raise ValueError(f"{self.relation}: no annotated query on the selection inputs")
        acc = self.hits[keep].mean(0)  # (n_layers, n_heads); exact ratios, ties by head index
        flat = int(np.argmax(acc.reshape(-1)))
        head = divmod(flat, acc.shape[1])
        rates = {k: float(v[keep].mean()) for k, v in self.offsets.items()}
        offset = min(rates, key=lambda k: (-rates[k], abs(k), k))
        return head, float(acc[head]), offset

    def measure(self, head, offset: int, texts, where=None, *, strongest: str | None = None,
                select_accuracy: float = float("nan"), level: float = 0.95, n_resamples: int = 9999,
                seed: int = 0) -> RelationHead:
        """A fixed head and offset, measured on the queries of ``texts`` (and ``where``)."""
        keep = self._queries(texts, where)
        n = int(keep.sum())
        if n < 2:
            raise ValueError(f"{self.relation}: {n} annotated queries on the measurement inputs; need at least 2")
        layer, h = head
        ids = self.text[keep]
        right = self.hits[keep, layer, h].astype(float)
        base = {OFFSET: self.offsets[offset][keep].astype(float)}
        if self.named is not None:
            base[self.named[0]] = self.named[1][keep].astype(float)
        kw = dict(level=level, n_resamples=n_resamples, seed=seed)
        if len(np.unique(ids)) < 2:
            raise ValueError(f"{self.relation}: the measured queries come from one input; need at least 2")
        accuracy = bootstrap_mean(right, ids, **kw)
        baselines = {name: bootstrap_mean(b, ids, **kw) for name, b in base.items()}
        leads = {name: paired_difference(right, b, ids, **kw) for name, b in base.items()}
        tests = {name: mcnemar(right.astype(bool), b.astype(bool), alternative="greater") for name, b in base.items()}
        strongest = strongest if strongest in base else max(base, key=lambda k: (baselines[k].value, k))
        return RelationHead(self.relation, (int(layer), int(h)), offset, n, int(len(np.unique(ids))),
                            select_accuracy, accuracy, baselines, leads, tests, strongest)

    def choose_and_measure(self, split: Split, where=None, *, level: float = 0.95, n_resamples: int = 9999,
                           seed: int = 0) -> RelationHead:
        """Choose the head and the offset on ``split.select``, measure on ``split.measure``
        (the strongest baseline is the one more accurate on ``split.select``)."""
        head, acc, offset = self.choose(split.select, where)
        strongest = self._strongest(offset, self._queries(split.select, where))
        return self.measure(head, offset, split.measure, where, strongest=strongest, select_accuracy=acc,
                            level=level, n_resamples=n_resamples, seed=seed)

    def measure_chosen(self, head, split: Split, where=None, *, level: float = 0.95, n_resamples: int = 9999,
                       seed: int = 0) -> RelationHead:
        """A head chosen beforehand (e.g. on another subgroup), measured as
        :meth:`choose_and_measure` measures its own: the best offset and the strongest baseline
        are chosen on the queries of ``split.select`` (and ``where``), the head, that offset and
        the baselines measured on those of ``split.measure``. ``select_accuracy`` is the head's
        accuracy on the selection queries of ``where``."""
        layer, h = (int(x) for x in head)
        if not (0 <= layer < self.hits.shape[1] and 0 <= h < self.hits.shape[2]):
            raise ValueError(f"head {head} is not a head of this model "
                             f"({self.hits.shape[1]} layers of {self.hits.shape[2]} heads)")
        _, _, offset = self.choose(split.select, where)
        keep = self._queries(split.select, where)
        return self.measure((layer, h), offset, split.measure, where, strongest=self._strongest(offset, keep),
                            select_accuracy=float(self.hits[keep, layer, h].mean()), level=level,
                            n_resamples=n_resamples, seed=seed)

    def _strongest(self, offset: int, keep: np.ndarray) -> str:
        """The baseline more accurate on the queries ``keep`` (ties: the later name)."""
        rates = {OFFSET: float(self.offsets[offset][keep].mean())}
        if self.named is not None:
            rates[self.named[0]] = float(self.named[1][keep].mean())
        return max(rates, key=lambda k: (rates[k], k))


@dataclass(frozen=True)
class RelationHead:
    """A relation head chosen on one split and measured on the other (module docstring).

    Attributes:
        relation: the relation.
        head: ``(layer, head)``.
        offset: the best fixed offset, chosen on the selection inputs.
        n_items: annotated queries measured.
        n_texts: inputs they come from (the unit of the bootstraps).
        select_accuracy: the head's accuracy where it was chosen (optimistic; not for reporting).
        accuracy: its accuracy on the measurement inputs.
        baselines: baseline name -> its accuracy on the same queries.
        leads: baseline name -> head minus baseline, paired over inputs.
        tests: baseline name -> exact McNemar test (head more accurate than the baseline).
        strongest: the baseline the head must beat.
    """

    relation: str
    head: tuple[int, int]
    offset: int
    n_items: int
    n_texts: int
    select_accuracy: float
    accuracy: Estimate
    baselines: dict[str, Estimate] = field(repr=False)
    leads: dict[str, Estimate] = field(repr=False)
    tests: dict[str, TestResult] = field(repr=False)
    strongest: str = OFFSET

    @property
    def lead(self) -> Estimate:
        """The lead over the strongest baseline."""
        return self.leads[self.strongest]

    @property
    def beats_baseline(self) -> bool:
        """Whether the interval of the lead over the strongest baseline lies above 0."""
        return self.lead.low > 0


def relation_outcomes(hm, relation_set: RelationSet, relation: str, *, batch_size: int = 64) -> RelationOutcomes:
    """Run ``hm`` over ``relation_set`` once and keep every annotated query's outcome for ``relation``.

    Targets a causal model cannot see (after the query) are dropped, as in
    ``headlab.analysis.detect.annotated.relation_scores``. The offsets tried are ``relation_set.offsets``
    (default: every non-zero offset that fits). :func:`relations_outcomes` reads several relations
    of one set from the same run.
    """
    return relations_outcomes(hm, relation_set, (relation,), batch_size=batch_size)[relation]


def relations_outcomes(hm, relation_set: RelationSet, relations, *, batch_size: int = 64
                       ) -> dict[str, RelationOutcomes]:
    """:func:`relation_outcomes` for each of ``relations`` (names in ``relation_set``), from one run
    of ``hm`` over the set: ``{name: RelationOutcomes}``."""
    relations = tuple(relations)
    missing = [r for r in relations if r not in relation_set.relations]
    if not relations or missing:
        raise ValueError(f"no relation {(missing or [''])[0]!r} in the set; it has {', '.join(relation_set.relations)}")
    mask = relation_set.attention_mask.bool()
    golds = {r: visible_targets(relation_set.relations[r], hm.causal) & mask[:, :, None] & mask[:, None, :]
             for r in relations}
    n, pos = relation_set.input_ids.shape
    hits, where = {r: [] for r in relations}, {r: [] for r in relations}
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        batch = {"input_ids": relation_set.input_ids[start:stop], "attention_mask": relation_set.attention_mask[start:stop]}
        _, cache = hm.run_with_cache(batch, names=("pattern",))
        patterns = [cache.pattern(layer).float().cpu() for layer in range(hm.n_layers)]
        for r in relations:
            per_layer, w = [], None
            for p in patterns:
                h, w = query_hits(p, golds[r][start:stop], cache.attention_mask.cpu())
                per_layer.append(h)
            if w.shape[0]:
                hits[r].append(torch.stack(per_layer, 1))  # (n_queries, n_layers, n_heads)
                where[r].append(w + torch.tensor([start, 0]))
    return {r: _outcomes(relation_set, r, golds[r], hits[r], where[r]) for r in relations}


def _outcomes(relation_set: RelationSet, relation: str, gold, hits, where) -> RelationOutcomes:
    if not hits:
        raise ValueError(f"{relation}: no annotated query with a visible target")
    n, pos = relation_set.input_ids.shape
    hits_t, where_t = torch.cat(hits), torch.cat(where)
    b, q = where_t[:, 0], where_t[:, 1]
    offsets = relation_set.offsets or tuple(k for k in range(-(pos - 1), pos) if k != 0)
    by_offset = {}
    for k in offsets:
        key = q + int(k)
        ok = (key >= 0) & (key < pos)
        by_offset[int(k)] = (ok & gold[b, q, key.clamp(0, pos - 1)]).numpy()
    named = None
    if relation in relation_set.baselines:
        label, predicted = relation_set.baselines[relation]
        p = torch.as_tensor(predicted, dtype=torch.long)[b, q]
        named = (label, ((p >= 0) & gold[b, q, p.clamp(min=0)]).numpy())
    return RelationOutcomes(relation, b.numpy(), q.numpy(), hits_t.numpy(), by_offset, named, n)


def english_split(items) -> Split:
    """The English set's fixed split (each item's ``split`` field, fixed before any result was
    computed; see ``headlab/english/README.md``) as a :class:`headlab.stats.Split` of positions."""
    sides = [getattr(i, "split", None) for i in items]
    bad = [s for s in sides if s not in ("select", "measure")]
    if bad:
        raise ValueError(f"every English item needs split 'select' or 'measure'; found {bad[0]!r}")
    pos = np.arange(len(sides))
    select = pos[np.array([s == "select" for s in sides])]
    measure = pos[np.array([s == "measure" for s in sides])]
    if not select.size or not measure.size:
        raise ValueError("the items hold only one side of the split; pass the whole set")
    return Split(select, measure, seed=0)


def relation_head(hm, relation_set: RelationSet, relation: str, split: Split | None = None, *,
                  level: float = 0.95, n_resamples: int = 9999, seed: int = 0) -> RelationHead:
    """The relation head of ``hm`` by the definition of this module.

    Args:
        hm: a :class:`~headlab.heads.model.HeadModel`.
        relation_set: inputs and gold relations (``english_relation_set``, or a corpus's own, such
            as the book's ``synthetic_relation_set`` and ``predictive_relation_set``).
        relation: which relation of the set.
        split: inputs to choose on and to measure on; default
            ``headlab.stats.split_items(len(relation_set))`` (for the English set pass
            :func:`english_split` of its items).
        level, n_resamples, seed: of the bootstrap intervals.
    """
    split = split_items(len(relation_set)) if split is None else split
    return relation_outcomes(hm, relation_set, relation).choose_and_measure(
        split, level=level, n_resamples=n_resamples, seed=seed)


def subject_head(hm, relation_set: RelationSet, split: Split | None = None, **kw) -> RelationHead:
    """The subject head: :func:`relation_head` for the predictive relation (from the token before
    each verb) when the set has it, else for verb -> subject."""
    name = BEFORE_VERB_SUBJECT if BEFORE_VERB_SUBJECT in relation_set.relations else VERB_SUBJECT
    return relation_head(hm, relation_set, name, split, **kw)


def antecedent_head(hm, relation_set: RelationSet, split: Split | None = None, **kw) -> RelationHead:
    """The antecedent head: :func:`relation_head` for the predictive relation (from the token
    before each pronoun) when the set has it, else for pronoun -> antecedent."""
    name = BEFORE_PRONOUN_ANTECEDENT if BEFORE_PRONOUN_ANTECEDENT in relation_set.relations else PRONOUN_ANTECEDENT
    return relation_head(hm, relation_set, name, split, **kw)
