"""Treating attention as one mechanism: the heads of a layer averaged, as interventions on a trained model.

Two ways to erase the division of labour between the heads of a layer (no training):

* :func:`layer_mean_z` — every head's output ``z`` replaced by the layer's mean head output at
  the same position (through :meth:`HeadModel.patch_z`): the layer then writes
  ``mean_h(z_h) @ sum_h W_O^h``, one "generalist" head repeated;
* :func:`layer_mean_pattern` — every head weighs its own values with the layer's mean
  attention pattern (through :meth:`HeadModel.patch_pattern`, the book's GPT only): each head
  keeps its value and output projections but loses *where* it looks.

:func:`average_heads` applies either to a set of layers inside a ``with`` block. (The same
erasure during training, attention transfer towards the mean pattern, is
:func:`deviating.training.distill.distill`.)
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import torch

from headlab.heads.model import HeadModel

__all__ = ["layer_mean_z", "layer_mean_pattern", "average_heads"]


def layer_mean_z(layer: int, z: torch.Tensor) -> torch.Tensor:
    """Every head's output replaced by the layer's mean head output at the same position.

    ``z``: ``(batch, pos, head, d_head)`` -> same shape (a function for :meth:`HeadModel.patch_z`).
    """
    if z.dim() != 4:
        raise ValueError(f"z must be (batch, pos, head, d_head), got shape {tuple(z.shape)}")
    return z.mean(dim=2, keepdim=True).expand_as(z).clone()  # (batch, pos, head, d_head)


def layer_mean_pattern(layer: int, pattern: torch.Tensor) -> torch.Tensor:
    """Every head given the layer's mean attention pattern.

    ``pattern``: ``(batch, head, q_pos, k_pos)`` -> same shape (for :meth:`HeadModel.patch_pattern`).
    The mean of distributions is a distribution, so every row still sums to 1.
    """
    if pattern.dim() != 4:
        raise ValueError(f"pattern must be (batch, head, q_pos, k_pos), got shape {tuple(pattern.shape)}")
    return pattern.mean(dim=1, keepdim=True).expand_as(pattern).clone()  # (batch, head, q_pos, k_pos)


@contextlib.contextmanager
def average_heads(hm: HeadModel, layers: Iterable[int], what: str = "z") -> Iterator[HeadModel]:
    """Inside the block, the heads of ``layers`` are averaged: ``what="z"`` replaces their outputs
    by the layer mean (:func:`layer_mean_z`), ``what="pattern"`` their attention patterns
    (:func:`layer_mean_pattern`; the book's GPT only)."""
    layers = sorted(set(int(l) for l in layers))
    if what == "z":
        with hm.patch_z(layer_mean_z, layers=layers):
            yield hm
    elif what == "pattern":
        with hm.patch_pattern(layer_mean_pattern, layers=layers):
            yield hm
    else:
        raise ValueError(f"what must be 'z' (head outputs) or 'pattern' (attention patterns), not {what!r}")
