"""The checklist's thresholds and the documented keys of ``report.json``.

Every threshold is a named constant here and travels with each report under ``thresholds``; what
each one means is in :mod:`headlab.report`.
"""

from __future__ import annotations

from headlab.analysis.detect import DIFFUSE_ENTROPY, ORPHAN_EFFECT
from headlab.schema import schema_of

__all__ = ["SCHEMA", "THRESHOLDS", "JSON_KEYS", "METRIC_DEFINITIONS", "top_count"]

SCHEMA = schema_of("report")  # "headlab.report/2"
N_TEXTS = 48                 # default texts: this many, evenly spread over the model's default set
HIGH_QUANTILE = 0.9          # the high quantile reported beside mean and worst case
TOP_K = 8                    # heads listed per ranking (compared: top_count(n), at most a quarter of them)
TAIL_MEAN_BELOW = 0.25       # hidden in the tail: mean < 0.25 x the largest mean effect ...
TAIL_WORST_ABOVE = 1.0       # ... and worst > 1.0 x the largest mean effect (keep: worst >= it)
CIRCUIT_TEXTS = 8            # repeated random sequences for the circuit check
CANDIDATE_LIFT = 0.3         # previous-token / induction candidates: lift over uniform >= 0.3
MAX_CANDIDATES = 4           # at most this many candidates per family, strongest first
CIRCUIT_MIN_DROP = 0.1       # verified: the induction score drops by >= 0.1 (absolute) ...
CIRCUIT_MIN_RELATIVE_DROP = 0.25  # ... and by >= 25 % of its clean value
MAX_LAYER_PAIRS = 400        # scope "auto": pairs within layers up to this many, else top-k pairs
PAIR_TOP_K = 16              # scope "top": every pair among the 16 heads with the largest worst case
PAIR_MIN_EFFECT = 0.05       # pairs counted: mean pair effect > 0.05 x the largest single mean
UNDERESTIMATE_MARGIN = 0.1   # clearly underestimated: pair > (1 + 0.1) x sum of singles
BACKUP_FACTOR = 3.0          # backup: effect once the partner is removed > 3 x its own effect ...
BACKUP_MIN_EFFECT = 0.05     # ... and > 0.05 x the largest single mean
ORPHAN_WRITE_NORM = 1.5      # an orphan's write norm >= 1.5 x the median head's
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
    "TAIL_WORST_ABOVE": TAIL_WORST_ABOVE, "CIRCUIT_TEXTS": CIRCUIT_TEXTS, "CANDIDATE_LIFT": CANDIDATE_LIFT,
    "MAX_CANDIDATES": MAX_CANDIDATES, "CIRCUIT_MIN_DROP": CIRCUIT_MIN_DROP,
    "CIRCUIT_MIN_RELATIVE_DROP": CIRCUIT_MIN_RELATIVE_DROP, "MAX_LAYER_PAIRS": MAX_LAYER_PAIRS,
    "PAIR_TOP_K": PAIR_TOP_K, "PAIR_MIN_EFFECT": PAIR_MIN_EFFECT, "UNDERESTIMATE_MARGIN": UNDERESTIMATE_MARGIN,
    "BACKUP_FACTOR": BACKUP_FACTOR, "BACKUP_MIN_EFFECT": BACKUP_MIN_EFFECT, "DIFFUSE_ENTROPY": DIFFUSE_ENTROPY,
    "ORPHAN_EFFECT": ORPHAN_EFFECT, "ORPHAN_WRITE_NORM": ORPHAN_WRITE_NORM, "SHARP_ENTROPY": SHARP_ENTROPY,
    "IDLE_EFFECT": IDLE_EFFECT, "TASK_WINDOWS": TASK_WINDOWS, "TASK_SHARE": TASK_SHARE,
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
    "circuits": ["inputs", "previous_token", "previous_token_lift", "induction", "induction_own", "induction_lift",
                 "induction_own_lift", "uniform", "previous_token_candidates", "induction_candidates",
                 "found_on_one_kind_only", "pairs", "verified"],
    "modes": ["heads", "zero", "second_metric", "conditions"],
    "redundancy": ["scope", "n_pairs", "pairs", "counted", "fraction_underestimated",
                   "fraction_clearly_underestimated", "median_ratio", "top_interactions", "backups"],
    "patterns_vs_writes": ["entropy", "write_norm", "abs_effect", "labels", "strength", "spearman_entropy_effect",
                           "spearman_write_norm_effect", "orphans_that_matter", "sharp_but_idle"],
    "keep": ["heads", "n_keep", "mean_ranking_would_drop"],
}

METRIC_DEFINITIONS = {
    "loss": "next-token loss (nats) with the head zero-ablated minus the clean loss, per text",
    "cosine": "1 - cos(pooled embedding with the head zero-ablated, clean pooled embedding), per text",
    "retrieval": "self-retrieval loss with the head zero-ablated minus the clean one, per text",
}
