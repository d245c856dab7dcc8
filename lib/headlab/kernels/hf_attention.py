"""The fused kernel as an attention implementation of Hugging Face transformers 5.

:func:`register` adds :data:`ATTENTION_NAME` to ``AttentionInterface`` and
``AttentionMaskInterface``, so any supported model runs
:func:`~headlab.kernels.streaming.fused_attention` without a patch::

    from headlab.kernels.hf_attention import ATTENTION_NAME, register
    register()
    model.set_attn_implementation(ATTENTION_NAME)

The mask builder passes the ``(batch, n)`` key-padding mask, not an ``n x n`` matrix;
causality comes from the module's ``is_causal``. Sliding windows, packed sequences, custom
masks and a key/value cache are refused. While :func:`session` is open, each call goes to
the session object (how ``headlab.analysis.streaming`` records statistics; a model family
installs the kernel through its ``Architecture.fused_attention``).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator, Protocol

import torch

from headlab.kernels.streaming import fused_attention

#: The name under which the kernel is registered in transformers.
ATTENTION_NAME = "headlab_fused"


class Session(Protocol):
    """What :func:`session` installs: called for every attention call of every layer."""

    def attend(self, module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               key_mask: torch.Tensor | None, causal: bool, scale: float | None) -> torch.Tensor:
        """Return ``out`` ``(batch, head, n, d)`` for the layer whose attention module is ``module``."""
        ...  # pragma: no cover - a protocol


_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar("headlab_attention_session", default=None)


@contextlib.contextmanager
def session(handler: Session) -> Iterator[Session]:
    """Inside the block, every call of the registered attention goes to ``handler.attend``."""
    token = _SESSION.set(handler)
    try:
        yield handler
    finally:
        _SESSION.reset(token)


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """The ``AttentionInterface`` function: q ``(batch, head, n, d)``, k/v ``(batch, kv_head, n, d)``.

    Returns ``(out (batch, n, head, d), None)`` like transformers' SDPA function: no weights.
    """
    for name in ("sliding_window", "softcap", "position_bias", "sinks", "s_aux"):
        if kwargs.get(name) is not None:
            raise NotImplementedError(f"{ATTENTION_NAME} does not support {name}; use 'eager' or 'sdpa' for this model")
    if dropout and module.training:
        raise NotImplementedError(f"{ATTENTION_NAME} has no attention dropout: call model.eval() first")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(f"{ATTENTION_NAME} expects the (batch, n) key-padding mask of its own mask builder, got "
                         f"shape {tuple(attention_mask.shape)}: was the model switched with set_attn_implementation?")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    key_mask = None if attention_mask is None else attention_mask.bool()
    handler = _SESSION.get()
    if handler is not None:
        out = handler.attend(module, query, key, value, key_mask, causal, scaling)
    else:
        out, _ = fused_attention(query, key, value, causal=causal, key_mask=key_mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def key_padding_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0,
                     mask_function=None, attention_mask: torch.Tensor | None = None,
                     **kwargs) -> torch.Tensor | None:
    """The ``AttentionMaskInterface`` builder: the ``(batch, kv_length)`` bool padding mask, or None."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    if mask_function not in (causal_mask_function, bidirectional_mask_function):
        raise NotImplementedError(
            f"{ATTENTION_NAME} supports plain causal or bidirectional masks with key padding; this model asks for "
            f"{getattr(mask_function, '__name__', mask_function)!r} (a sliding window, packed sequences or a custom "
            "mask): use 'eager' or 'sdpa' for it")
    if int(q_offset) or int(kv_offset) or q_length != kv_length:
        raise NotImplementedError(f"{ATTENTION_NAME} runs whole sequences (no key/value cache): pass use_cache=False")
    if attention_mask is None:
        return None
    mask = attention_mask.to(torch.bool)
    if tuple(mask.shape) != (batch_size, kv_length):
        raise ValueError(f"expected a (batch, n) = {(batch_size, kv_length)} padding mask, got {tuple(mask.shape)}")
    return None if bool(mask.all()) else mask


def register() -> str:
    """Register the kernel and its mask builder with transformers (idempotent); returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION_NAME, attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, key_padding_mask)
    return ATTENTION_NAME
