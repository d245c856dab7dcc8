"""A minimal, readable GPT: headlab's own model, the architecture of the book's organisms.

A pre-LayerNorm decoder in the style of GPT-2 / nanoGPT, with learned positional
embeddings, an optional MLP and explicit attention (the pattern exists). Module names are
a contract used by the head interface::

    model.embed, model.pos_embed, model.blocks[l], model.ln_final, model.unembed
    block.ln1, block.attn, block.ln2, block.mlp (None when d_mlp == 0)
    block.attn.W_Q / W_K / W_V   nn.Linear(d_model, n_heads * d_head)
    block.attn.W_O               nn.Linear(n_heads * d_head, d_model); its input is z
    block.attn.hook_pattern      nn.Identity on the pattern (batch, head, q_pos, k_pos)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from headlab.metrics import next_token_loss
from headlab.models.witness import new_token, witness

__all__ = ["GPTConfig", "GPT", "Attention", "Block", "MLP"]


@dataclass
class GPTConfig:
    """Shape of a :class:`GPT`.

    ``d_head`` defaults to ``d_model // n_heads``; ``d_mlp`` to ``4 * d_model`` (0:
    attention-only). ``layer_norm=False`` replaces every LayerNorm by the identity.
    ``init_std`` defaults to ``0.8 / sqrt(d_model)`` (TransformerLens's width-aware 0.02).
    """

    d_vocab: int
    n_ctx: int
    d_model: int
    n_layers: int
    n_heads: int
    d_head: int | None = None
    d_mlp: int | None = None
    layer_norm: bool = True
    ln_eps: float = 1e-5
    init_std: float | None = None

    # Not a field: how headlab.heads.adapters recognises the book's own GPT.
    model_type: ClassVar[str] = "headlab"

    def __post_init__(self) -> None:
        for name in ("d_vocab", "n_ctx", "d_model", "n_layers", "n_heads", "d_head", "d_mlp"):
            value = getattr(self, name)
            if value is None and name in ("d_head", "d_mlp"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"GPTConfig.{name} must be an int, got {value!r}")
            if value < (0 if name == "d_mlp" else 1):
                raise ValueError(f"GPTConfig.{name} must be {'>= 0' if name == 'd_mlp' else 'a positive int'}, "
                                 f"got {value!r}")
        for name in ("ln_eps", "init_std"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"GPTConfig.{name} must be a positive finite number, got {value!r}")
        if not isinstance(self.layer_norm, bool):
            raise TypeError(f"GPTConfig.layer_norm must be True or False, got {self.layer_norm!r}")
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    "pass d_head explicitly")
            self.d_head = self.d_model // self.n_heads
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        if self.init_std is None:
            self.init_std = 0.8 / math.sqrt(self.d_model)
        if self.d_head < 1 or self.d_mlp < 0:
            raise ValueError(f"need d_head >= 1 and d_mlp >= 0, got d_head={self.d_head}, d_mlp={self.d_mlp}")

    @property
    def attn_only(self) -> bool:
        return self.d_mlp == 0

    @property
    def vocab_size(self) -> int:
        """``d_vocab`` under its Hugging Face name, for code written against HF configs."""
        return self.d_vocab

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown GPTConfig fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)


def _norm(config: GPTConfig) -> nn.Module:
    return nn.LayerNorm(config.d_model, eps=config.ln_eps) if config.layer_norm else nn.Identity()


class Attention(nn.Module):
    """Causal multi-head self-attention, computed explicitly so the pattern exists.

    ``attention_function``: None (the explicit computation), or a fused kernel
    ``f(module, q, k, v, key_mask) -> z (batch, head, q_pos, d_head)`` that computes no
    pattern (set by the adapter's ``fused_attention`` while :mod:`headlab.analysis.streaming` streams
    head statistics).
    """

    attention_function = None

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_heads, self.d_head = config.n_heads, config.d_head
        inner = config.n_heads * config.d_head
        self.W_Q = nn.Linear(config.d_model, inner)
        self.W_K = nn.Linear(config.d_model, inner)
        self.W_V = nn.Linear(config.d_model, inner)
        self.W_O = nn.Linear(inner, config.d_model)
        self.hook_pattern = nn.Identity()
        causal = torch.tril(torch.ones(config.n_ctx, config.n_ctx, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)  # (q_pos, k_pos)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, pos, _ = x.shape
        return x.view(batch, pos, self.n_heads, self.d_head).transpose(1, 2)  # (batch, head, pos, d_head)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (batch, pos, d_model); key_mask: (batch, pos) bool, True = real token."""
        batch, pos, _ = x.shape
        q = self._split(self.W_Q(x))  # (batch, head, q_pos, d_head)
        k = self._split(self.W_K(x))  # (batch, head, k_pos, d_head)
        v = self._split(self.W_V(x))  # (batch, head, k_pos, d_head)
        if self.attention_function is not None:  # a fused kernel: no pattern, no hook_pattern
            z = self.attention_function(self, q, k, v, key_mask)  # (batch, head, q_pos, d_head)
            return self.W_O(z.transpose(1, 2).reshape(batch, pos, self.n_heads * self.d_head))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)  # (batch, head, q_pos, k_pos)
        allowed = self.causal[:pos, :pos][None, None]  # (1, 1, q_pos, k_pos)
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]  # (batch, 1, q_pos, k_pos)
        # Key 0 is always real and always allowed, so no row is fully masked.
        scores = scores.masked_fill(~allowed, float("-inf"))
        pattern = self.hook_pattern(scores.softmax(dim=-1))  # (batch, head, q_pos, k_pos)
        z = pattern @ v  # (batch, head, q_pos, d_head)
        z = z.transpose(1, 2).reshape(batch, pos, self.n_heads * self.d_head)  # (batch, pos, head*d_head)
        return self.W_O(z)  # (batch, pos, d_model)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.W_in = nn.Linear(config.d_model, config.d_mlp)
        self.W_out = nn.Linear(config.d_mlp, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_out(nn.functional.gelu(self.W_in(x)))  # (batch, pos, d_mlp) -> (batch, pos, d_model)


class Block(nn.Module):
    """Pre-LayerNorm residual block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1 = _norm(config)
        self.attn = Attention(config)
        self.ln2 = _norm(config) if not config.attn_only else None
        self.mlp = MLP(config) if not config.attn_only else None

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), key_mask)  # (batch, pos, d_model)
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))  # (batch, pos, d_model)
        return x


def _check_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, n_ctx: int | None = None,
                  d_vocab: int | None = None) -> torch.Tensor | None:
    """Validate (batch, pos) token ids and a right-padded 0/1 mask; return the mask as bool or None."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a (batch, pos) tensor, got "
                         f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must be an integer tensor (int64), got {input_ids.dtype}")
    batch, pos = input_ids.shape
    if pos == 0:
        raise ValueError("input_ids has no positions (pos == 0); pass at least one token")
    if n_ctx is not None and pos > n_ctx:
        raise ValueError(f"sequence of {pos} tokens is longer than the model's n_ctx={n_ctx}; truncate it")
    if d_vocab is not None and input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= d_vocab):
        raise ValueError(f"token ids must lie in [0, {d_vocab}), got range "
                         f"[{int(input_ids.min())}, {int(input_ids.max())}]")
    if attention_mask is None:
        return None
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must contain only 0 (padding) and 1 (real token)")
    mask = attention_mask.bool()
    if not bool(mask[:, 0].all()):
        raise ValueError("every sequence must start with a real token (attention_mask[:, 0] == 1); "
                         "use right padding")
    if pos > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise ValueError("attention_mask is not right-padded (a 1 follows a 0); put the padding at the end")
    return mask


