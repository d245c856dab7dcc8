"""Architecture adapters: where each model family keeps its heads.

The head interface needs these things from a model, and every family stores them
somewhere else:

* the list of transformer blocks;
* the **output projection** ``W_O`` of each attention block, whose *input* is the
  concatenation of the per-head outputs ``z``, ``(batch, pos, n_heads * d_head)``. This is
  the book's one access point to heads: a gate placed there removes a head's contribution
  exactly, while an intervention *after* ``W_O`` would mix all heads together;
* the **query, key and value projections** of each attention block (fused or not, with or
  without biases, with fewer key/value heads than query heads under grouped-query attention)
  and the **norm** the attention reads its input through;
* a place where the attention pattern ``(batch, head, q_pos, k_pos)`` can be read (Hugging
  Face attention modules return it as the second element of their output when the eager
  implementation runs; the book's own GPT passes it through an ``nn.Identity`` called
  ``hook_pattern``), and how to make the model compute it;
* how to call the model, how to make it run a fused attention kernel, and how its norms and
  final logits are computed (read as one :class:`~headlab.heads.readout.Readout`).

An :class:`Architecture` records those places for one family. Adding a family is adding one
entry to ``ARCHITECTURES`` (or passing one to :func:`register_architecture`, for a model of
one's own): nothing outside this module asks which family a model is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, ContextManager, NamedTuple, Sequence

import torch
from torch import nn

from headlab.heads._switches import always_eager, gpt_fused, hf_eager, hf_fused
from headlab.kernels.hf_attention import Session

__all__ = ["Architecture", "ARCHITECTURES", "QKV", "architecture_of", "supported_model_types",
           "UnsupportedModelError", "register_architecture"]


class UnsupportedModelError(ValueError):
    """The model's architecture has no adapter."""


class QKV(NamedTuple):
    """One layer's query, key and value projections in the row-vector convention.

    ``q = x @ W_Q + b_Q`` for a row ``x`` of ``d_model`` numbers (the output of the attention's
    input norm), and likewise for ``k`` and ``v``. Columns are head-major: head ``h`` owns
    columns ``h * d_head`` to ``(h + 1) * d_head``. Queries and keys are taken *before* any
    rotary position embedding. Shapes: ``W_Q`` ``(d_model, n_heads * d_head)``; ``W_K`` and
    ``W_V`` ``(d_model, n_kv_heads * d_head)``; ``b_Q`` ``(n_heads * d_head,)``, ``b_K`` and
    ``b_V`` ``(n_kv_heads * d_head,)``, each ``None`` where the family has no bias.
    """

    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    b_Q: torch.Tensor | None
    b_K: torch.Tensor | None
    b_V: torch.Tensor | None


