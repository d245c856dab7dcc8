"""Uncertainty for every number the book reports, built on :mod:`scipy.stats`.

* a mean over items: :func:`bootstrap_mean`; a paired lead: :func:`paired_difference`,
  :func:`mcnemar`;
* a proportion: :func:`proportion`, :func:`binomial_test`, :func:`fisher`;
* against a simulated null: :func:`permutation_test`, :func:`empirical_pvalue`,
  :func:`null_threshold`;
* over training seeds: :func:`over_seeds`; an exact quantity: :func:`exact`;
* choosing from many: :func:`split_items`, :func:`select_and_measure`, :func:`holm`,
  :func:`benjamini_hochberg`; labels and ranks: :func:`stability`, :func:`rank_intervals`;
* inequality: :func:`gini`, :func:`gini_interval`, :func:`gini_permutation_null`,
  :func:`gini_references`; rankings: :func:`spearman`.

Results are an :class:`Estimate` (value, interval, n) or a :class:`TestResult` (statistic,
p-value, n); every resampling takes a ``seed``.
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
from headlab.stats.intervals import (BCA_MIN_UNITS, BOOTSTRAP_METHODS, bootstrap_mean, exact, over_seeds,
                                     paired_difference, proportion)
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
    "bootstrap_mean", "paired_difference", "over_seeds", "proportion", "exact", "BOOTSTRAP_METHODS", "BCA_MIN_UNITS",
    "mcnemar", "binomial_test", "fisher", "permutation_test", "empirical_pvalue", "ALTERNATIVES",
    "Split", "split_items", "Selection", "select_and_measure", "holm", "benjamini_hochberg",
    "null_threshold", "Stability", "stability", "UNSTABLE", "Ranks", "rank_intervals",
    "gini", "gini_interval", "gini_permutation_null", "gini_references", "REFERENCE_GINI", "spearman",
]