class GPT(nn.Module):
    """A minimal GPT. ``forward(input_ids, attention_mask=None) -> logits (batch, pos, d_vocab)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.d_vocab, config.d_model)  # W_E
        self.pos_embed = nn.Embedding(config.n_ctx, config.d_model)  # W_pos
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_final = _norm(config)
        self.unembed = nn.Linear(config.d_model, config.d_vocab)  # W_U, b_U
        self.apply(self._init_weights)
        self.witness_token = new_token()  # how this model's forwards report themselves (headlab.models.witness)
        # GPT-2: scale the projections that write to the residual stream by 1/sqrt(2 n_layers).
        for block in self.blocks:
            writers = [block.attn.W_O] + ([block.mlp.W_out] if block.mlp is not None else [])
            for layer in writers:
                nn.init.normal_(layer.weight, std=config.init_std / math.sqrt(2 * config.n_layers))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(batch, pos, d_vocab)``; ``attention_mask`` is (batch, pos), 1 = real, 0 = right padding."""
        key_mask = _check_inputs(input_ids, attention_mask, self.config.n_ctx, self.config.d_vocab)
        input_ids = witness(input_ids, self.witness_token)  # seen by the head interface, even when traced
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (pos,)
        x = self.embed(input_ids) + self.pos_embed(positions)  # (batch, pos, d_model)
        for block in self.blocks:
            x = block(x, key_mask)  # (batch, pos, d_model)
        return self.unembed(self.ln_final(x))  # (batch, pos, d_vocab)

    def loss(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Mean next-token cross-entropy over real targets (:func:`headlab.metrics.next_token_loss`)."""
        if input_ids.dim() != 2 or input_ids.shape[1] < 2:
            raise ValueError(f"the loss needs (batch, pos) token ids with pos >= 2, got {tuple(input_ids.shape)}")
        return next_token_loss(self(input_ids, attention_mask), input_ids, attention_mask, reduction="mean")

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
