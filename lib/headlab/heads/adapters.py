"""Architecture adapters: where each model family keeps its heads.

The head interface needs three things from a model, and every family stores
them somewhere else:

* the list of transformer blocks;
* the **output projection** ``W_O`` of each attention block, whose *input* is
  the concatenation of the per-head outputs ``z`` — ``(batch, pos, n_heads * d_head)``.
  This is the book's one access point to heads: a gate placed there removes a
  head's contribution exactly, while an intervention *after* ``W_O`` would mix
  all heads together;
* a place where the attention pattern ``(batch, head, q_pos, k_pos)`` can be
  read (Hugging Face attention modules return it as the second element of their
  output when the eager implementation runs; the book's own GPT passes it
  through an ``nn.Identity`` called ``hook_pattern``).

An :class:`Architecture` records those places for one family. Adding a family
is adding one entry to :data:`ARCHITECTURES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from torch import nn

__all__ = ["Architecture", "ARCHITECTURES", "architecture_of", "UnsupportedModelError"]


class UnsupportedModelError(ValueError):
    """The model's architecture has no adapter."""


@dataclass(frozen=True)
class Architecture:
    """Where one model family keeps its heads.

    Attributes:
        name: short name of the family.
        model_types: values of ``config.model_type`` this adapter serves.
        causal: whether the model is a causal (decoder-only) language model.
        blocks: model -> the sequence of transformer blocks.
        pattern_module: block -> the module whose forward output carries the pattern.
        pattern_index: which element of that module's output is the pattern
            (``None``: the output itself is the pattern).
        out_proj: block -> the attention output projection ``W_O``.
        conv1d: True when ``W_O``'s weight is stored ``(in, out)`` (GPT-2's Conv1D);
            False for ``nn.Linear``'s ``(out, in)``.
        n_heads, d_head: config -> the number of (query) heads and their width.
    """

    name: str
    model_types: tuple[str, ...]
    causal: bool
    blocks: Callable[[nn.Module], Sequence[nn.Module]]
    pattern_module: Callable[[nn.Module], nn.Module]
    pattern_index: int | None
    out_proj: Callable[[nn.Module], nn.Module]
    conv1d: bool
    n_heads: Callable[[object], int]
    d_head: Callable[[object], int]


def _base(model: nn.Module) -> nn.Module:
    """The bare transformer inside a task model (``GPT2LMHeadModel.transformer`` ...)."""
    return getattr(model, "base_model", model)


def _hf_d_head(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture(
        name="headlab",
        model_types=("headlab",),
        causal=True,
        blocks=lambda m: m.blocks,
        pattern_module=lambda b: b.attn.hook_pattern,
        pattern_index=None,
        out_proj=lambda b: b.attn.W_O,
        conv1d=False,
        n_heads=lambda c: c.n_heads,
        d_head=lambda c: c.d_head,
    ),
    Architecture(
        name="gpt2",
        model_types=("gpt2",),
        causal=True,
        blocks=lambda m: _base(m).h,
        pattern_module=lambda b: b.attn,
        pattern_index=1,
        out_proj=lambda b: b.attn.c_proj,
        conv1d=True,
        n_heads=lambda c: c.n_head,
        d_head=lambda c: c.n_embd // c.n_head,
    ),
    Architecture(
        name="bert",
        model_types=("bert",),
        causal=False,
        blocks=lambda m: _base(m).encoder.layer,
        pattern_module=lambda b: b.attention.self,
        pattern_index=1,
        out_proj=lambda b: b.attention.output.dense,
        conv1d=False,
        n_heads=lambda c: c.num_attention_heads,
        d_head=lambda c: c.hidden_size // c.num_attention_heads,
    ),
    Architecture(
        name="gpt_neox",
        model_types=("gpt_neox",),
        causal=True,
        blocks=lambda m: _base(m).layers,
        pattern_module=lambda b: b.attention,
        pattern_index=1,
        out_proj=lambda b: b.attention.dense,
        conv1d=False,
        n_heads=lambda c: c.num_attention_heads,
        d_head=_hf_d_head,
    ),
    Architecture(
        # Llama-style attention, grouped-query attention included: the pattern
        # and z have one slice per *query* head; keys/values are shared in groups.
        name="llama",
        model_types=("llama", "mistral", "qwen2"),
        causal=True,
        blocks=lambda m: _base(m).layers,
        pattern_module=lambda b: b.self_attn,
        pattern_index=1,
        out_proj=lambda b: b.self_attn.o_proj,
        conv1d=False,
        n_heads=lambda c: c.num_attention_heads,
        d_head=_hf_d_head,
    ),
)


def supported_model_types() -> list[str]:
    return sorted(t for a in ARCHITECTURES for t in a.model_types)


def architecture_of(model: nn.Module) -> Architecture:
    """The adapter for ``model`` (looked up by ``model.config.model_type``)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    for arch in ARCHITECTURES:
        if model_type in arch.model_types:
            return arch
    raise UnsupportedModelError(
        f"no head adapter for model type {model_type!r} ({type(model).__name__}). "
        f"Supported model types: {', '.join(supported_model_types())}. "
        "To add one, describe where its blocks, attention pattern and output projection "
        "live in headlab.heads.adapters.ARCHITECTURES."
    )
