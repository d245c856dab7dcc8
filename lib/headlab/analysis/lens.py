"""What each component writes into the logits: direct logit attribution and the logit lens.

The last residual stream is a sum (embeddings, each head's ``z_h @ W_O_h``, each ``b_O``, each
MLP's output) and the logits are ``norm(stream) @ W_U + b_U`` (:meth:`~headlab.heads.HeadModel.readout`). The
final norm divides by the stream's scale, so :func:`~headlab.analysis.lens.direct_logit_attribution`
makes the standard approximation: the scale is **frozen** at its value on this run, per input and
position (:class:`~headlab.heads.readout.LinearNorm`). The norm is then linear: a component's
share is ``centre(c) / scale * gamma @ u`` (``u``: a token's unembedding column or the difference
of two), and the shares and biases sum to the logit (difference) exactly. Where a family
normalises the attention's output before adding it to the stream (Gemma-2/3, OLMo-2), that norm's
scale is frozen the same way. Where it soft-caps its logits (Gemma-2), the shares sum to the logit
*before* the cap (a tanh, not linear). :func:`~headlab.analysis.lens.logit_lens` reads the stream
after each layer through the final norm (applied afresh) and the cap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from headlab.heads.model import HeadModel
from headlab.heads.readout import linear_norm
from headlab.metrics import positions

__all__ = ["Attribution", "direct_logit_attribution", "logit_lens"]


@dataclass
class Attribution:
    """Each component's direct share of a logit (difference), in float64, with leading dims
    ``(n, pos)`` (``(n,)`` at one position).

    Attributes:
        heads: ``(..., n_layers, n_heads)`` each head's ``z @ W_O``.
        attn_bias, mlp: ``(..., n_layers)`` each ``b_O``; the rest of each block's write (its MLP).
        embed, bias, logits: ``(...)`` block 0's input; the final norm's and the unembedding's biases;
            the model's own logit (difference), which ``total()`` equals.
    """

    heads: torch.Tensor
    attn_bias: torch.Tensor
    mlp: torch.Tensor
    embed: torch.Tensor
    bias: torch.Tensor
    logits: torch.Tensor

    def total(self) -> torch.Tensor:
        """The sum of every share: the logit (difference) under the frozen scale."""
        return self.heads.sum((-2, -1)) + self.attn_bias.sum(-1) + self.mlp.sum(-1) + self.embed + self.bias


def _pick(t: torch.Tensor, at: torch.Tensor | None) -> torch.Tensor:
    return t if at is None else t[torch.arange(t.shape[0], device=t.device), at.to(t.device)]


def direct_logit_attribution(hm: HeadModel, inputs, tokens, pos: int | None = None) -> Attribution:
    """Each head's (and every other component's) direct share of the logit of ``tokens``.

    Args:
        hm: a causal LM with its language-model head.
        inputs: texts or a batch.
        tokens: a token id (its logit) or two ``(a, b)`` (the logit difference ``a - b``), the same
            for every input; or one pair (or one id) per input, as a list of tuples or an
            ``(n_inputs, 2)`` tensor (each prompt's answer against its own distractor).
        pos: a position (``-1``: each input's last real token), or ``None`` for every position.

    The final norm's scale is frozen (module docstring): :meth:`~headlab.analysis.lens.Attribution.total`
    equals the model's logit (difference), before the soft-cap where the family has one.

    Raises:
        ValueError: no language-model head, token ids outside the vocabulary, a position out of range.
    """
    readout = hm.readout()
    W_U, lin = readout.W_U, readout.linear
    batch = hm.tokenize(inputs)
    ids = _token_ids(tokens, batch["input_ids"].shape[0], W_U.shape[1]).to(W_U.device)  # (n, 1 or 2)
    sign = torch.tensor([1.0, -1.0][:ids.shape[1]], dtype=torch.float64, device=W_U.device)
    u = W_U.double().T[ids].transpose(1, 2) @ sign  # (n, d_model): each input's direction
    at = None if pos is None else positions(batch, pos)
    with torch.no_grad(), hm.capture(("z",)) as cache, hm.residual_stream() as stream:
        logits = hm.forward(batch)
        if readout.softcap is not None:  # the shares add up to the logit before the cap
            logits = readout.logits(stream[-1], cap=False)
    x = stream[-1].double()
    scale = None if lin is None else lin.scale(x)  # (n, pos): frozen

    def share(c: torch.Tensor) -> torch.Tensor:  # c: (n, pos, ..., d_model)
        c = c.double() if c.dim() > 1 else c.double().expand_as(x)
        return _pick(torch.einsum("n...d,nd->n...", c if lin is None else lin.apply(c, scale), u), at)

    heads, attn_bias, mlp = [], [], []
    for layer in range(hm.n_layers):
        results = hm.head_results(layer, cache.z(layer)).double()  # (n, pos, head, d_model)
        b_O = hm.b_O(layer)
        b_O = x.new_zeros(x.shape) if b_O is None else b_O.double().expand_as(x)
        post = linear_norm(hm.arch.attn_out_norm(hm.blocks[layer]), hm.arch)
        if post is not None:  # the attention's output normalised before it joins the stream: freeze its scale
            s = post.scale(results.sum(2) + b_O)
            results, b_O = post.apply(results, s), post.apply(b_O, s) + (0 if post.beta is None else post.beta.to(x))
        heads.append(share(results))
        attn_bias.append(share(b_O))
        mlp.append(share(stream[layer + 1].double() - stream[layer].double() - results.sum(2) - b_O))
    beta = 0.0 if lin is None or lin.beta is None else u @ lin.beta.double()  # (n,)
    bias = beta + (0.0 if readout.b_U is None else readout.b_U.double()[ids] @ sign)  # (n,)
    embed = share(stream[0])
    total = torch.einsum("npv,nv->np", logits.double(), torch.zeros_like(logits[:, 0], dtype=torch.float64).scatter_add(
        1, ids, sign.expand(ids.shape)))
    return Attribution(torch.stack(heads, -2), torch.stack(attn_bias, -1), torch.stack(mlp, -1), embed,
                       torch.as_tensor(bias, dtype=torch.float64).reshape(-1, *[1] * (embed.dim() - 1)).expand_as(embed)
                       .clone(), _pick(total, at))


def _token_ids(tokens, n: int, d_vocab: int) -> torch.Tensor:
    """``tokens`` of :func:`direct_logit_attribution` as an ``(n, k)`` table of ids, ``k`` 1 or 2."""
    def bad(why: str) -> ValueError:
        return ValueError(f"tokens must be one token id or two (a, b) in 0..{d_vocab - 1}, or one such tuple per "
                          f"input; {why}, got {tokens!r:.80}")
    if isinstance(tokens, torch.Tensor):
        if tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise bad(f"a {tokens.dtype} tensor holds no token ids")
        table = tokens.long().cpu().reshape(len(tokens), -1) if tokens.dim() else tokens.long().reshape(1, 1)
    elif isinstance(tokens, int) and not isinstance(tokens, bool):
        table = torch.tensor([[tokens]])
    elif isinstance(tokens, (tuple, list)) and tokens:
        rows = [tuple(r) if isinstance(r, (tuple, list)) else r for r in tokens]
        nested = all(isinstance(r, tuple) for r in rows)
        flat = [i for r in rows for i in r] if nested else rows
        if any(isinstance(i, bool) or not isinstance(i, int) for i in flat):
            raise bad("every id must be an int (True is not a token id)")
        if nested and len({len(r) for r in rows}) != 1:
            raise bad("every input needs as many ids")
        table = torch.tensor(rows if nested else [rows])
    else:
        raise bad(f"{type(tokens).__name__} is not a token id")
    if not 1 <= table.shape[1] <= 2 or int(table.min()) < 0 or int(table.max()) >= d_vocab:
        raise bad("ids out of range or more than two")
    if len(table) == 1:
        return table.expand(n, -1)
    if len(table) != n:
        raise bad(f"{len(table)} rows of ids for {n} inputs")
    return table


def logit_lens(hm: HeadModel, inputs, pos: int | None = None) -> torch.Tensor:
    """``norm(resid_l) @ W_U + b_U`` for the stream after each layer ``l``, with the model's final
    norm: ``(n_layers, n, pos, d_vocab)``, or ``(n_layers, n, d_vocab)`` at one position (``-1``:
    each input's last real token). The last layer's row is the model's logits.

    Raises:
        ValueError: no language-model head, or a position out of range.
    """
    readout = hm.readout()
    batch = hm.tokenize(inputs)
    at = None if pos is None else positions(batch, pos)
    with torch.no_grad(), hm.residual_stream() as stream:
        hm.forward(batch)
        return readout.logits(torch.stack([_pick(s, at) for s in stream[1:]]))  # (n_layers, n, [pos,] d_vocab)
