"""The seeds' checklist as a tool: ``python -m headlab report --model NAME --out DIR``.

    python -m headlab report --model minilm --out report_minilm
    python -m headlab report --model attn-only-2l --out report_2l --seed 0

:func:`checklist` measures, on one model and one set of texts, the five items of the checklist
and returns a JSON-ready dict; :func:`write_report` writes ``DIR/report.json``, ``DIR/report.md``
(sections, tables, and the figures it embeds, PNG files in ``DIR``). The checks live in
:mod:`headlab.report.checks` (one function per section), every threshold is a named constant in
:mod:`headlab.report.thresholds` (it also travels in the JSON under ``thresholds``), the inputs
come from :mod:`headlab.report.inputs`, the figures and the Markdown from :mod:`headlab.report.writing`.
Effects are zero-ablation deltas ``metric(head removed) - metric(clean)`` per text
(:func:`headlab.analysis.sweep.sweep`): the next-token loss for causal LMs, ``1 - cos`` of the pooled
embedding for encoders; positive = the head helps.

Inputs (:func:`report_inputs`): the given texts, or ``N_TEXTS`` texts evenly spread over the
model's default set (an attention-only organism's training data, else
:func:`headlab.analysis.atlas.default_texts`). The circuit check runs on ``CIRCUIT_TEXTS`` repeated random
sequences of its own.

1. **Ablation deltas** (``ablation``): every head's effect on every text; its mean, worst case
   (largest effect on any text) and ``HIGH_QUANTILE`` quantile; the ``TOP_K`` heads by each; and
   the heads *hidden in the tail*: mean below ``TAIL_MEAN_BELOW`` x the largest mean effect of
   any head, worst case above ``TAIL_WORST_ABOVE`` x that largest mean, with the text.
2. **Circuits** (``circuits``): on repeated random sequences (a random span, then the same span),
   heads whose previous-token or induction lift over uniform attention reaches
   ``CANDIDATE_LIFT`` (at most ``MAX_CANDIDATES`` each) are candidates; a pair (previous-token
   head P in a lower layer, induction head I) is *verified* when zero-ablating P lowers I's
   induction score by at least ``CIRCUIT_MIN_DROP`` and by at least ``CIRCUIT_MIN_RELATIVE_DROP``
   of its clean score.
3. **Redundancy** (``redundancy``): every pair within each layer (``scope="layer"``), or every
   pair among the ``PAIR_TOP_K`` heads with the largest worst case (``scope="top"``; ``"auto"``
   picks ``"layer"`` up to ``MAX_LAYER_PAIRS`` pairs). Interaction = effect(a+b) - effect(a) -
   effect(b) (means over texts). Among pairs whose effect exceeds ``PAIR_MIN_EFFECT`` x the
   largest single mean: the fraction where the sum of singles underestimates the pair (strictly,
   and by more than ``UNDERESTIMATE_MARGIN`` of the sum), the median ratio pair / sum; backup
   heads by :func:`headlab.analysis.importance.backup_heads` (``BACKUP_FACTOR``, ``BACKUP_MIN_EFFECT`` x
   the largest single mean).
4. **Patterns vs writes** (``patterns_vs_writes``): normalised attention entropy and the mean
   norm of the head's write (``cache.result``) on the texts, beside the mean ``|effect|``.
   *Orphans that matter*: entropy >= ``DIFFUSE_ENTROPY`` and (mean ``|effect|`` >= ``ORPHAN_EFFECT``
   x the mean over heads, or write norm >= ``ORPHAN_WRITE_NORM`` x the median head's).
   *Sharp but idle*: entropy <= ``SHARP_ENTROPY`` and mean ``|effect|`` < ``IDLE_EFFECT`` x the mean
   over heads. Spearman correlations of entropy and of write norm with the mean ``|effect|``.
5. **Keep** (``keep``): the heads a pruning or distillation plan must keep, each with its
   reasons: ``worst case`` (worst >= ``TAIL_WORST_ABOVE`` x the largest mean, so the head with the
   largest mean is always kept), ``circuit``
   (a verified pair), ``backup`` (backs up, or is backed up by, another head), ``orphan`` (an
   orphan that matters by its effect); and the heads a plan keeping as many heads by mean
   effect would drop.

JSON schema (``report.json``; a head is ``[layer, head]``, a grid is ``n_layers`` lists of
``n_heads`` numbers):

* ``schema`` (``"headlab.report/1"``), ``model``, ``kind`` (``"causal LM"``/``"encoder"``),
  ``n_layers``, ``n_heads``, ``seed``, ``thresholds`` {name: value}, ``seconds`` {step: s};
* ``inputs``: ``source`` (sentence), ``n_texts``, ``texts`` (strings);
* ``metric``: ``kind``, ``mode``, ``definition``, ``clean`` (per text);
* ``ablation``: ``mean``, ``worst``, ``quantile`` (grids), ``q``, ``per_text`` (``[layer][head][text]``),
  ``top_by_mean``, ``top_by_worst``, ``top_by_quantile`` (lists of *head rows*: ``head``,
  ``mean``, ``worst``, ``quantile``, ``worst_text``), ``hidden_in_the_tail`` (head rows plus
  ``text``), ``spearman_mean_worst``;
* ``circuits``: ``inputs`` (sentence), ``previous_token``, ``induction`` (grids of scores on the
  repeated sequences), ``previous_token_candidates``, ``induction_candidates`` (``head``,
  ``score``, ``lift``), ``pairs`` (``previous_token``, ``induction``, ``clean``, ``ablated``,
  ``drop``, ``relative_drop``, ``verified``), ``verified`` (the verified pairs);
* ``redundancy``: ``scope``, ``n_pairs``, ``pairs`` (``heads``, ``pair``, ``sum_of_singles``,
  ``interaction``), ``counted``, ``fraction_underestimated``, ``fraction_clearly_underestimated``,
  ``median_ratio`` (null when no pair counts), ``top_interactions``, ``backups`` (``removed``,
  ``backup``, ``alone``, ``given_removed``);
* ``patterns_vs_writes``: ``entropy``, ``write_norm``, ``abs_effect`` (grids), ``labels``
  (grid of :func:`headlab.analysis.detect.label_heads` labels: the atlas's rule, with the pattern scores on
  the texts, induction on the repeated sequences and the mean ``|effect|``), ``strength`` (grid),
  ``spearman_entropy_effect``, ``spearman_write_norm_effect``, ``orphans_that_matter``,
  ``sharp_but_idle`` (``head``, ``entropy``, ``write_norm``, ``abs_effect``);
* ``keep``: ``heads`` (``head``, ``reasons``, ``mean``, ``worst``), ``n_keep``,
  ``mean_ranking_would_drop`` (heads), ``distillation`` (sentence);
* ``figures``: {name: file name in DIR} (written by :func:`write_report`): ``effects``,
  ``circuits``, ``redundancy``, ``patterns``, ``labels``, ``keep``; ``{}`` until written.
"""

from __future__ import annotations

from headlab.report.checks import (
    ablation_section, checklist, circuits_section, keep_section, patterns_section, redundancy_section,
)
from headlab.report.inputs import report_inputs
from headlab.report.thresholds import DISTILLATION, JSON_KEYS, N_TEXTS, PAIR_TOP_K, SCHEMA, THRESHOLDS
from headlab.report.writing import draw_figures, format_value, render_markdown, write_report

__all__ = ["checklist", "report_inputs", "write_report", "render_markdown", "draw_figures", "format_value",
           "ablation_section", "circuits_section", "redundancy_section", "patterns_section", "keep_section",
           "THRESHOLDS", "JSON_KEYS", "DISTILLATION", "SCHEMA", "N_TEXTS", "PAIR_TOP_K"]
