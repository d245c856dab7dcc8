"""The checklist's thresholds and the documented keys of ``report.json``.

Every threshold is a named constant here and travels with each report under ``thresholds``; what
each one means is in :mod:`headlab.report`.
"""

from __future__ import annotations

from headlab.roles.induction import COPY_K, COPY_SHARE, INDUCTION_LIFT
from headlab.roles.orphan import ORPHAN_EFFECT
from headlab.schema import schema_of

__all__ = ["SCHEMA", "THRESHOLDS", "ROLES", "JSON_KEYS", "METRIC_DEFINITIONS", "top_count"]

SCHEMA = schema_of("report")  # "headlab.report/3"
N_TEXTS = 48                 # default texts: this many, evenly spread over the model's default set
HIGH_QUANTILE = 0.9          # the high quantile reported beside mean and worst case
TOP_K = 8                    # heads listed per ranking (compared: top_count(n), at most a quarter of them)
TAIL_MEAN_BELOW = 0.25       # hidden in the tail: mean < 0.25 x the largest mean effect ...
TAIL_WORST_ABOVE = 1.0       # ... and worst > 1.0 x the largest mean effect (keep: worst >= it)
CIRCUIT_TEXTS = 64           # repeated random sequences for the circuit check (chapter 5's 64)
MAX_CANDIDATES = 4           # at most this many candidates per role, strongest first
CIRCUIT_MIN_RELATIVE_DROP = 0.25  # verified: the induction score loses >= 25 % (lower end of its 95% interval)
MAX_LAYER_PAIRS = 400        # scope "auto": pairs within layers up to this many, else top-k pairs
PAIR_TOP_K = 16              # scope "top": every pair among the 16 heads with the largest worst case
PAIR_MIN_EFFECT = 0.05       # pairs counted: mean pair effect > 0.05 x the largest single mean
UNDERESTIMATE_MARGIN = 0.1   # clearly underestimated: pair > (1 + 0.1) x sum of singles
BACKUP_FACTOR = 3.0          # backup: effect once the partner is removed > 3 x its own effect ...
BACKUP_MIN_EFFECT = 0.05     # ... and > 0.05 x the largest single mean
SHARP_ENTROPY = 0.3          # sharp pattern: normalised entropy <= 0.3 ...
IDLE_EFFECT = 0.25           # ... idle: mean |effect| < 0.25 x the mean over heads
TASK_WINDOWS = 16            # per-task margins: on the 16 windows holding the most items of the task
TASK_SHARE = 0.5             # a task specialist carries >= 50 % of a task's margin ...

def top_count(n_heads: int) -> int:
    """How many top heads the selection, seeds and modes checks compare: ``TOP_K``, but at most a
    quarter of the model's heads (and at least 2), so that "the top heads" is a real choice."""
    return max(2, min(TOP_K, n_heads // 4))


THRESHOLDS = {
    "N_TEXTS": N_TEXTS, "HIGH_QUANTILE": HIGH_QUANTILE, "TOP_K": TOP_K, "TAIL_MEAN_BELOW": TAIL_MEAN_BELOW,
    "TAIL_WORST_ABOVE": TAIL_WORST_ABOVE, "CIRCUIT_TEXTS": CIRCUIT_TEXTS, "MAX_CANDIDATES": MAX_CANDIDATES,
    "CIRCUIT_MIN_RELATIVE_DROP": CIRCUIT_MIN_RELATIVE_DROP, "MAX_LAYER_PAIRS": MAX_LAYER_PAIRS,
    "PAIR_TOP_K": PAIR_TOP_K, "PAIR_MIN_EFFECT": PAIR_MIN_EFFECT, "UNDERESTIMATE_MARGIN": UNDERESTIMATE_MARGIN,
    "BACKUP_FACTOR": BACKUP_FACTOR, "BACKUP_MIN_EFFECT": BACKUP_MIN_EFFECT, "SHARP_ENTROPY": SHARP_ENTROPY,
    "IDLE_EFFECT": IDLE_EFFECT, "TASK_WINDOWS": TASK_WINDOWS, "TASK_SHARE": TASK_SHARE,
}

# Where each role the report names is defined (the one definition, headlab.roles),
# with that definition's own thresholds; travels in report.json under "roles".
ROLES = {
    "induction": {
        "function": "headlab.roles.induction.induction_heads",
        "dependence": "headlab.roles.induction.induction_dependence",
        "thresholds": {"lift": INDUCTION_LIFT, "copy_k": COPY_K, "copy_share": COPY_SHARE},
        "split": "selected on one half of each kind of text, measured on the other (headlab.stats.split_items, "
                 "the report's seed)",
    },
    "previous_token": {
        "function": "headlab.roles.positional.previous_token_heads",
        "thresholds": "the larger of the decoy null's 99% quantile and the label share 0.4 (per model, in "
                      "circuits.previous_token_threshold)",
        "split": "the own text's split of the induction role",
    },
    "orphan": {
        "function": "headlab.roles.orphan.orphans_from_effects",
        "on": "the zero-ablation effects of check 1 (what headlab.roles.orphan.orphan_heads sweeps), "
              "heads named by headlab.roles.orphan.named_heads at the decoy-calibrated lift",
        "thresholds": {"effect": ORPHAN_EFFECT},
        "split": "the selection check's split of the texts (headlab.stats.split_items, the report's seed)",
    },
}

# The documented top-level keys of report.json and of each section (the tests hold the module to them).
JSON_KEYS = {
    "": ["schema", "model", "kind", "n_layers", "n_heads", "seed", "thresholds", "roles", "seconds", "inputs",
         "metric", "ablation", "selection", "position", "circuits", "seeds", "tasks", "modes", "redundancy",
         "patterns_vs_writes", "keep", "distillation", "figures", "checklist"],
    "inputs": ["source", "n_texts", "texts"],
    "metric": ["kind", "mode", "definition", "clean"],
    "ablation": ["mean", "mean_low", "mean_high", "above_zero", "below_zero", "worst", "quantile", "q", "per_text",
                 "top_by_mean", "top_by_worst", "top_by_quantile", "hidden_in_the_tail", "spearman_mean_worst"],
    "selection": ["measured", "seed", "n_select", "n_measure", "top", "mean_shrinkage", "top_k_agreement", "top_k",
                  "spearman_halves"],
    "circuits": ["inputs", "copying_tested", "uniform", "induction_lift", "induction_own_lift", "copying",
                 "induction_heads", "borderline", "induction_candidates", "found_on_one_kind_only",
                 "previous_token_lift", "previous_token_threshold", "previous_token_heads",
                 "previous_token_candidates", "pairs", "verified"],
    "modes": ["heads", "zero", "second_metric", "conditions"],
    "redundancy": ["scope", "n_pairs", "pairs", "counted", "fraction_underestimated",
                   "fraction_clearly_underestimated", "median_ratio", "top_interactions", "backups"],
    "patterns_vs_writes": ["entropy", "write_norm", "abs_effect", "labels", "strength", "spearman_entropy_effect",
                           "spearman_write_norm_effect", "named", "name_threshold", "orphan_candidates",
                           "orphans_that_matter", "sharp_but_idle"],
    "keep": ["heads", "n_keep", "mean_ranking_would_drop"],
}

METRIC_DEFINITIONS = {
    "loss": "next-token loss (nats) with the head zero-ablated minus the clean loss, per text",
    "cosine": "1 - cos(pooled embedding with the head zero-ablated, clean pooled embedding), per text",
    "retrieval": "self-retrieval loss with the head zero-ablated minus the clean one, per text",
}
