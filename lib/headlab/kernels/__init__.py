"""Attention kernels: reference (loops, numpy, torch), fast (SDPA) and tiled (flash).

- :func:`attention` -- scaled dot-product attention, ``(out, pattern)``, one
  signature for the backends ``"loops"``, ``"numpy"``, ``"torch"`` and ``"sdpa"``.
- :func:`multi_head_attention`, :func:`split_heads`, :func:`merge_heads` --
  heads as split, attend, concatenate, project (PyTorch ``Linear`` weights).
- :func:`softmax`, :func:`causal_mask` -- the stable softmax and the mask.
- :func:`flash_attention` -- the tiled kernel with an online softmax: the same
  output without ever holding the ``n_q x n_k`` matrix (no pattern).
- :func:`fused_attention` -- attention in one streamed pass that also returns head
  statistics per query (:mod:`~headlab.kernels.statistics`; each mass one
  :class:`KeySet` of :mod:`~headlab.kernels.keysets`) instead of the pattern:
  a Triton kernel (:mod:`~headlab.kernels.triton_attention`, needs ``headlab[kernels]``)
  or the same algorithm in torch tiles.
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
