"""A model whose heads are known by construction: the detectors' known-answer test.

:func:`planted_model` builds a 2-layer, 2-heads-per-layer attention-only transformer by
setting its weights by hand (no training), wrapped as a ``HeadModel``. The residual stream
is split into four blocks of coordinates, so every head reads and writes exactly one:

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
from types import SimpleNamespace

import torch
from torch import nn

PREVIOUS_TOKEN_HEAD = (0, 0)
FIRST_TOKEN_HEAD = (0, 1)
INDUCTION_HEAD = (1, 0)
UNIFORM_HEAD = (1, 1)


class _Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        inner = n_heads * d_head
        self.W_Q = nn.Linear(d_model, inner, bias=False)
        self.W_K = nn.Linear(d_model, inner, bias=False)
        self.W_V = nn.Linear(d_model, inner, bias=False)
        self.W_O = nn.Linear(inner, d_model, bias=False)
        self.hook_pattern = nn.Identity()

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, pos, _ = x.shape
        return x.view(batch, pos, self.n_heads, self.d_head).transpose(1, 2)  # (batch, head, pos, d_head)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        batch, pos, _ = x.shape
        q, k, v = self._split(self.W_Q(x)), self._split(self.W_K(x)), self._split(self.W_V(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)  # (batch, head, q_pos, k_pos)
        causal = torch.ones(pos, pos, dtype=torch.bool, device=x.device).tril()
        allowed = causal[None, None] & key_mask[:, None, None, :]  # (batch, 1, q_pos, k_pos)
        pattern = self.hook_pattern(scores.masked_fill(~allowed, float("-inf")).softmax(-1))
        z = (pattern @ v).transpose(1, 2).reshape(batch, pos, self.n_heads * self.d_head)
        return self.W_O(z)  # (batch, pos, d_model)


class _Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_head: int):
        super().__init__()
        self.attn = _Attention(d_model, n_heads, d_head)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        return x + self.attn(x, key_mask)


class PlantedModel(nn.Module):
    """The hand-set attention-only transformer of :func:`planted_model` (logits out)."""

    def __init__(self, d_vocab: int, n_ctx: int):
        super().__init__()
        d_head = max(d_vocab, n_ctx)
        d_model = 3 * d_vocab + n_ctx
        self.config = SimpleNamespace(model_type="headlab", n_heads=2, d_head=d_head, n_layers=2,
                                      d_model=d_model, d_vocab=d_vocab, vocab_size=d_vocab, n_ctx=n_ctx)
        self.embed = nn.Embedding(d_vocab, d_model)
        self.pos_embed = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, 2, d_head) for _ in range(2))
        self.unembed = nn.Linear(d_model, d_vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        pos = input_ids.shape[1]
        if pos > self.config.n_ctx:
            raise ValueError(f"input of {pos} tokens exceeds n_ctx = {self.config.n_ctx}")
        key_mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        x = self.embed(input_ids) + self.pos_embed(torch.arange(pos, device=input_ids.device))
        for block in self.blocks:
            x = block(x, key_mask)
        return self.unembed(x)  # (batch, pos, d_vocab)


def planted_model(d_vocab: int = 20, n_ctx: int = 48, sharpness: float = 20.0, orphan: float = 0.0):
    """A ``HeadModel`` whose heads are, by construction, those listed in the module docstring."""
    from headlab.heads.model import HeadModel

    if d_vocab < 2 or n_ctx < 2:
        raise ValueError(f"need d_vocab >= 2 and n_ctx >= 2, got {d_vocab}, {n_ctx}")
    model = PlantedModel(d_vocab, n_ctx)
    V, N, D = d_vocab, n_ctx, model.config.d_head
    tok, pos, prev, out = 0, V, V + N, 2 * V + N  # where each block of the residual stream starts
    c = sharpness * math.sqrt(D)  # so that matching scores are `sharpness` after the 1/sqrt(d_head)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.weight[:, tok:tok + V] = torch.eye(V)
        model.pos_embed.weight[:, pos:pos + N] = torch.eye(N)
        model.unembed.weight[:, out:out + V] = torch.eye(V)

        def head(layer: int, h: int):
            attn = model.blocks[layer].attn
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
    return HeadModel(model.eval(), tokenizer=None, name="planted")
