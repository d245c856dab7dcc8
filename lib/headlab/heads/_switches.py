"""How a model's attention is switched, and switched back (private to :mod:`headlab.heads`).

Each function here is a context an :class:`~headlab.heads.adapters.Architecture` entry names: to
the eager attention whose pattern a capture reads, or to the fused kernel of
:mod:`headlab.kernels.hf_attention` that streams statistics. Each restores the model on exit,
whatever happens inside. Only :mod:`headlab.heads.adapters` uses them.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

from torch import nn

from headlab.kernels.hf_attention import ATTENTION_NAME, Session, register, session


@contextlib.contextmanager
def hf_eager(model: nn.Module):
    """Hugging Face's fast kernels (SDPA, flash) return no weights: switch to eager, then back."""
    old = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if old in (None, "eager"):
        yield
        return
    try:
        model.set_attn_implementation("eager")
        yield
    finally:
        model.set_attn_implementation(old)


@contextlib.contextmanager
def hf_fused(model: nn.Module, handler: Session):
    """Hugging Face models: the registered attention implementation, routed to ``handler``."""
    if not hasattr(model, "set_attn_implementation"):
        raise NotImplementedError(f"{type(model).__name__} is no Hugging Face model: give its Architecture a "
                                  "fused_attention that routes each attention call to the session")
    old = getattr(model.config, "_attn_implementation", None) or "eager"
    register()
    try:
        model.set_attn_implementation(ATTENTION_NAME)
        with session(handler):
            yield
    finally:
        model.set_attn_implementation(old)


@contextlib.contextmanager
def gpt_fused(model: nn.Module, handler: Session):
    """The book's GPT: each ``Attention.attention_function`` (causal, scale ``d_head ** -0.5``)."""
    modules = [block.attn for block in model.blocks]
    try:
        for m in modules:
            m.attention_function = lambda mod, q, k, v, mask: handler.attend(mod, q, k, v, mask, True, None)
        yield
    finally:
        for m in modules:
            vars(m).pop("attention_function", None)


def always_eager(model: nn.Module) -> ContextManager[None]:
    """The book's GPT always computes its pattern explicitly: nothing to switch."""
    return contextlib.nullcontext()
