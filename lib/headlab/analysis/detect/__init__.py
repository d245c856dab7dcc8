"""Detectors: scores that say how much a head's attention looks like a known behaviour.

Every pattern detector takes attention patterns ``(batch, head, q_pos, k_pos)`` (rows are
distributions over keys), plus what it needs (tokens, key masks, annotations), and returns
one score per input and per head, ``(batch, head)``: roles are conditional, so averaging
over inputs is the caller's choice. Padding is handled by ``attention_mask`` ``(batch,
pos)``: padding queries are never scored and padding keys are never targets, so a padded
batch scores exactly like its inputs run alone.

An input with no query position a score is defined on (a one-token input, no repeated
token for :func:`induction_score`) has no score: by default that is an error naming the
inputs; ``on_empty="nan"`` returns NaN for them instead (average with ``torch.nanmean``).
Detectors whose definition depends on which keys a query may see take ``causal=`` (True: a
causal LM, query ``i`` sees keys ``j <= i``; False: an encoder, every real key).

Modules, by meaning:

* ``positional`` — :func:`previous_token_score`, :func:`next_token_score`,
  :func:`offset_score`, :func:`local_score`;
* ``tokens`` — :func:`first_token_score`, :func:`key_mass_score`, :func:`separator_score`,
  :func:`punctuation_score`, :func:`duplicate_token_score`, :func:`induction_score`
  (with :func:`previous_occurrence`), :func:`rare_token_score`;
* ``spread`` — :func:`entropy_score` (normalised entropy);
* ``copying`` — :func:`ov_copying_score`, :func:`dla_copying_score` (causal LMs only;
  :class:`NotApplicable` otherwise);
* ``relations`` / ``annotated`` — :func:`relation_accuracy` against ground truth, beside
  :func:`offset_baseline` and the nearest-noun baseline; the English set's relation set
  (any corpus can build its own :class:`RelationSet`); :func:`relation_scores` for a model;
* ``labels`` — :func:`label_heads`: one label per head from pattern scores and effects;
  ``calibration`` — the rule's threshold read off a null of decoy keys, and label stability
  (import from :mod:`headlab.analysis.detect.calibration`);
* ``scores`` — :func:`head_scores`: every score of every head in one pass per batch.
"""

from headlab.analysis.detect.base import allowed_keys, uniform_pattern
from headlab.analysis.detect.annotated import (
    RelationResult, RelationSet, english_relation_set, held_out_relation_scores, relation_scores,
)
from headlab.analysis.detect.copying import NotApplicable, Unembed, dla_copying_score, ov_copying_score, unembedding
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
    "NotApplicable", "Unembed", "unembedding", "ov_copying_score", "dla_copying_score",
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
