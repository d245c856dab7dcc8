"""The book's teaching kernels: attention written three ways and split into heads.

:func:`attention` (backends ``"loops"``: nested Python lists, ``"numpy"``, ``"torch"``; it returns
the pattern beside the output), :func:`softmax`, :func:`causal_mask`; :func:`multi_head_attention`,
:func:`split_heads`, :func:`merge_heads` (chapter 2); :func:`flash_attention`, the tiled loop that
never holds the pattern (the appendix, chapter 2b). Each is checked against
``torch.nn.functional.scaled_dot_product_attention``. The kernels a researcher runs on a model
(the fused statistics kernel) are in :mod:`headlab.kernels`; the input checks all of them share are
:mod:`headlab.kernels.checks`.
"""

from deviating.kernels.flash import flash_attention
from deviating.kernels.loops import LOOPS_MAX_WORK
from deviating.kernels.multihead import merge_heads, multi_head_attention, split_heads
from deviating.kernels.reference import attention, causal_mask, softmax

__all__ = ["LOOPS_MAX_WORK", "attention", "causal_mask", "flash_attention", "merge_heads", "multi_head_attention",
           "softmax", "split_heads"]
