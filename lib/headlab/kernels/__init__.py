"""Attention kernels: reference (loops, numpy, torch), fast (SDPA) and tiled (flash).

- :func:`attention` -- scaled dot-product attention, ``(out, pattern)``, one
  signature for the backends ``"loops"``, ``"numpy"``, ``"torch"`` and ``"sdpa"``.
- :func:`multi_head_attention`, :func:`split_heads`, :func:`merge_heads` --
  heads as split, attend, concatenate, project (PyTorch ``Linear`` weights).
- :func:`softmax`, :func:`causal_mask` -- the stable softmax and the mask.
- :func:`flash_attention` -- the tiled kernel with an online softmax: the same
  output without ever holding the ``n_q x n_k`` matrix (no pattern).
- :func:`peak_memory` -- peak bytes allocated by a call (numpy, CPU or CUDA torch).
"""

from headlab.kernels.flash import flash_attention
from headlab.kernels.loops import LOOPS_MAX_WORK
from headlab.kernels.memory import peak_memory
from headlab.kernels.multihead import merge_heads, multi_head_attention, split_heads
from headlab.kernels.reference import attention, causal_mask, softmax

__all__ = [
    "LOOPS_MAX_WORK",
    "attention",
    "causal_mask",
    "flash_attention",
    "merge_heads",
    "multi_head_attention",
    "peak_memory",
    "softmax",
    "split_heads",
]
