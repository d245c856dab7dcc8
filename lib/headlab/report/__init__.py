"""The checklist report, for any model: ``python -m headlab report --model NAME --out DIR``.

    python -m headlab report --model minilm --out report_minilm
    python -m headlab report --model gpt2 --out report_gpt2 --texts my_texts.txt
    python -m headlab report --model my-model --out r --data my_package.data:report_data

:func:`checklist` runs, on one model and one set of texts, the checks a reader applies to a claim
about heads, and returns a JSON-ready dict whose ``checklist`` table says, check by check, what
was measured and what it found (:mod:`headlab.report.summary`); :func:`write_report` writes
``DIR/report.json`` and ``DIR/report.md`` with its figures (PNG files in ``DIR``). Every
threshold is a named constant in :mod:`headlab.report.thresholds` and travels in the JSON under
``thresholds``. Effects are ablation deltas ``metric(head removed) - metric(clean)`` per text
(:func:`headlab.analysis.sweep.sweep`): the next-token loss for causal LMs, ``1 - cos`` of the
pooled embedding for encoders; positive = the head helps. Inputs (:func:`report_inputs`): the
given texts, or ``N_TEXTS`` texts of the model's default set (its own data's, else
:func:`headlab.analysis.atlas.default_texts`).

**The model's own data** (:class:`ReportData`, :mod:`headlab.report.data`): a small plug-in,
``checklist(hm, ..., data=...)`` or ``--data MODULE:FUNCTION``, that gives the default texts, the
own text of the induction check and per-task margins. Without it the report runs on any model:
the default texts of the atlas, the report's texts repeated as the own text, and the ``tasks``
check "not measured", with the reason. The book's models bring theirs
(``deviating.report:book_data``; ``python -m deviating report`` passes it).

The checks, in the book's order:

1. **Baselines** (``ablation``): every head's zero-ablation effect on every text, its mean with a
   95% bootstrap interval over texts against no effect (``above_zero``, ``below_zero``), its
   worst case and ``HIGH_QUANTILE`` quantile; pattern scores are lifts over uniform attention.
2. **Selection** (``selection``): the ``TOP_K`` heads by mean chosen on one half of the texts
   and measured on the other (:func:`headlab.stats.split_items`): in-sample against held-out.
3. **Conditioning** (``ablation.hidden_in_the_tail``, ``position``): heads whose mean is below
   ``TAIL_MEAN_BELOW`` x the largest mean while their worst case exceeds ``TAIL_WORST_ABOVE`` x it;
   for a causal LM, every head's effect on the early and on the late half of the positions.
4. **Detectors on the model's own text** (``circuits``, :mod:`headlab.report.circuits`): the
   one definition of an induction head (:func:`headlab.roles.induction.induction_heads`:
   the attention half, a held-out lift over uniform attention, and the copying half through the
   OV circuit) on ``CIRCUIT_TEXTS`` repeated random sequences and on the model's own kind of text
   (:mod:`headlab.report.detectors`); previous-token heads by
   :func:`headlab.roles.positional.previous_token_heads` on the own text (at most
   ``MAX_CANDIDATES`` of each role tested); a pair (previous-token head P below, induction head I)
   is *verified* when zero-ablating P cuts I's score, on the held-out half of a kind of text where
   I was found, by at least ``CIRCUIT_MIN_RELATIVE_DROP`` of its clean score (lower end of the
   95% interval of :func:`headlab.roles.induction.induction_dependence`).
5. **Seeds** (``seeds``): with ``replicas`` (the same recipe at other seeds), the rank correlation
   of the heads' mean effects and the top heads they share; else "not measured", with why.
6. **Per-task margins** (``tasks``): where the model's data gives them (``ReportData.task_shares``),
   each head's share of each task's margin on the ``TASK_WINDOWS`` windows richest in the task,
   and the task specialists (a share of at least ``TASK_SHARE``) whose average effect is below
   the median.
7. **Ablation mode and metric** (``modes``): the top heads under mean and resample ablation and
   with a second metric, and whether their order changes.

Then what the checks feed: **pairs** (``redundancy``: every pair within each layer up to
``MAX_LAYER_PAIRS`` pairs, else every pair among the ``PAIR_TOP_K`` heads with the largest worst
case; pairs whose effect exceeds ``PAIR_MIN_EFFECT`` x the largest single mean are counted, and
underestimated by more than ``UNDERESTIMATE_MARGIN`` of the sum or not; a backup's effect once its
partner is gone exceeds ``BACKUP_FACTOR`` x its own and ``BACKUP_MIN_EFFECT`` x the largest single
mean), **patterns against writes** (``patterns_vs_writes``: entropy, write norm, the orphan heads by
:func:`headlab.roles.orphan.orphans_from_effects` on the effects of check 1 and the
selection split, sharp but idle heads by ``SHARP_ENTROPY`` and ``IDLE_EFFECT``), **what to keep**
(``keep``: worst case, verified circuits, backups, orphans that matter) and **distillation**
(``distillation``: the measured cost of each layer's mean pattern and the advice written from it,
or "not measured" with the reason: the report never advises what it did not measure).

JSON (``report.json``, schema ``"headlab.report/3"``; a head is ``[layer, head]``, a grid is
``n_layers`` lists of ``n_heads`` numbers), the keys of :data:`JSON_KEYS`:

* top level: ``schema``, ``model``, ``kind`` (``"causal LM"``/``"encoder"``), ``n_layers``,
  ``n_heads``, ``seed``, ``thresholds``, ``roles`` (for each role the report names -- ``induction``,
  ``previous_token``, ``orphan`` -- the function of :mod:`headlab.roles` that defines it,
  with that definition's thresholds and split: :data:`headlab.report.thresholds.ROLES`),
  ``seconds``, ``inputs``, ``metric``, one key per section (``ablation``, ``selection``,
  ``position``, ``circuits``, ``seeds``, ``tasks``, ``modes``, ``redundancy``,
  ``patterns_vs_writes``, ``keep``, ``distillation``), ``figures`` (a figure's name -> its file in
  ``DIR``: effects, circuits, redundancy, patterns, labels, keep, once :func:`write_report` has
  drawn them) and ``checklist`` (a list of ``{check, what, measured, finding}``);
* ``inputs``: ``source``, ``n_texts``, ``texts``; ``metric``: ``kind``, ``mode``, ``definition``,
  ``clean`` (per text);
* ``ablation``: grids ``mean``, ``mean_low``, ``mean_high`` (its interval), ``worst``, ``quantile``
  (at ``q``), counts ``above_zero``, ``below_zero``, ``per_text``, head rows ``top_by_mean``,
  ``top_by_worst``, ``top_by_quantile``, ``hidden_in_the_tail``, and ``spearman_mean_worst``;
* ``selection``: ``measured``, ``seed``, ``n_select``, ``n_measure``, ``top`` (in-sample and held-out
  means), ``mean_shrinkage``, ``top_k_agreement``, ``top_k``, ``spearman_halves``;
* ``circuits``: ``inputs`` (one sentence per kind of text), ``copying_tested``, ``uniform``
  (uniform attention's induction score on each kind), grids ``induction_lift`` (random tokens),
  ``induction_own_lift`` (own text; held-out lifts), ``copying`` (the copying share, or null),
  ``induction_heads`` and ``borderline`` (per kind), ``induction_candidates`` (with ``found_on``),
  ``found_on_one_kind_only``, ``previous_token_lift`` (grid, selection half),
  ``previous_token_threshold``, ``previous_token_heads``, ``previous_token_candidates``,
  ``pairs`` (clean and ablated score, drop and relative drop with intervals, on each kind where
  the induction head was found; null elsewhere), ``verified``;
* ``modes``: ``heads``, ``zero`` (their zero-ablation means), ``second_metric``, ``conditions``;
* ``redundancy``: ``scope``, ``n_pairs``, ``pairs``, ``counted``, ``fraction_underestimated``,
  ``fraction_clearly_underestimated``, ``median_ratio``, ``top_interactions``, ``backups``;
* ``patterns_vs_writes``: grids ``entropy``, ``write_norm``, ``abs_effect``, ``labels``,
  ``strength``, ``named`` (a family names the head); ``spearman_entropy_effect``,
  ``spearman_write_norm_effect``, ``name_threshold``, ``orphan_candidates`` (effect, lead over
  the mean head and rank, with intervals), ``orphans_that_matter``, ``sharp_but_idle``;
* ``keep``: ``heads`` (with reasons), ``n_keep``, ``mean_ranking_would_drop``;
* a section that could not be measured on this model is ``{"measured": false, "why": ...}``.
"""

from __future__ import annotations

from headlab.report.checks import ablation_section, checklist, keep_section, patterns_section, redundancy_section
from headlab.report.circuits import circuits_section
from headlab.report.data import ReportData
from headlab.report.inputs import report_inputs
from headlab.report.summary import CHECKS, checklist_table
from headlab.report.thresholds import JSON_KEYS, N_TEXTS, PAIR_TOP_K, ROLES, SCHEMA, THRESHOLDS
from headlab.report.writing import draw_figures, format_value, render_markdown, write_report

__all__ = ["checklist", "ReportData", "report_inputs", "write_report", "render_markdown", "draw_figures", "format_value",
           "ablation_section", "circuits_section", "redundancy_section", "patterns_section", "keep_section",
           "checklist_table", "CHECKS", "THRESHOLDS", "ROLES", "JSON_KEYS", "SCHEMA", "N_TEXTS", "PAIR_TOP_K"]
