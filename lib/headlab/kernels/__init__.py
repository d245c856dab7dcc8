"""Attention kernels a researcher runs on a model: the fused, streamed kernel that scores heads
without holding their patterns (:func:`fused_attention`, Triton or tiled torch), its statistics
and key sets, and the input checks every kernel shares (:mod:`headlab.kernels.checks`).

The teaching kernels of the book (Python loops, numpy, the torch reference that returns the
pattern, the multi-head split, the flash tiles) are in :mod:`deviating.kernels`.
"""

from headlab.kernels.keysets import KeySet, register_statistic, statistic_names, unregister_statistic
from headlab.kernels.statistics import STATISTICS, HeadStatistics, StatInputs, statistic_inputs
from headlab.kernels.streaming import TritonUnavailable, fused_attention

__all__ = [
    "fused_attention",
    "HeadStatistics",
    "KeySet",
    "STATISTICS",
    "register_statistic",
    "statistic_names",
    "unregister_statistic",
    "StatInputs",
    "statistic_inputs",
    "TritonUnavailable",
]