@dataclass(frozen=True)
class Architecture:
    """Where one model family keeps its heads.

    Attributes:
        name: short name of the family (shown to readers; no code branches on it).
        model_types: values of ``config.model_type`` this adapter serves.
        causal: whether the model is a causal (decoder-only) language model.
        blocks: model -> the sequence of transformer blocks.
        pattern_module: block -> the module whose forward output carries the pattern.
        pattern_index: which element of that module's output is the pattern (``None``: the
            output itself is the pattern).
        pattern_replaceable: whether a forward hook on ``pattern_module`` that returns a new
            pattern changes what weighs the values (true only where the pattern passes through
            a module of its own before it is used).
        out_proj: block -> the attention output projection ``W_O``.
        conv1d: True when ``W_O``'s weight is stored ``(in, out)`` (GPT-2's Conv1D); False for
            ``nn.Linear``'s ``(out, in)``.
        qkv: block -> its :class:`QKV`, the query, key and value projections.
        attn_norm: block -> the norm applied to the residual stream before the attention reads
            it, or ``None`` where the attention reads the residual stream directly (post-norm
            families such as BERT normalise *after* each sublayer, so the stream a head reads is
            already normalised).
        norm_centres: True for a LayerNorm (subtracts the mean, then scales by ``gamma``), False
            for an RMSNorm (scales by ``gamma`` only) or no norm.
        rotary: True when queries and keys are rotated by position after ``W_Q`` and ``W_K``
            (so ``W_Q W_K^T`` alone does not give the attention scores).
        n_heads: config -> the number of query heads.
        n_kv_heads: config -> the number of key/value heads (fewer under grouped-query attention).
        d_head: config -> the width of a head.
        run: ``(model, input_ids, attention_mask)`` -> logits ``(batch, pos, d_vocab)`` for a
            causal LM, last hidden states ``(batch, pos, d_model)`` for an encoder.
        eager_attention: model -> a context inside which the model computes and returns its
            attention patterns, the model's attention implementation restored on exit.
        max_positions: config -> the longest input the model takes (its position embeddings or
            context), or ``None`` where it states none.
        vocab_size: config -> the number of token ids it embeds.
        reports_forwards: True when every forward of the model reports itself through
            ``headlab.models.witness`` (the book's own GPT), so that a forward that skipped
            the head interface's hooks (traced or copied before a block) is caught.
        final_norm: model -> the norm applied to the last block's output before the
            unembedding, or ``None`` where there is none.
        unembed: model -> the linear map from the residual stream to the logits, or ``None``
            (an encoder, or a bare transformer without its language-model head).
        norm_gain: norm module -> the gain it multiplies by (``weight``; Gemma's ``1 + weight``).
        norm_eps: norm module -> the ``eps`` it adds to the mean square.
        logit_softcap: config -> the final logits' soft-cap ``c`` (``c * tanh(logits / c)``) or ``None``.
        attn_out_norm: block -> the norm applied to the attention's output before it joins the
            residual stream (Gemma-2/3 and OLMo-2), or ``None``: then a head's write is ``z @ W_O``
            only up to that norm.
        fused_attention: ``(model, session)`` -> a context inside which every attention layer
            calls ``session.attend`` (``headlab.kernels.hf_attention``) instead of computing a
            pattern; the model is restored on exit, whatever happens.
    """

    name: str
    model_types: tuple[str, ...]
    causal: bool
    blocks: Callable[[nn.Module], Sequence[nn.Module]]
    pattern_module: Callable[[nn.Module], nn.Module]
    pattern_index: int | None
    pattern_replaceable: bool
    out_proj: Callable[[nn.Module], nn.Module]
    conv1d: bool
    qkv: Callable[[nn.Module], QKV]
    attn_norm: Callable[[nn.Module], nn.Module | None]
    norm_centres: bool
    rotary: bool
    n_heads: Callable[[object], int]
    n_kv_heads: Callable[[object], int]
    d_head: Callable[[object], int]
    run: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    eager_attention: Callable[[nn.Module], ContextManager[None]]
    max_positions: Callable[[object], int | None] = lambda c: getattr(c, "max_position_embeddings", None)
    vocab_size: Callable[[object], int] = lambda c: c.vocab_size
    reports_forwards: bool = False
    final_norm: Callable[[nn.Module], nn.Module | None] = lambda m: None
    unembed: Callable[[nn.Module], nn.Module | None] = lambda m: None
    norm_gain: Callable[[nn.Module], torch.Tensor | None] = lambda n: getattr(n, "weight", None)
    norm_eps: Callable[[nn.Module], float] = lambda n: n.eps if hasattr(n, "eps") else n.variance_epsilon
    logit_softcap: Callable[[object], float | None] = lambda c: None
    attn_out_norm: Callable[[nn.Module], nn.Module | None] = lambda b: None
    fused_attention: Callable[[nn.Module, Session], ContextManager[None]] = lambda m, s: hf_fused(m, s)


# ------------------------------------------------------------------------- shared pieces


def _base(model: nn.Module) -> nn.Module:
    """The bare transformer inside a task model (``GPT2LMHeadModel.transformer`` ...)."""
    return getattr(model, "base_model", model)


