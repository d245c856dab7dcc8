"""Copying heads: does what a head writes raise the logit of the token it reads?

Both measures read the write through an unembedding ``W_U``; encoders raise
:class:`NotApplicable`. :func:`ov_copying_score` feeds each token alone (position 0, where a
causal head attends only to itself, so its write is its OV circuit on ``t``);
:func:`dla_copying_score` is the direct logit attribution to the most-attended key's token,
in context. ``logits(r) = (gamma * centre(r)) @ W_U``, ``gamma`` the final norm's scale
(centring for a LayerNorm only); the norm's division and the unembedding bias are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from headlab.analysis.detect.base import check_pattern, check_positions, mean_over


class NotApplicable(ValueError):
    """The measure is not defined for this model (e.g. copying for an encoder with no LM head)."""


@dataclass
class Unembed:
    """How a head's write becomes logits: ``logits = prepare(r) @ W_U``.

    ``W_U``: ``(d_model, d_vocab)``; ``gamma``: ``(d_model,)`` or None; ``center``: subtract
    the mean over ``d_model`` first (LayerNorm).
    """

    W_U: torch.Tensor
    gamma: torch.Tensor | None
    center: bool

    def prepare(self, r: torch.Tensor) -> torch.Tensor:
        r = r.to(self.W_U.dtype)
        if self.center:
            r = r - r.mean(-1, keepdim=True)
        return r if self.gamma is None else r * self.gamma

    def logits(self, r: torch.Tensor) -> torch.Tensor:
        """``(..., d_model) -> (..., d_vocab)``."""
        return self.prepare(r) @ self.W_U


def unembedding(hm) -> Unembed:
    """The unembedding of a causal language model, with its final norm's scale.

    Raises :class:`NotApplicable` for encoders and models with no unembedding.
    """
    if not hm.causal:
        raise NotApplicable(f"{hm.name} is an encoder with no language-model head: copying is defined "
                            "through the logits of an unembedding, which it does not have")
    model = hm.model
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = head if head is not None else getattr(model, "unembed", None)
    weight = getattr(head, "weight", None)
    if weight is None:
        raise NotApplicable(f"{hm.name} exposes no unembedding (get_output_embeddings() or .unembed)")
    W_U = weight.detach().float().T  # (d_model, d_vocab)
    if W_U.shape[0] != hm.d_model:
        raise NotApplicable(f"{hm.name}'s unembedding has shape {tuple(weight.shape)}, which does not read "
                            f"d_model = {hm.d_model}")
    norm = _final_norm(model)
    gamma = getattr(norm, "weight", None) if norm is not None else None
    gamma = None if gamma is None else gamma.detach().float()
    return Unembed(W_U, gamma, isinstance(norm, nn.LayerNorm))


def _final_norm(model: nn.Module) -> nn.Module | None:
    base = getattr(model, "base_model", model)
    for owner in (base, model):
        for name in ("ln_f", "final_layer_norm", "norm", "ln_final"):
            module = getattr(owner, name, None)
            if isinstance(module, nn.Module):
                return module
    return None


def _special_ids(hm) -> set[int]:
    tok = hm.tokenizer
    return set(getattr(tok, "all_special_ids", []) or []) if tok is not None else set()


def ov_copying_score(hm, tokens: torch.Tensor | None = None, k: int = 5, max_tokens: int = 2048,
                     seed: int = 0) -> torch.Tensor:
    """OV copying score ``(n_layers, n_heads)``, in [0, 1].

    The fraction of tokens ``t`` fed alone whose own logit is among the ``k`` largest of the
    head's write; ties count against ``t`` (a head that writes nothing scores 0).

    ``tokens``: the ids to test; default every non-special id, at most ``max_tokens`` drawn
    with ``seed``.
    """
    unembed = unembedding(hm)
    d_vocab = unembed.W_U.shape[1]
    if not isinstance(k, int) or not 1 <= k < d_vocab:
        raise ValueError(f"k must be an int in 1..{d_vocab - 1}, got {k!r}")
    if tokens is None:
        n_ids = min(d_vocab, len(hm.tokenizer)) if hm.tokenizer is not None else d_vocab
        special = _special_ids(hm)
        ids = torch.tensor([i for i in range(n_ids) if i not in special], dtype=torch.long)
        if len(ids) > max_tokens:
            gen = torch.Generator().manual_seed(seed)
            ids = ids[torch.randperm(len(ids), generator=gen)[:max_tokens]].sort().values
    else:
        ids = torch.as_tensor(tokens, dtype=torch.long).flatten()
        if len(ids) == 0 or bool(((ids < 0) | (ids >= d_vocab)).any()):
            raise ValueError(f"tokens must be a non-empty set of ids in 0..{d_vocab - 1}")
    hits = torch.zeros(hm.n_layers, hm.n_heads)
    chunk = max(1, min(512, 2 ** 24 // (hm.n_heads * d_vocab)))  # bounds the (chunk, head, d_vocab) logits
    for start in range(0, len(ids), chunk):
        t = ids[start:start + chunk]
        one = t[:, None].to(hm.device)  # (n, 1): every token alone at position 0
        _, cache = hm.run_with_cache({"input_ids": one, "attention_mask": torch.ones_like(one)}, names=("z",))
        for layer in range(hm.n_layers):
            r = cache.result(layer)[:, 0].float().cpu()  # (n, head, d_model)
            logits = unembed.logits(r)  # (n, head, d_vocab)
            own = logits.gather(-1, t[:, None, None].expand(-1, hm.n_heads, 1))  # (n, head, 1)
            rank = (logits >= own).sum(-1) - 1  # (n, head): other tokens at least as large
            hits[layer] += (rank < k).sum(0)
    return hits / len(ids)


def dla_copying_score(pattern: torch.Tensor, result: torch.Tensor, tokens: torch.Tensor, unembed: Unembed,
                      attention_mask: torch.Tensor | None = None, on_empty: str = "raise") -> torch.Tensor:
    """Direct-logit copying score ``(batch, head)``, in logits (see the module docstring).

    ``result`` ``(batch, pos, head, d_model)`` is ``cache.result(layer)``. Per real query ``i``,
    with ``t* = tokens[argmax_j pattern[i, j]]``: ``logits(result[i])[t*] - mean_v
    logits(result[i])[v]``, averaged over real queries. Negative: the head suppresses ``t*``.
    """
    real = check_pattern(pattern, attention_mask)
    tokens = check_positions("tokens", tokens, real).long()
    if result.dim() != 4 or tuple(result.shape[:3]) != (pattern.shape[0], pattern.shape[2], pattern.shape[1]):
        raise ValueError(f"result must be (batch, pos, head, d_model) matching the pattern, got {tuple(result.shape)}")
    neg_inf = torch.tensor(float("-inf"), dtype=pattern.dtype, device=pattern.device)
    attended = torch.where(real[:, None, None, :], pattern, neg_inf).argmax(-1)  # (batch, head, q_pos)
    t_star = tokens.gather(1, attended.flatten(1)).view_as(attended)  # (batch, head, q_pos)
    W_U = unembed.W_U.to(result.device)
    r = unembed.prepare(result.float()).transpose(1, 2)  # (batch, head, q_pos, d_model)
    columns = W_U.T[t_star]  # (batch, head, q_pos, d_model)
    logit = (r * columns).sum(-1)  # (batch, head, q_pos)
    mean_logit = r @ W_U.mean(1)  # (batch, head, q_pos)
    return mean_over(logit - mean_logit, real, on_empty, "real query position")
