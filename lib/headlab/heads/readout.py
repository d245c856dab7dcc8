"""How the residual stream becomes logits, read from the adapter: :class:`Readout` and :class:`LinearNorm`.

``logits = cap(norm(x) @ W_U + b_U)`` for the last block's output ``x``. The norm divides by
``x``'s scale, so it is not linear; with the scale **frozen** at its value on one run it is:
``norm(x) = centre(x) / scale(x) * gamma + beta`` (centring for a LayerNorm only;
``scale = sqrt(mean(centre(x)^2) + eps)``), and a sum of components ``x = sum c`` normalises to
``sum centre(c) / scale * gamma + beta``. Direct logit attribution, the copying detector and the
circuits' folded matrices all use this one linearisation. ``cap`` is the final soft-cap some
families apply (``cap * tanh(logits / cap)``, Gemma-2): it is not linear and no linearisation
includes it.
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
    """A LayerNorm or RMSNorm made linear: ``centre(c) / scale * gamma`` (``beta`` added once).

    Attributes:
        gamma: ``(d_model,)`` the norm's gain (``None``: 1), as the family applies it (Gemma: ``1 + weight``).
        beta: ``(d_model,)`` its bias, or ``None``.
        centres: subtract the mean over ``d_model`` first (a LayerNorm).
        eps: added to the mean square before the square root.
    """

    gamma: torch.Tensor | None
    beta: torch.Tensor | None
    centres: bool
    eps: float

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` minus its mean over the last dimension for a LayerNorm; ``x`` itself for an RMSNorm."""
        return x - x.mean(-1, keepdim=True) if self.centres else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The norm's divisor on the stream ``x`` ``(..., d_model)`` -> ``(...)``: the scale to freeze."""
        return self.centre(x).pow(2).mean(-1).add(self.eps).sqrt()

    def apply(self, c: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """``centre(c) / scale * gamma``, bias excluded: component ``c`` ``(*lead, ..., d_model)`` of a
        stream whose frozen ``scale`` is ``(*lead)`` (extra middle dimensions broadcast, e.g. heads);
        ``scale=None`` leaves the division out."""
        c = self.centre(c)
        if scale is not None:
            c = c / scale.reshape(*scale.shape, *([1] * (c.dim() - scale.dim())))
        return c if self.gamma is None else c * self.gamma.to(c)

    def fold(self, W: torch.Tensor) -> torch.Tensor:
        """``P diag(gamma) W`` for a matrix ``W`` ``(d_model, k)`` that reads the normalised stream
        (``P = I - 11^T / d_model`` for a LayerNorm, ``I`` for an RMSNorm): ``x`` read through the
        norm is ``apply(x, scale) @ W = (x / scale) @ fold(W)``."""
        W = W if self.gamma is None else self.gamma.to(W)[:, None] * W
        return W - W.mean(dim=0, keepdim=True) if self.centres else W


def linear_norm(norm: nn.Module | None, arch: Architecture) -> LinearNorm | None:
    """``norm`` (a norm module of a model of family ``arch``) made linear, or ``None`` for no norm."""
    if norm is None:
        return None
    with resident(norm):  # an offloaded norm's weights are on 'meta' between passes
        gamma, beta = arch.norm_gain(norm), getattr(norm, "bias", None)
        return LinearNorm(None if gamma is None else gamma.detach().clone(),
                          None if beta is None else beta.detach().clone(), arch.norm_centres, float(arch.norm_eps(norm)))


@dataclass(frozen=True)
class Readout:
    """A causal LM's final norm and unembedding (from :meth:`~headlab.heads.HeadModel.readout`).

    Attributes:
        norm: the final norm module (``None`` where there is none), applied afresh by :meth:`logits`.
        linear: it made linear (:class:`LinearNorm`; ``None`` without a norm).
        W_U: ``(d_model, d_vocab)`` the unembedding.
        b_U: ``(d_vocab,)`` its bias, or ``None``.
        softcap: the final logit soft-cap ``c`` (``logits = c * tanh(logits / c)``), or ``None``.
    """

    norm: nn.Module | None
    linear: LinearNorm | None
    W_U: torch.Tensor
    b_U: torch.Tensor | None
    softcap: float | None

    def logits(self, x: torch.Tensor, cap: bool = True) -> torch.Tensor:
        """``(..., d_model)`` stream -> ``(..., d_vocab)`` logits, as the model computes them
        (``cap=False``: before the soft-cap, the part that :meth:`direct` decomposes)."""
        out = (x if self.norm is None else self.norm(x)) @ self.W_U.to(x.dtype)
        out = out if self.b_U is None else out + self.b_U.to(out.dtype)
        return out if not cap or self.softcap is None else self.softcap * torch.tanh(out / self.softcap)

    def direct(self, c: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """Component ``c``'s direct share of the (uncapped) logits, ``(..., d_model) -> (..., d_vocab)``:
        ``linear.apply(c, scale) @ W_U``, no bias (``scale=None``: the norm's division left out)."""
        c = c.to(self.W_U.dtype)
        return (c if self.linear is None else self.linear.apply(c, scale)) @ self.W_U

    def to(self, dtype: torch.dtype) -> "Readout":
        """The same readout with ``W_U``, ``b_U`` and the linear norm's tensors in ``dtype``."""
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
    norm = arch.final_norm(model)
    with resident(head):
        bias = getattr(head, "bias", None)
        W_U, b_U = head.weight.detach().T, None if bias is None else bias.detach()
    cap = arch.logit_softcap(model.config)
    return Readout(norm, linear_norm(norm, arch), W_U, b_U, None if cap is None else float(cap))
