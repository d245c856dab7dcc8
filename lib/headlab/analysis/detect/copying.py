"""Copying heads: does what a head writes raise the logit of the token it reads?

Both measures read the write through an unembedding ``W_U``; encoders raise
:class:`NotApplicable`. :func:`ov_copying_score` feeds each token alone (position 0, where a
causal head attends only to itself, so its write is its OV circuit on ``t``);
:func:`dla_copying_score` is the direct logit attribution to the most-attended key's token,
in context. ``logits(r) = (gamma * centre(r)) @ W_U`` (:meth:`~headlab.heads.readout.Readout.direct`),
``gamma`` the final norm's gain (centring for a LayerNorm only); the norm's division and the
biases are left out.
"""

from __future__ import annotations

import torch

from headlab.analysis.detect.base import check_pattern, check_positions, mean_over
from headlab.heads.readout import Readout


class NotApplicable(ValueError):
    """The measure is not defined for this model (e.g. copying for an encoder with no LM head)."""


def unembedding(hm) -> Readout:
    """The model's :class:`~headlab.heads.readout.Readout` in float32: a write ``r`` reads as the
    logits ``unembed.direct(r)`` (the final norm's gain and centring, not its division).

    Raises :class:`NotApplicable` for encoders and models with no unembedding.
    """
    if not hm.causal:
        raise NotApplicable(f"{hm.name} is an encoder with no language-model head: copying is defined "
                            "through the logits of an unembedding, which it does not have")
    try:
        return hm.readout().to(torch.float32)
    except ValueError as err:
        raise NotApplicable(str(err)) from None


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
            logits = unembed.direct(cache.result(layer)[:, 0])  # (n, head, d_vocab)
            own = logits.gather(-1, t[:, None, None].to(logits.device).expand(-1, hm.n_heads, 1))  # (n, head, 1)
            rank = (logits >= own).sum(-1) - 1  # (n, head): other tokens at least as large
            hits[layer] += (rank < k).sum(0).cpu()
    return hits / len(ids)


def dla_copying_score(pattern: torch.Tensor, result: torch.Tensor, tokens: torch.Tensor, unembed: Readout,
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
    r = result.float() if unembed.linear is None else unembed.linear.apply(result.float())
    r = r.transpose(1, 2)  # (batch, head, q_pos, d_model)
    columns = W_U.T[t_star]  # (batch, head, q_pos, d_model)
    logit = (r * columns).sum(-1)  # (batch, head, q_pos)
    mean_logit = r @ W_U.mean(1)  # (batch, head, q_pos)
    return mean_over(logit - mean_logit, real, on_empty, "real query position")