def _hf_d_head(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _hf_n_kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def _rows(linear: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """An ``nn.Linear``'s weight as ``(in, out)`` (so that ``x @ W``) and its bias."""
    return linear.weight.T, linear.bias


def _separate(q: nn.Module, k: nn.Module, v: nn.Module) -> QKV:
    (W_Q, b_Q), (W_K, b_K), (W_V, b_V) = _rows(q), _rows(k), _rows(v)
    return QKV(W_Q, W_K, W_V, b_Q, b_K, b_V)


def _gpt2_qkv(block: nn.Module) -> QKV:
    # Conv1D c_attn: x @ weight (d_model, 3 * d_model) + bias, split into q | k | v along the output
    attn = block.attn
    W_Q, W_K, W_V = attn.c_attn.weight.split(attn.split_size, dim=1)
    b_Q, b_K, b_V = attn.c_attn.bias.split(attn.split_size, dim=0)
    return QKV(W_Q, W_K, W_V, b_Q, b_K, b_V)


def _neox_qkv(block: nn.Module) -> QKV:
    # Fused query_key_value: its output is viewed as (..., n_heads, 3 * head_size) and each
    # head's slice chunked into q | k | v (transformers' GPTNeoXAttention.forward): the three
    # are interleaved per head, not stacked.
    attn = block.attention
    d_head = attn.head_size
    w, b = attn.query_key_value.weight, attn.query_key_value.bias  # (3 * n * d_head, d_model)
    n = w.shape[0] // (3 * d_head)
    w = w.reshape(n, 3, d_head, w.shape[1])  # (head, q|k|v, d_head, d_model)
    W_Q, W_K, W_V = (w[:, i].reshape(n * d_head, -1).T for i in range(3))
    if b is None:
        return QKV(W_Q, W_K, W_V, None, None, None)
    b = b.reshape(n, 3, d_head)
    b_Q, b_K, b_V = (b[:, i].reshape(-1) for i in range(3))
    return QKV(W_Q, W_K, W_V, b_Q, b_K, b_V)


def _stacked_qkv(block: nn.Module) -> QKV:
    # Phi-3's qkv_proj: its output is q | k | v stacked, n_heads then twice n_kv_heads heads of d_head.
    attn = block.self_attn
    n_q, w, b = attn.config.num_attention_heads * attn.head_dim, attn.qkv_proj.weight, attn.qkv_proj.bias
    sizes = [n_q, (w.shape[0] - n_q) // 2, (w.shape[0] - n_q) // 2]
    W_Q, W_K, W_V = (x.T for x in w.split(sizes))
    b_Q, b_K, b_V = b.split(sizes) if b is not None else (None, None, None)
    return QKV(W_Q, W_K, W_V, b_Q, b_K, b_V)


def _hf_run_causal(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _hf_run_encoder(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def _headlab_norm(block: nn.Module) -> nn.Module | None:
    return None if isinstance(block.ln1, nn.Identity) else block.ln1


# ------------------------------------------------------------------------------ the families


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture(
        name="headlab",
        model_types=("headlab",),
        causal=True,
        blocks=lambda m: m.blocks,
        pattern_module=lambda b: b.attn.hook_pattern,
        pattern_index=None,
        pattern_replaceable=True,
        out_proj=lambda b: b.attn.W_O,
        conv1d=False,
        qkv=lambda b: _separate(b.attn.W_Q, b.attn.W_K, b.attn.W_V),
        attn_norm=_headlab_norm,
        norm_centres=True,
        rotary=False,
        n_heads=lambda c: c.n_heads,
        n_kv_heads=lambda c: c.n_heads,
        d_head=lambda c: c.d_head,
        run=lambda m, ids, mask: m(ids, attention_mask=mask),
        eager_attention=always_eager,
        max_positions=lambda c: c.n_ctx,
        vocab_size=lambda c: c.d_vocab,
        reports_forwards=True,
        final_norm=lambda m: None if isinstance(m.ln_final, nn.Identity) else m.ln_final,
        unembed=lambda m: m.unembed,
        fused_attention=gpt_fused,
    ),
    Architecture(
        name="gpt2",
        model_types=("gpt2",),
        causal=True,
        blocks=lambda m: _base(m).h,
        pattern_module=lambda b: b.attn,
        pattern_index=1,
        pattern_replaceable=False,
        out_proj=lambda b: b.attn.c_proj,
        conv1d=True,
        qkv=_gpt2_qkv,
        attn_norm=lambda b: b.ln_1,
        norm_centres=True,
        rotary=False,
        n_heads=lambda c: c.n_head,
        n_kv_heads=lambda c: c.n_head,
        d_head=lambda c: c.n_embd // c.n_head,
        run=_hf_run_causal,
        eager_attention=hf_eager,
        max_positions=lambda c: c.n_positions,
        final_norm=lambda m: _base(m).ln_f,
        unembed=lambda m: getattr(m, "lm_head", None),
    ),
    Architecture(
        name="bert",
        model_types=("bert",),
        causal=False,
        blocks=lambda m: _base(m).encoder.layer,
        pattern_module=lambda b: b.attention.self,
        pattern_index=1,
        pattern_replaceable=False,
        out_proj=lambda b: b.attention.output.dense,
        conv1d=False,
        qkv=lambda b: _separate(b.attention.self.query, b.attention.self.key, b.attention.self.value),
        attn_norm=lambda b: None,  # post-norm: the stream a head reads is already normalised
        norm_centres=False,
        rotary=False,
        n_heads=lambda c: c.num_attention_heads,
        n_kv_heads=lambda c: c.num_attention_heads,
        d_head=lambda c: c.hidden_size // c.num_attention_heads,
        run=_hf_run_encoder,
        eager_attention=hf_eager,
    ),
    Architecture(
        name="gpt_neox",
        model_types=("gpt_neox",),
        causal=True,
        blocks=lambda m: _base(m).layers,
        pattern_module=lambda b: b.attention,
        pattern_index=1,
        pattern_replaceable=False,
        out_proj=lambda b: b.attention.dense,
        conv1d=False,
        qkv=_neox_qkv,
        attn_norm=lambda b: b.input_layernorm,
        norm_centres=True,
        rotary=True,
        n_heads=lambda c: c.num_attention_heads,
        n_kv_heads=lambda c: c.num_attention_heads,
        d_head=_hf_d_head,
        run=_hf_run_causal,
        eager_attention=hf_eager,
        final_norm=lambda m: _base(m).final_layer_norm,
        unembed=lambda m: getattr(m, "lm_head", None) or getattr(m, "embed_out", None),
    ),
    _LLAMA := Architecture(
        # Llama-style attention, grouped-query attention included: the pattern and z have one
        # slice per *query* head; keys/values are shared in groups of n_heads // n_kv_heads.
        # Qwen3 adds RMSNorms on each head's query and key, inside the attention (after W_Q, W_K).
        name="llama",
        model_types=("llama", "mistral", "qwen2", "qwen3"),
        causal=True,
        blocks=lambda m: _base(m).layers,
        pattern_module=lambda b: b.self_attn,
        pattern_index=1,
        pattern_replaceable=False,
        out_proj=lambda b: b.self_attn.o_proj,
        conv1d=False,
        qkv=lambda b: _separate(b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj),
        attn_norm=lambda b: b.input_layernorm,  # an RMSNorm
        norm_centres=False,
        rotary=True,
        n_heads=lambda c: c.num_attention_heads,
        n_kv_heads=_hf_n_kv_heads,
        d_head=_hf_d_head,
        run=_hf_run_causal,
        eager_attention=hf_eager,
        final_norm=lambda m: _base(m).norm,
        unembed=lambda m: getattr(m, "lm_head", None),
    ),
    # Gemma-2/3: Llama's layout, RMSNorms whose gain is 1 + weight, a norm on the attention's output,
    # the final logits soft-capped (Gemma-2). Sliding-window layers, the attention-logit soft-cap
    # (Gemma-2) and q/k RMSNorms (Gemma-3) live inside the attention, so the eager pattern has them.
    replace(_LLAMA, name="gemma", model_types=("gemma2", "gemma3_text"), norm_gain=lambda n: 1.0 + n.weight,
            logit_softcap=lambda c: getattr(c, "final_logit_softcapping", None),
            attn_out_norm=lambda b: b.post_attention_layernorm),
    # OLMo-2: no norm before the attention, one on its output; q and k RMS-normalised over all heads.
    replace(_LLAMA, name="olmo2", model_types=("olmo2",), attn_norm=lambda b: None,
            attn_out_norm=lambda b: b.post_attention_layernorm),
    replace(_LLAMA, name="phi3", model_types=("phi3",), qkv=_stacked_qkv),  # one fused qkv_proj
)

_REGISTRY: list[Architecture] = list(ARCHITECTURES)


def register_architecture(arch: Architecture) -> Callable[[], None]:
    """Serve ``arch.model_types`` with ``arch`` (a family of one's own); returns the function that
    removes it again.

    Raises:
        TypeError: ``arch`` is not an :class:`Architecture`.
        ValueError: one of its model types is served already (naming the type and its family).
    """
    if not isinstance(arch, Architecture):
        raise TypeError(f"register_architecture needs an Architecture, got {type(arch).__name__}")
    for other in _REGISTRY:
        clash = set(arch.model_types) & set(other.model_types)
        if clash:
            raise ValueError(f"model type(s) {sorted(clash)} are served by the {other.name!r} adapter already: "
                             "give the new Architecture model_types of its own")
    _REGISTRY.append(arch)
    return lambda: _REGISTRY.remove(arch) if arch in _REGISTRY else None


def supported_model_types() -> list[str]:
    """Every ``config.model_type`` some adapter serves, sorted."""
    return sorted(t for a in _REGISTRY for t in a.model_types)


def architecture_of(model: nn.Module) -> Architecture:
    """The adapter for ``model`` (looked up by ``model.config.model_type``)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    for arch in _REGISTRY:
        if model_type in arch.model_types:
            return arch
    raise UnsupportedModelError(
        f"no head adapter for model type {model_type!r} ({type(model).__name__}). "
        f"Supported model types: {', '.join(supported_model_types())}. "
        "To add one, describe where its blocks, attention pattern, query/key/value and output "
        "projections live in an Architecture and pass it to headlab.heads.adapters.register_architecture."
    )
