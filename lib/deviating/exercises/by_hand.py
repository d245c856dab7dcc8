"""The book's GPT run by hand, for the known answers of the checks that patch, attribute, lens and prune.

:func:`run_by_hand` recomputes a forward pass of a :class:`headlab.models.gpt.GPT` from its
weights alone, in float64, written out step by step (embeddings, LayerNorm, causal attention,
``W_O``, MLP, final LayerNorm, unembedding). It never calls the head interface, so a check's
expected value does not come from the API the student uses. Inside it, any head's ``z`` can be
set to zero or replaced by given values: that is what ablation and patching do. The tests
(``tests/test_exercise_by_hand.py``) check it against the model's own forward and the gate.

:func:`tiny_gpt` builds the small random models the checks run on (biases and LayerNorm weights
not trivial, so that a forgotten bias or scale shows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["ByHand", "run_by_hand", "tiny_gpt", "last_logit_diff", "mean_loss", "naming_compare"]


def tiny_gpt(seed: int = 0, n_layers: int = 2, n_heads: int = 4, d_model: int = 32, d_vocab: int = 40,
             n_ctx: int = 16, d_mlp: int = 0):
    """A random book GPT in a :class:`~headlab.heads.model.HeadModel`; weights drawn from ``seed``.

    Weights are a little larger than at initialisation so that every head matters; LayerNorm
    weights and biases and every linear bias are random too.
    """
    from headlab.heads.model import HeadModel
    from headlab.models.gpt import GPT, GPTConfig

    torch.manual_seed(seed)
    model = GPT(GPTConfig(d_vocab=d_vocab, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                          d_mlp=d_mlp, init_std=1.0 / math.sqrt(d_model)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.2)
            elif "ln" in name:  # a LayerNorm's weight
                p.uniform_(0.5, 1.5)
            elif "W_O" in name:  # as large as the other weights: each head writes something that counts
                p.normal_(0.0, 1.0 / math.sqrt(d_model))
    return HeadModel(model.eval(), name=f"a random GPT (seed {seed})")


@dataclass
class ByHand:
    """One forward pass by hand, float64.

    Attributes:
        logits: ``(batch, pos, d_vocab)``.
        resid: ``n_layers + 1`` streams ``(batch, pos, d_model)``: the embeddings, then the
            stream after each layer.
        z: per layer, the head outputs that entered ``W_O`` ``(batch, pos, head, d_head)``
            (after any zeroing or replacement).
    """

    logits: torch.Tensor
    resid: list
    z: list


def _layer_norm(x: torch.Tensor, ln, eps: float) -> torch.Tensor:
    if not isinstance(ln, torch.nn.LayerNorm):  # GPTConfig(layer_norm=False): the identity
        return x
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * ln.weight.double() + ln.bias.double()


def _linear(x: torch.Tensor, lin) -> torch.Tensor:
    return x @ lin.weight.double().T + lin.bias.double()


def run_by_hand(hm, input_ids, zero=(), replace=None, add=None) -> ByHand:
    """Run ``hm``'s book GPT on ``input_ids`` ``(batch, pos)`` (no padding) from its weights.

    Args:
        zero: ``(layer, head)`` pairs whose ``z`` is set to 0 at every position (zero ablation).
        replace: ``{(layer, head): values}`` with ``values`` ``(batch, pos, d_head)`` (every
            position) or ``{(layer, head, pos): values}`` with ``values`` ``(batch, d_head)``: what
            the head's ``z`` is replaced by (patching).
        add: ``{(layer, head): values}`` with ``values`` ``(batch, pos, d_head)``, added to the head's
            ``z`` as the run computes it (after ``zero`` and ``replace``): a small push along a
            direction, row by row, while every other head still responds.
    """
    model = hm.model
    cfg = model.config
    ids = torch.as_tensor(input_ids)
    batch, pos = ids.shape
    replace = replace or {}
    with torch.no_grad():
        x = model.embed.weight.double()[ids] + model.pos_embed.weight.double()[:pos]
        resid, zs = [x], []
        causal = torch.tril(torch.ones(pos, pos, dtype=torch.bool))
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            h_in = _layer_norm(x, block.ln1, cfg.ln_eps)
            q, k, v = (_linear(h_in, w).reshape(batch, pos, cfg.n_heads, cfg.d_head)
                       for w in (attn.W_Q, attn.W_K, attn.W_V))
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.d_head)
            pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            z = torch.einsum("bhqk,bkhd->bqhd", pattern, v)
            for l, h in zero:
                if l == layer:
                    z[:, :, h] = 0.0
            for key, values in replace.items():
                if key[0] == layer:
                    at = slice(None) if len(key) == 2 else key[2]
                    z[:, at, key[1]] = torch.as_tensor(values, dtype=torch.float64)
            for (l, h), values in (add or {}).items():
                if l == layer:
                    z[:, :, h] = z[:, :, h] + torch.as_tensor(values, dtype=torch.float64)
            zs.append(z.clone())
            x = x + _linear(z.reshape(batch, pos, -1), attn.W_O)
            if block.mlp is not None:
                hidden = _linear(_layer_norm(x, block.ln2, cfg.ln_eps), block.mlp.W_in)
                x = x + _linear(0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2))), block.mlp.W_out)
            resid.append(x)
        logits = _linear(_layer_norm(x, model.ln_final, cfg.ln_eps), model.unembed)
    return ByHand(logits, resid, zs)


def last_logit_diff(run: ByHand, answer: int, wrong: int, at: int = -1) -> torch.Tensor:
    """``(batch,)``: logit of ``answer`` minus logit of ``wrong`` at position ``at``."""
    return run.logits[:, at, answer] - run.logits[:, at, wrong]


def mean_loss(run: ByHand, input_ids) -> float:
    """The mean next-token cross-entropy over every predicted position of every input."""
    ids = torch.as_tensor(input_ids)
    logp = run.logits[:, :-1].log_softmax(-1)
    return float(-logp.gather(-1, ids[:, 1:, None]).mean())


def naming_compare(mistakes: dict, atol: float = 1e-5, rtol: float = 1e-4):
    """A ``compare(got, expected)`` for :func:`~deviating.exercises.run_cases` that names a known mistake.

    ``mistakes`` maps ``id(expected)`` of a case to ``{what the mistake is: its answer}``; when the
    answer is wrong and equals one of them, the problem says which mistake it is.
    """
    from deviating.exercises import compare_arrays

    def compare(got, expected):
        problem = compare_arrays(got, expected, atol=atol, rtol=rtol)
        if problem is None or "shape" in problem:
            return problem
        for what, answer in mistakes.get(id(expected), {}).items():
            answer = torch.as_tensor(answer).numpy()
            if answer.shape == getattr(expected, "shape", None) and compare_arrays(answer, expected, atol=atol,
                                                                                  rtol=rtol) is None:
                continue  # this mistake gives the right answer on this case: it names nothing
            if compare_arrays(got, answer, atol=atol, rtol=rtol) is None:
                return what
        return problem

    return compare
