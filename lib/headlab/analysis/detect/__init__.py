"""Detectors: scores that say how much a head's attention looks like a known behaviour.

Every pattern detector takes patterns ``(batch, head, q_pos, k_pos)`` and returns
``(batch, head)``. Padding queries are never scored and padding keys are never targets.
An input with no eligible query raises, or gives NaN with ``on_empty="nan"``. ``causal=``
says which keys a query may see (True: ``j <= i``).
"""

from headlab.analysis.detect.base import allowed_keys, uniform_pattern
from headlab.analysis.detect.annotated import (
    RelationResult, RelationSet, english_relation_set, held_out_relation_scores, relation_scores,
)
from headlab.analysis.detect.copying import NotApplicable, dla_copying_score, ov_copying_score, unembedding
from headlab.analysis.detect.labels import (
    BROAD_FAMILIES, DEFAULT_THRESHOLDS, DIFFUSE_ENTROPY, FAMILIES, LABEL_LIFT, LABELS, ORPHAN_EFFECT,
    HeadLabels, Thresholds, label_heads, lift,
)
from headlab.analysis.detect.positional import local_score, next_token_score, offset_score, previous_token_score
from headlab.analysis.detect.relations import (
    PRONOUN_ANTECEDENT, SUBJECT_VERB, VERB_SUBJECT, OffsetBaseline, nearest_preceding, offset_baseline,
    pointer_targets, prediction_accuracy, relation_accuracy, relation_hits, query_hits, visible_targets,
)
from headlab.analysis.detect.scores import (
    LOCAL_WINDOW, PATTERN_SCORES, WRITE_MEASURES, HeadScores, head_scores, is_punctuation, scores_to_compute,
    token_masks,
)
from headlab.analysis.detect.spread import entropy_score
from headlab.analysis.detect.tokens import (
    duplicate_token_score, first_token_score, induction_score, key_mass_score, previous_occurrence,
    punctuation_score, rare_token_score, separator_score,
)

__all__ = [
    # positional
    "previous_token_score", "next_token_score", "offset_score", "local_score",
    # keys
    "first_token_score", "key_mass_score", "separator_score", "punctuation_score",
    "duplicate_token_score", "previous_occurrence", "induction_score", "rare_token_score",
    # spread
    "entropy_score",
    # copying
    "NotApplicable", "unembedding", "ov_copying_score", "dla_copying_score",
    # relations
    "VERB_SUBJECT", "SUBJECT_VERB", "PRONOUN_ANTECEDENT", "pointer_targets", "visible_targets",
    "relation_hits", "query_hits", "relation_accuracy", "OffsetBaseline", "offset_baseline", "prediction_accuracy",
    "nearest_preceding", "RelationSet", "RelationResult",
    "english_relation_set", "relation_scores", "held_out_relation_scores",
    # labels
    "FAMILIES", "BROAD_FAMILIES", "LABELS", "LABEL_LIFT", "DIFFUSE_ENTROPY", "ORPHAN_EFFECT",
    "Thresholds", "DEFAULT_THRESHOLDS", "HeadLabels", "label_heads", "lift",
    # running a model
    "PATTERN_SCORES", "WRITE_MEASURES", "LOCAL_WINDOW", "HeadScores", "head_scores", "scores_to_compute", "token_masks",
    "is_punctuation", "uniform_pattern", "allowed_keys",
]
