"""Circuits: how the output of one head becomes the input of another.

In the row-vector convention of ``nn.Linear`` (a residual vector ``x`` is a row), a head has

* ``W_Q``, ``W_K``, ``W_V``: ``(d_model, d_head)``, so ``q = x W_Q`` and so on;
* ``W_O``: ``(d_head, d_model)``, its slice of the output projection;
* the **QK circuit** ``W_QK = W_Q W_K^T`` ``(d_model, d_model)``: the attention score of
  query ``x_i`` on key ``x_j`` is ``x_i W_QK x_j^T / sqrt(d_head)`` (biases aside);
* the **OV circuit** ``W_OV = W_V W_O`` ``(d_model, d_model)``: a key ``x_j`` attended with
  weight 1 adds ``x_j W_OV`` to the query's residual stream.

A later head reads what an earlier head wrote, ``y W_OV1``, in three places (Elhage et al.,
2021, *A Mathematical Framework for Transformer Circuits*):

* **Q-composition**: the query side reads it, ``y W_OV1 W_QK2 x_j^T``: matrix ``W_OV1 W_QK2``;
* **K-composition**: the key side reads it, ``x_i W_QK2 (y W_OV1)^T``: matrix ``W_QK2 W_OV1^T``;
* **V-composition**: the value side moves it on, ``y W_OV1 W_OV2``: matrix ``W_OV1 W_OV2``.

The **composition score** of ``A B`` is ``||A B||_F / (||A||_F ||B||_F)``, in [0, 1]. Random
matrices are not at 0: compare with :func:`random_composition_baseline`.

Norms. With ``fold_ln=True`` :func:`head_weights` folds the linear part of a pre-norm head's
input norm into the read matrices: ``W <- P diag(gamma) W`` for a LayerNorm (``P = I - 11^T /
d_model``), ``W <- diag(gamma) W`` for an RMSNorm. The division by ``std(x)`` or ``rms(x)`` and
the biases are left out, as in the literature. Post-norm models (BERT, MiniLM): nothing is folded.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headlab.heads.model import HeadModel
from headlab.heads.readout import linear_norm

__all__ = [
    "HeadWeights", "head_weights", "CIRCUITS", "circuit_singular_values", "circuit_ranks", "composition_score", "COMPOSITIONS", "composition",
    "composition_scores", "random_composition_baseline",
]

COMPOSITIONS = ("Q", "K", "V")


@dataclass(frozen=True)
class HeadWeights:
    """One head's matrices in the row-vector convention (see the module docstring).

    ``W_Q``, ``W_K``, ``W_V``: ``(d_model, d_head)``; ``W_O``: ``(d_head, d_model)``.
    """

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor

    @property
    def W_QK(self) -> torch.Tensor:
        """``W_Q W_K^T`` ``(d_model, d_model)``: score(x_i, x_j) = x_i W_QK x_j^T / sqrt(d_head)."""
        return self.W_Q @ self.W_K.T

    @property
    def W_OV(self) -> torch.Tensor:
        """``W_V W_O`` ``(d_model, d_model)``: attending to x_j with weight 1 writes x_j W_OV."""
        return self.W_V @ self.W_O


def head_weights(hm: HeadModel, layer: int, head: int, fold_ln: bool = True) -> HeadWeights:
    """The matrices of head ``layer.head`` of ``hm`` (float32, on the CPU), for every family.

    Built on :meth:`HeadModel.W_Q`, ``W_K``, ``W_V`` and ``W_O`` (under grouped-query
    attention, ``W_K`` and ``W_V`` are the key/value head's). ``fold_ln``: fold
    :meth:`HeadModel.attn_norm` into the read matrices (module docstring). Biases and rotary
    embeddings are not included, nor the RMSNorms some families (Qwen3, Gemma-3, OLMo-2) apply to
    queries and keys.
    """
    if not isinstance(hm, HeadModel):
        raise TypeError(f"hm must be a headlab HeadModel, got {type(hm).__name__}")
    layer, head = hm.check_heads([(layer, head)])[0]
    W_Q, W_K, W_V = (w[head].float().cpu() for w in (hm.W_Q(layer), hm.W_K(layer), hm.W_V(layer)))
    W_O = hm.W_O(layer)[head].float().cpu()  # (d_head, d_model)
    norm = linear_norm(hm.attn_norm(layer), hm.arch) if fold_ln else None
    if norm is not None:
        W_Q, W_K, W_V = (norm.fold(W) for W in (W_Q, W_K, W_V))
    return HeadWeights(W_Q, W_K, W_V, W_O)


CIRCUITS = ("QK", "OV")


def circuit_singular_values(hm: HeadModel, circuit: str) -> torch.Tensor:
    """The ``d_head`` largest singular values of every head's ``W_QK`` or ``W_OV``, largest first.

    ``circuit``: ``"QK"`` or ``"OV"``, from the raw weights (no norm folded). Returns
    ``(n_layers, n_heads, d_head)`` float64: those of ``R_A R_B^T`` from the QR factorisations
    of the two factors, so no ``(d_model, d_model)`` matrix is formed.
    """
    if circuit not in CIRCUITS:
        raise ValueError(f"unknown circuit {circuit!r}: choose from {', '.join(CIRCUITS)}")
    layers = range(hm.n_layers)
    if circuit == "QK":
        a, b = torch.stack([hm.W_Q(l) for l in layers]), torch.stack([hm.W_K(l) for l in layers])
    else:
        a = torch.stack([hm.W_V(l) for l in layers])
        b = torch.stack([hm.W_O(l) for l in layers]).transpose(-1, -2)  # (layer, head, d_model, d_head)
    r_a, r_b = torch.linalg.qr(a.double().cpu()).R, torch.linalg.qr(b.double().cpu()).R  # (..., d_head, d_head)
    return torch.linalg.svdvals(r_a @ r_b.transpose(-1, -2))


def circuit_ranks(hm: HeadModel, circuit: str, rtol: float = 1e-6) -> torch.Tensor:
    """``(n_layers, n_heads)`` rank of every head's ``W_QK`` (``"QK"``) or ``W_OV`` (``"OV"``).

    The number of singular values (:func:`circuit_singular_values`) above ``rtol`` times the
    largest; at most ``d_head``.
    """
    if not rtol > 0:
        raise ValueError(f"rtol must be > 0, got {rtol!r}")
    s = circuit_singular_values(hm, circuit)
    return (s > rtol * s[..., :1]).sum(-1)


def composition_score(left: torch.Tensor, right: torch.Tensor) -> float:
    """``||left @ right||_F / (||left||_F ||right||_F)``, in [0, 1].

    0 when either matrix is zero (a head that writes or reads nothing composes with nothing).
    """
    left, right = torch.as_tensor(left, dtype=torch.float64), torch.as_tensor(right, dtype=torch.float64)
    if left.dim() != 2 or right.dim() != 2 or left.shape[1] != right.shape[0]:
        raise ValueError(f"need two matrices whose product is defined, got {tuple(left.shape)} and "
                         f"{tuple(right.shape)}")
    norms = float(torch.linalg.matrix_norm(left)) * float(torch.linalg.matrix_norm(right))
    if norms == 0.0:
        return 0.0
    return float(torch.linalg.matrix_norm(left @ right)) / norms


def composition(kind: str, earlier: HeadWeights,
                later: HeadWeights) -> float:
    """The ``kind`` (``"Q"``, ``"K"`` or ``"V"``) composition score of
    ``later`` reading ``earlier``."""
    if kind == "Q":
        return composition_score(earlier.W_OV, later.W_QK)
    if kind == "K":
        return composition_score(later.W_QK, earlier.W_OV.T)
    if kind == "V":
        return composition_score(earlier.W_OV, later.W_OV)
    raise ValueError(f"unknown composition {kind!r}: choose from "
                     f"{', '.join(COMPOSITIONS)}")


def composition_scores(hm: HeadModel, kind: str, earlier_layer: int, later_layer: int,
                       fold_ln: bool = True) -> torch.Tensor:
    """``(n_heads, n_heads)``: entry ``[e, l]`` is the ``kind`` composition of head
    ``later_layer.l`` reading head ``earlier_layer.e``."""
    if not 0 <= earlier_layer < later_layer < hm.n_layers:
        raise ValueError(f"need 0 <= earlier_layer < later_layer < {hm.n_layers}, got {earlier_layer}, "
                         f"{later_layer}: a head only reads what the layers below it wrote")
    earlier = [head_weights(hm, earlier_layer, h, fold_ln) for h in range(hm.n_heads)]
    later = [head_weights(hm, later_layer, h, fold_ln) for h in range(hm.n_heads)]
    return torch.tensor([[composition(kind, e, l) for l in later] for e in earlier])


def random_composition_baseline(d_model: int, d_head: int, kind: str = "K", n: int = 200,
                                seed: int = 0) -> torch.Tensor:
    """``(n,)`` composition scores of pairs of heads with random weights.

    Every weight entry is i.i.d. standard normal, from ``torch.Generator().manual_seed(seed)``.
    """
    if kind not in COMPOSITIONS:
        raise ValueError(f"unknown composition {kind!r}: choose from "
                     f"{', '.join(COMPOSITIONS)}")
    if d_model < 1 or d_head < 1 or n < 1:
        raise ValueError(f"need d_model, d_head, n >= 1, got {d_model}, {d_head}, {n}")
    gen = torch.Generator().manual_seed(seed)

    def random_head() -> HeadWeights:
        shapes = [(d_model, d_head)] * 3 + [(d_head, d_model)]
        return HeadWeights(*(torch.randn(s, generator=gen) for s in shapes))

    return torch.tensor([composition(kind, random_head(), random_head()) for _ in range(n)])
