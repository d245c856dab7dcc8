"""How the residual stream becomes logits, read from the adapter: :class:`Readout` and :class:`LinearNorm`.

``logits = cap(norm(x) @ W_U + b_U)`` for the last block's output ``x``. A norm divides by the
stream's scale, so it is not linear; with the scale **frozen** at its value on one run it is:
``norm(x) = centre(x) / scale(x) * gamma + beta`` (centring for a LayerNorm only), and a sum of
components normalises to the sum of their images plus ``beta``. Direct logit attribution, the
copying detector and the circuits' folded matrices use this one linearisation. ``cap`` is the
final soft-cap of some families (``c * tanh(logits / c)``, Gemma-2): not linear, in no linearisation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from headlab.heads.adapters import Architecture
from headlab.heads.offload import resident

__all__ = ["LinearNorm", "Readout", "linear_norm", "readout_of"]


@dataclass(frozen=True)
class LinearNorm:
    """A LayerNorm or RMSNorm made linear: ``c -> centre(c) / scale * gamma`` (``beta`` added once).

    ``gamma``, ``beta``: ``(d_model,)`` the gain as the family applies it (Gemma: ``1 + weight``)
    and the bias, each ``None`` where absent; ``centres``: a LayerNorm; ``eps``: as in the norm.
    """

    gamma: torch.Tensor | None
    beta: torch.Tensor | None
    centres: bool
    eps: float

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The norm's divisor on the stream ``x`` ``(..., d_model)`` -> ``(...)``: the scale to freeze."""
        x = x - x.mean(-1, keepdim=True) if self.centres else x
        return x.pow(2).mean(-1).add(self.eps).sqrt()

    def apply(self, c: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """``centre(c) / scale * gamma`` for a component ``c`` ``(*lead, ..., d_model)`` of a stream of
        frozen ``scale`` ``(*lead)`` (middle dimensions such as heads broadcast); ``None``: no division."""
        c = c - c.mean(-1, keepdim=True) if self.centres else c
        c = c if scale is None else c / scale.reshape(*scale.shape, *([1] * (c.dim() - scale.dim())))
        return c if self.gamma is None else c * self.gamma.to(c)

    def fold(self, W: torch.Tensor) -> torch.Tensor:
        """``P diag(gamma) W`` for ``W`` ``(d_model, k)`` reading the normalised stream (``P`` centres
        for a LayerNorm, else ``I``), so that ``apply(x, scale) @ W = (x / scale) @ fold(W)``."""
        W = W if self.gamma is None else self.gamma.to(W)[:, None] * W
        return W - W.mean(dim=0, keepdim=True) if self.centres else W


def linear_norm(norm: nn.Module | None, arch: Architecture) -> LinearNorm | None:
    """``norm`` (a norm module of a model of family ``arch``) made linear; ``None`` for no norm."""
    if norm is None:
        return None
    with resident(norm):  # an offloaded norm's weights are on 'meta' between passes
        gamma, beta = arch.norm_gain(norm), getattr(norm, "bias", None)
        detach = (lambda t: None if t is None else t.detach())
        return LinearNorm(detach(gamma), detach(beta), arch.norm_centres, float(arch.norm_eps(norm)))


@dataclass(frozen=True)
class Readout:
    """A causal LM's final ``norm`` (a module, or ``None``) and ``linear`` (it made linear), its
    unembedding ``W_U`` ``(d_model, d_vocab)`` and bias ``b_U`` (or ``None``), and the final logits'
    ``softcap`` (or ``None``). From :meth:`~headlab.heads.HeadModel.readout`."""

    norm: nn.Module | None
    linear: LinearNorm | None
    W_U: torch.Tensor
    b_U: torch.Tensor | None
    softcap: float | None

    def logits(self, x: torch.Tensor, cap: bool = True) -> torch.Tensor:
        """The stream ``(..., d_model)`` -> logits ``(..., d_vocab)``, as the model computes them
        (``cap=False``: before the soft-cap, the part that :meth:`direct` decomposes)."""
        out = (x if self.norm is None else self.norm(x)) @ self.W_U.to(x.dtype)
        out = out if self.b_U is None else out + self.b_U.to(out.dtype)
        return out if not cap or self.softcap is None else self.softcap * torch.tanh(out / self.softcap)

    def direct(self, c: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """Component ``c``'s direct share of the uncapped logits, no bias: ``linear.apply(c, scale) @ W_U``."""
        c = c.to(self.W_U.dtype)
        return (c if self.linear is None else self.linear.apply(c, scale)) @ self.W_U

    def to(self, dtype: torch.dtype) -> "Readout":
        """This readout with its tensors in ``dtype``."""
        cast = (lambda t: None if t is None else t.to(dtype))
        lin = self.linear and replace(self.linear, gamma=cast(self.linear.gamma), beta=cast(self.linear.beta))
        return replace(self, linear=lin, W_U=cast(self.W_U), b_U=cast(self.b_U))


def readout_of(model: nn.Module, arch: Architecture, name: str) -> Readout:
    """The :class:`Readout` of ``model`` (family ``arch``; ``name`` shown in errors).

    Raises:
        ValueError: the model has no language-model head (an encoder such as MiniLM).
    """
    head = arch.unembed(model)
    if head is None:
        raise ValueError(f"{name} has no language-model head (an encoder, or a bare transformer): "
                         "logits, logit metrics and logit attribution need a causal LM with its head")
    norm, cap = arch.final_norm(model), arch.logit_softcap(model.config)
    with resident(head):
        W_U, b_U = head.weight.detach().T, None if getattr(head, "bias", None) is None else head.bias.detach()
    return Readout(norm, linear_norm(norm, arch), W_U, b_U, None if cap is None else float(cap))
