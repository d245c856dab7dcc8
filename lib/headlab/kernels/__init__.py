"""Attention kernels: reference (loops, numpy, torch), fast (SDPA) and tiled (flash).

:func:`attention`, :func:`softmax`, :func:`causal_mask`; :func:`multi_head_attention`,
:func:`split_heads`, :func:`merge_heads`; :func:`flash_attention` (tiled, no pattern);
:func:`fused_attention` (streamed, with per-query head statistics instead of the pattern).
"""

from headlab.kernels.flash import flash_attention
from headlab.kernels.loops import LOOPS_MAX_WORK
from headlab.kernels.multihead import merge_heads, multi_head_attention, split_heads
from headlab.kernels.reference import attention, causal_mask, softmax
from headlab.kernels.keysets import KeySet, register_statistic, statistic_names, unregister_statistic
from headlab.kernels.statistics import STATISTICS, HeadStatistics, StatInputs, statistic_inputs
from headlab.kernels.streaming import TritonUnavailable, fused_attention

__all__ = [
    "LOOPS_MAX_WORK",
    "attention",
    "causal_mask",
    "flash_attention",
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
    "merge_heads",
    "multi_head_attention",
    "softmax",
    "split_heads",
]
