"""Copying heads: does what a head writes raise the logit of the token it reads?

A pattern says *where* a head looks; copying is about *what it writes*, so both measures
go through the logits and exist only for models with a language-model head (an
unembedding ``W_U``). For an encoder such as MiniLM they raise :class:`NotApplicable`
with the reason, instead of returning a number that would mean nothing.

Two measures:

* :func:`ov_copying_score`, from the OV circuit: feed each token ``t`` alone, as a one-token
  input. At position 0 a causal head can only attend to itself, so its write is exactly its
  OV circuit applied to the residual stream of ``t`` at that layer (at layer 0 that is
  ``LN(W_E[t] + W_pos[0]) W_V^h W_O^h``; deeper, the same with the earlier layers' work on
  ``t`` included). Read that write through the unembedding and ask whether ``t``'s own
  logit is among the top ``k``. The score is the fraction of tokens for which it is.
* :func:`dla_copying_score`, measured in context: at each query, take the key the head
  attends to most and its token ``t*``; the head's write at the query, read through the
  unembedding, gives ``t*`` a logit; the score is that logit minus the mean logit over the
  vocabulary (its direct logit attribution to ``t*``, relative to an average token), in
  logits, averaged over real queries. Positive: the head copies what it reads; negative:
  it suppresses it.

Reading through the unembedding: ``logits(r) = (gamma * centre(r)) @ W_U``, where ``gamma``
is the final norm's scale (LayerNorm: also subtract the mean over ``d_model``; RMSNorm: no
centring; no final norm: neither). The final norm's division by the residual stream's size
is a positive number per position, shared by every head and token, so it is left out: it
changes no ranking and no sign. The unembedding's bias, the same for every head, is left out.
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

    The fraction of tokens ``t`` whose own logit is among the ``k`` largest logits of the
    head's write when ``t`` is fed alone (see the module docstring). Ties count against
    ``t``: its rank is the number of *other* tokens with a logit at least as large, and it
    is in the top ``k`` when that number is below ``k`` (so a head that writes nothing, with
    all logits equal, scores 0).

    ``tokens``: the token ids to test; default every non-special id when the vocabulary has
    at most ``max_tokens`` of them, else ``max_tokens`` of them drawn at random with ``seed``.
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

    ``pattern`` ``(batch, head, q_pos, k_pos)`` and ``result`` ``(batch, pos, head, d_model)``
    of one layer (``cache.result(layer)``), ``tokens`` ``(batch, pos)``. For each real query
    ``i``: ``k* = argmax_j pattern[i, j]`` over real keys, ``t* = tokens[k*]``, and the value is
    ``logits(result[i])[t*] - mean_v logits(result[i])[v]``; the score is its mean over real queries.
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
