"""A model whose heads are known by construction: the detectors' known-answer test.

:func:`planted_model` builds a 2-layer, 2-heads-per-layer attention-only transformer, the
book's :class:`~headlab.models.gpt.GPT` with weights set by hand (no training), wrapped as a
``HeadModel``. The residual stream is split into four blocks of coordinates, so every head
reads and writes exactly one::

    [ token one-hot (d_vocab) | position one-hot (n_ctx) | previous token (d_vocab) | output (d_vocab) ]

* **0.0, previous-token head.** Query ``i`` and key ``j`` match when ``j = i - 1`` (from the
  position block). It copies the key's token one-hot into the *previous token* block, so
  afterwards position ``i`` also knows token ``i - 1``.
* **0.1, first-token head.** Every query matches key 0; it writes nothing (an attention
  pattern with no effect).
* **1.0, induction head.** Query ``i`` (its token ``t``) matches key ``j`` whose *previous
  token* is ``t``, i.e. the token right after an earlier ``t``; it copies that key's token
  into the *output* block, which the unembedding reads: it predicts what followed ``t``
  last time. Its OV circuit is a copy.
* **1.1, uniform head.** All scores are equal, so it attends uniformly. With ``orphan=0``
  it writes nothing (diffuse, no effect); with ``orphan=w > 0`` it adds ``w`` times the
  average token of the context to the output block (diffuse, yet it changes the output).

Position 0 has no previous token: there head 0.0 attends to position 0 itself, so position
0's *previous token* block holds its own token, and head 1.0 splits its attention between
key 0 and the right key when the query's token is the first token of the input (start
inputs with a token that does not recur, like a ``<bos>``, to avoid it).

Attention scores are ``sharpness`` where the query and key match and 0 elsewhere, so a
matching key gets weight about ``1 - (n - 1) e^-sharpness``.
"""

from __future__ import annotations

import math

import torch

from headlab.models.gpt import GPT, GPTConfig

__all__ = ["PlantedModel", "planted_model", "PREVIOUS_TOKEN_HEAD", "FIRST_TOKEN_HEAD", "INDUCTION_HEAD",
           "UNIFORM_HEAD"]

PREVIOUS_TOKEN_HEAD = (0, 0)
FIRST_TOKEN_HEAD = (0, 1)
INDUCTION_HEAD = (1, 0)
UNIFORM_HEAD = (1, 1)


class PlantedModel(GPT):
    """The book's :class:`~headlab.models.gpt.GPT` with the weights of the module docstring.

    An attention-only config with no LayerNorm: 2 layers of 2 heads, ``d_head = max(d_vocab,
    n_ctx)``, ``d_model = 3 d_vocab + n_ctx``; every weight and bias is zero except those the
    four heads need. Building it leaves the global random state untouched.

    Args:
        d_vocab: number of tokens (at least 2).
        n_ctx: longest input (at least 2).
        sharpness: attention score where a query and a key match (0 elsewhere).
        orphan: how much head 1.1 writes (0: nothing).
    """

    def __init__(self, d_vocab: int = 20, n_ctx: int = 48, sharpness: float = 20.0, orphan: float = 0.0):
        for name, n in (("d_vocab", d_vocab), ("n_ctx", n_ctx)):
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(f"{name} must be an int, got {n!r}")
            if n < 2:
                raise ValueError(f"need {name} >= 2, got {n}")
        for name, x in (("sharpness", sharpness), ("orphan", orphan)):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise ValueError(f"{name} must be a finite number, got {x!r}")
        config = GPTConfig(d_vocab=d_vocab, n_ctx=n_ctx, d_model=3 * d_vocab + n_ctx, n_layers=2, n_heads=2,
                           d_head=max(d_vocab, n_ctx), d_mlp=0, layer_norm=False)
        with torch.random.fork_rng(devices=[]):  # GPT's random init is overwritten below
            super().__init__(config)
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
            self._plant(sharpness, orphan)
        self.eval()

    def _plant(self, sharpness: float, orphan: float) -> None:
        V, N, D = self.config.d_vocab, self.config.n_ctx, self.config.d_head
        tok, pos, prev, out = 0, V, V + N, 2 * V + N  # where each block of the residual stream starts
        c = sharpness * math.sqrt(D)  # so that matching scores are `sharpness` after the 1/sqrt(d_head)
        self.embed.weight[:, tok:tok + V] = torch.eye(V)
        self.pos_embed.weight[:, pos:pos + N] = torch.eye(N)
        self.unembed.weight[:, out:out + V] = torch.eye(V)

        def head(layer: int, h: int):
            attn = self.blocks[layer].attn
            rows = slice(h * D, (h + 1) * D)
            return attn.W_Q.weight[rows], attn.W_K.weight[rows], attn.W_V.weight[rows], attn.W_O.weight[:, rows]

        # 0.0 previous token: q_i = c e_i, k_j = e_{j+1}; copies token -> previous-token block
        q, k, v, o = head(*PREVIOUS_TOKEN_HEAD)
        q[:N, pos:pos + N] = c * torch.eye(N)
        k[1:N, pos:pos + N - 1] = torch.eye(N - 1)
        v[:V, tok:tok + V] = torch.eye(V)
        o[prev:prev + V, :V] = torch.eye(V)
        # 0.1 first token: q_i = c e_0 for every i, k_0 = e_0; writes nothing
        q, k, _, _ = head(*FIRST_TOKEN_HEAD)
        q[0, pos:pos + N] = c
        k[0, pos] = 1.0
        # 1.0 induction: q = c * token, k = previous token; copies token -> output block
        q, k, v, o = head(*INDUCTION_HEAD)
        q[:V, tok:tok + V] = c * torch.eye(V)
        k[:V, prev:prev + V] = torch.eye(V)
        v[:V, tok:tok + V] = torch.eye(V)
        o[out:out + V, :V] = torch.eye(V)
        # 1.1 uniform: no query or key; optionally copies the mean token -> output block
        if orphan:
            _, _, v, o = head(*UNIFORM_HEAD)
            v[:V, tok:tok + V] = torch.eye(V)
            o[out:out + V, :V] = orphan * torch.eye(V)


def planted_model(d_vocab: int = 20, n_ctx: int = 48, sharpness: float = 20.0, orphan: float = 0.0):
    """A ``HeadModel`` (named ``"planted"``, no tokenizer) around a :class:`PlantedModel`, whose
    heads are, by construction, those listed in the module docstring."""
    from headlab.heads.model import HeadModel

    return HeadModel(PlantedModel(d_vocab, n_ctx, sharpness, orphan), tokenizer=None, name="planted")
