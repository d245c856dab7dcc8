"""Uncertainty for every number the book reports, built on :mod:`scipy.stats`.

Which function for which question:

* **a mean over sentences or windows** (a head's accuracy, a loss change):
  :func:`bootstrap_mean`; per-token values with their item ids resample whole items;
* **a lead over a baseline on the same items**: :func:`paired_difference` (interval) and,
  for right/wrong outcomes, :func:`mcnemar` (exact test);
* **a proportion** ("22 of 64 flipped"): :func:`proportion` (exact interval),
  :func:`binomial_test` (against a chance rate), :func:`fisher` (two groups);
* **a difference against a null you can simulate** (random triggers, shuffled models):
  :func:`permutation_test`, :func:`empirical_pvalue`, :func:`null_threshold`;
* **a number over training seeds**: :func:`over_seeds` (Student t, honest with 3 seeds);
* **an exact quantity** (a count, a rank, an operation count: nothing sampled): :func:`exact`,
  an interval of zero width and ``n`` the units counted;
* **choosing a head from many**: :func:`split_items` and :func:`select_and_measure`
  (select on one half, measure on the other), :func:`holm` and
  :func:`benjamini_hochberg` (many tests at once);
* **labels and ranks**: :func:`stability` (share of resamples in which a label survives;
  below 0.9 the book prints "unstable") and :func:`rank_intervals`;
* **how uneven the division of work is**: :func:`gini`, :func:`gini_interval`,
  :func:`gini_permutation_null`, :func:`gini_references`;
  how alike two rankings are: :func:`spearman` (:func:`scipy.stats.spearmanr`, with input checks).

Every function takes a ``seed`` where it resamples, so its result is reproducible, and
returns an :class:`Estimate` (value, interval, n) or a :class:`TestResult` (statistic,
p-value, n).
"""

from headlab.stats.exact import ALTERNATIVES, binomial_test, empirical_pvalue, fisher, mcnemar, permutation_test
from headlab.stats.inequality import (
    REFERENCE_GINI,
    gini,
    gini_interval,
    gini_permutation_null,
    gini_references,
)
from headlab.stats.rank import spearman
from headlab.stats.intervals import BOOTSTRAP_METHODS, bootstrap_mean, exact, over_seeds, paired_difference, proportion
from headlab.stats.results import Estimate, TestResult
from headlab.stats.selection import (
    UNSTABLE,
    Ranks,
    Selection,
    Split,
    Stability,
    benjamini_hochberg,
    holm,
    null_threshold,
    rank_intervals,
    select_and_measure,
    split_items,
    stability,
)

__all__ = [
    "Estimate", "TestResult",
    "bootstrap_mean", "paired_difference", "over_seeds", "proportion", "exact", "BOOTSTRAP_METHODS",
    "mcnemar", "binomial_test", "fisher", "permutation_test", "empirical_pvalue", "ALTERNATIVES",
    "Split", "split_items", "Selection", "select_and_measure", "holm", "benjamini_hochberg",
    "null_threshold", "Stability", "stability", "UNSTABLE", "Ranks", "rank_intervals",
    "gini", "gini_interval", "gini_permutation_null", "gini_references", "REFERENCE_GINI", "spearman",
]
