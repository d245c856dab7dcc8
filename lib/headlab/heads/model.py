"""One head interface for every model: :class:`HeadModel`.

Hugging Face ``transformers`` 5 removed ``head_mask`` (passing it is silently swallowed) and
``prune_heads``, and its fast attention paths return no attention weights. So the book owns
its access point to heads: a **gate on the input of each attention block's output
projection** ``W_O``. That input is the concatenation of the per-head outputs ``z``,
``(batch, pos, n_heads * d_head)``; writing ``z`` as ``(batch, pos, head, d_head)``, head ``h``
of layer ``l`` contributes ``z[..., h, :] @ W_O[:, h-th slice]`` to the residual stream and
nothing else does. Replacing that slice of ``z`` removes the head exactly.

Everything goes through one forward pre-hook per output projection (the dispatcher of
:mod:`headlab.heads.dispatch`), which applies the active edits in the order their contexts were
entered and then hands the edited ``z`` to the active readers (:mod:`headlab.heads.capture`).
Every temporary change is a context manager built on ``try/finally``: contexts nest, and after
any exception the model is exactly as before (no hooks left, same attention implementation,
same parameters).

Gates generalise ablation: with a gate ``g`` per (input, layer, head) and a replacement ``r``,
the head's output becomes ``g * z + (1 - g) * r``. ``g = 0`` ablates (``r = 0``: zero
ablation; ``r`` = mean over a reference set: mean ablation; ``r`` = the head's output on
another input: resample ablation), ``g = 1`` leaves the head alone, and ``d metric / d g`` at
``g = 1`` is Michel et al.'s head importance.

This module holds the geometry, tokenisation, the forward pass, the default metric and every
head's weights; the contexts live in :mod:`~headlab.heads.capture` and
:mod:`~headlab.heads.gate`, and are methods of :class:`HeadModel` all the same.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

import torch
from torch import nn

from headlab.heads.adapters import QKV, Architecture, architecture_of
from headlab.heads.capture import CaptureMethods
from headlab.heads.dispatch import Dispatcher
from headlab.heads.gate import ABLATION_MODES, AblationNotApplied, GateMethods
from headlab.heads.head import Head, parse_head
from headlab.heads.inputs import check_batch, check_layer, check_texts, check_words
from headlab.heads.offload import execution_device, resident
from headlab.heads.readout import Readout, readout_of
from headlab.models import witness

# ABLATION_MODES and AblationNotApplied live in headlab.heads.gate; importable from here too,
# beside the HeadModel whose ablate() takes and raises them.
__all__ = ["HeadModel", "ABLATION_MODES", "AblationNotApplied", "check_model"]


class HeadModel(CaptureMethods, GateMethods):
    """A transformer seen as ``n_layers x n_heads`` heads.

    Wraps a torch module (``.model``; calling it directly inside an :meth:`ablate` block sees
    the ablation) and its tokenizer. Reading: :meth:`capture`, :meth:`run_with_cache`,
    :meth:`patch_pattern` (:mod:`headlab.heads.capture`); intervening: :meth:`ablate`,
    :meth:`gated`, :meth:`patch_z`, :meth:`head_gradients` (:mod:`headlab.heads.gate`);
    weights: :meth:`W_Q`, :meth:`W_K`, :meth:`W_V`, :meth:`W_O` and their biases.

    Every argument is checked where it comes in (``headlab.heads.inputs``): layer and head
    indices are ints in range, token ids fit the vocabulary and the model's maximum length,
    masks hold only 0 and 1, texts use words the tokenizer knows; a wrong one raises before any
    forward pass, naming the value.

    **Every forward is checked.** Inside a context, each forward pass of the model that does
    not reach a gate the context needs raises
    :class:`~headlab.heads.AblationNotApplied` at the end of that forward (not at the end
    of the block); the clean reference pass of a mean or resample ablation never counts. For
    the book's own GPT, a forward that skipped the hooks altogether (a ``torch.jit.trace`` or
    ``copy.deepcopy`` of the model made before the block and run inside it) raises too; for
    Hugging Face models such a copy runs unchecked. Tracing the model inside a block is
    refused. No hook is stored on the model: a deep copy made inside a block carries none.

    **Threads.** The contexts' state is per thread: an ablation, capture or patch opened in
    one thread applies only to the forward passes that thread runs; another thread running
    the same model at the same time gets the clean model (and is not counted). One exception
    is shared: while any thread captures patterns of a Hugging Face model, the model runs its
    eager attention in every thread (the same values as its fast kernel, up to float rounding).

    Args:
        model: a model of a family in ``headlab.heads.adapters.ARCHITECTURES``.
        tokenizer: its tokenizer (never modified), or ``None`` to run on token ids only.
        name: shown in messages (default: the model's class name).
        provenance: where the weights come from (see the attribute).

    Attributes:
        n_layers, n_heads, d_head, d_model: the head geometry (``n_heads`` counts query heads).
        n_kv_heads: the number of key/value heads (``n_heads`` except under grouped-query
            attention, where each serves ``n_heads // n_kv_heads`` query heads).
        causal: True for causal language models (metric: next-token loss), False for encoders
            (metric: embedding change).
        max_positions: the longest input the model takes (``None`` where it states none).
        vocab_size: the number of token ids it embeds.
        arch: the model family's :class:`~headlab.heads.adapters.Architecture`.
        dispatcher: the :class:`~headlab.heads.dispatch.Dispatcher` every context installs its
            hooks through.
        provenance: for the book's shipped organisms (``headlab.load``), the checkpoint's
            ``provenance.json`` (the command, seed, config, data and final metrics that produced
            it, and the sha256 of its files); ``None`` for any other model.
    """

    def __init__(self, model: nn.Module, tokenizer=None, name: str | None = None,
                 provenance: dict[str, Any] | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or type(model).__name__
        self.provenance = provenance
        self.arch: Architecture = architecture_of(model)
        self._blocks = list(self.arch.blocks(model))
        self._out_projs = [self.arch.out_proj(b) for b in self._blocks]
        self.n_layers = len(self._blocks)
        self.n_heads = int(self.arch.n_heads(model.config))
        self.n_kv_heads = int(self.arch.n_kv_heads(model.config))
        self.d_head = int(self.arch.d_head(model.config))
        w = self._out_projs[0].weight
        self.d_model = int(w.shape[1] if self.arch.conv1d else w.shape[0])
        if (w.shape[0] if self.arch.conv1d else w.shape[1]) != self.n_heads * self.d_head:
            raise ValueError(f"{self.name}: W_O takes {tuple(w.shape)}, expected n_heads*d_head = "
                             f"{self.n_heads}*{self.d_head} inputs")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: {self.n_heads} query heads cannot share {self.n_kv_heads} "
                             "key/value heads evenly")
        self.causal = self.arch.causal
        limit = self.arch.max_positions(model.config)
        self.max_positions = None if limit is None else int(limit)
        self.vocab_size = int(self.arch.vocab_size(model.config))
        self.dispatcher = Dispatcher(model, self._out_projs, self.n_heads, self.d_head, name=self.name)
        if self.arch.reports_forwards:
            witness.watch(model, self.dispatcher.witness)

    def __deepcopy__(self, memo):
        """A copy of the model with a head interface of its own (no context, no hook)."""
        return HeadModel(copy.deepcopy(self.model, memo), copy.deepcopy(self.tokenizer, memo), name=self.name,
                         provenance=copy.deepcopy(self.provenance, memo))

    # ------------------------------------------------------------------ basics
    def __repr__(self) -> str:
        return (f"HeadModel({self.name!r}: {self.n_layers} layers x {self.n_heads} heads, "
                f"d_head={self.d_head}, d_model={self.d_model}, "
                f"{'causal LM' if self.causal else 'encoder'})")

    @property
    def device(self) -> torch.device:
        """Where inputs go (for a model dispatched with ``device_map``, its embeddings' device)."""
        return execution_device(self.model)

    @property
    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, first to last, as a new list (changing it changes nothing)."""
        return list(self._blocks)

    @property
    def hooks_installed(self) -> int:
        """The number of hooks the head interface has on the model now (0 outside every context)."""
        return self.dispatcher.installed

    def heads(self) -> list[Head]:
        """Every head as ``Head(layer, head)``, layer by layer."""
        return [Head(l, h) for l in range(self.n_layers) for h in range(self.n_heads)]

    def check_heads(self, heads: Iterable[Head]) -> list[Head]:
        """Validate a set of heads; returns them as a sorted list of :class:`Head`.

        Each head may be written in any form :func:`~headlab.heads.head.parse_head` reads
        (``(layer, head)``, ``"layer.head"``, ...); indices must be ints in range.
        """
        if isinstance(heads, (str, dict)) or (
                isinstance(heads, tuple) and len(heads) == 2 and all(isinstance(x, int) for x in heads)):
            raise TypeError(f"heads must be a collection of (layer, head) pairs; for one head write [{heads!r}]")
        try:
            items = list(heads)
        except TypeError:
            raise TypeError(f"heads must be a collection of (layer, head) pairs, got {heads!r}") from None
        out = []
        for item in items:
            try:
                layer, head = parse_head(item)
            except (TypeError, ValueError) as err:
                raise type(err)(f"{err} ({self.name} has layers 0..{self.n_layers - 1} and heads "
                                f"0..{self.n_heads - 1})") from None
            if not (layer < self.n_layers and head < self.n_heads):
                raise ValueError(f"head {layer}.{head} is out of range: {self.name} has layers "
                                 f"0..{self.n_layers - 1} and heads 0..{self.n_heads - 1}")
            out.append(Head(layer, head))
        if not out:
            raise ValueError("empty head set: give at least one (layer, head) pair")
        return sorted(set(out))

    def batches(self, inputs, batch_size: int, truncate: bool = False):
        """Yield tokenized batches of at most ``batch_size`` inputs (texts are padded per batch, so a
        long text does not pad every other batch to its length)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
            self.tokenize(list(inputs), truncate=truncate)  # every text checked before the first batch
            for start in range(0, len(inputs), batch_size):
                yield self.tokenize(list(inputs[start:start + batch_size]), truncate=truncate)
            return
        batch = self.tokenize(inputs, truncate=truncate)
        for start in range(0, batch["input_ids"].shape[0], batch_size):
            yield {k: v[start:start + batch_size] for k, v in batch.items()}

    def tokenize(self, inputs, truncate: bool = False) -> dict[str, torch.Tensor]:
        """Texts, token ids or a tokenizer batch -> ``{"input_ids", "attention_mask"}`` on the model's device.

        Texts are padded on the right (with the tokenizer's pad token, else its end-of-text
        token: the padding is masked out anyway); the tokenizer itself is left as it was. A 1-d
        tensor is one sequence. Everything is checked (``headlab.heads.inputs.check_batch``):
        an input longer than ``max_positions`` is an error naming the limit, unless
        ``truncate=True`` keeps its first ``max_positions`` tokens.
        """
        if not isinstance(truncate, bool):
            raise TypeError(f"truncate must be True or False, got {truncate!r}")
        if isinstance(inputs, str):
            inputs = [inputs]
        if isinstance(inputs, torch.Tensor):
            batch = {"input_ids": inputs}
        elif isinstance(inputs, dict) or (hasattr(inputs, "keys") and hasattr(inputs, "__getitem__")):
            batch = {k: inputs[k] for k in inputs.keys()}
        elif isinstance(inputs, (list, tuple)):
            batch = self._encode_texts(check_texts(inputs), truncate)
        else:
            raise TypeError("inputs must be a text, a list of texts, a tensor of token ids or a dict "
                            f"with 'input_ids'; got {type(inputs).__name__} {inputs!r:.60}")
        batch = check_batch(batch, name=self.name, vocab_size=self.vocab_size, max_positions=self.max_positions,
                            truncate=truncate)
        return {k: v.to(self.device) for k, v in batch.items()}

    def _encode_texts(self, texts: list[str], truncate: bool) -> dict[str, torch.Tensor]:
        tok = self.tokenizer
        if tok is None:
            raise ValueError(f"{self.name} has no tokenizer; pass token ids instead of texts")
        check_words(tok, texts, self.name)
        cut = dict(truncation=True, max_length=self.max_positions) if truncate and self.max_positions else {}
        # transformers' tokenizers warn about long inputs themselves; the check below says it once
        quiet = {"verbose": False} if hasattr(tok, "model_max_length") else {}
        if getattr(tok, "pad_token", None) is not None and getattr(tok, "padding_side", "right") == "right":
            enc = tok(texts, padding=True, return_tensors="pt", **quiet, **cut)
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        # no pad token (GPT-2 style) or left padding: pad on the right by hand, with the
        # end-of-text token (masked out anyway), instead of changing the caller's tokenizer
        rows = tok(texts, padding=False, **quiet, **cut)["input_ids"]
        for i, row in enumerate(rows):
            if not row:
                raise ValueError(f"text {i} ({texts[i]!r:.60}) gives no tokens")
        pad = next((t for t in (getattr(tok, "pad_token_id", None), getattr(tok, "eos_token_id", None))
                    if t is not None), 0)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def forward(self, inputs) -> torch.Tensor:
        """Run the model: logits ``(batch, pos, d_vocab)`` for causal LMs, last hidden states
        ``(batch, pos, d_model)`` for encoders."""
        batch = self.tokenize(inputs)
        return self.arch.run(self.model, batch["input_ids"], batch["attention_mask"])

    __call__ = forward

    # ----------------------------------------------------------------- weights
    def _layer(self, layer: int) -> int:
        return check_layer(layer, self.n_layers, self.name)

    def out_proj(self, layer: int) -> nn.Module:
        """Layer ``layer``'s attention output projection, the module whose input the gate edits."""
        return self._out_projs[self._layer(layer)]

    def attn_norm(self, layer: int) -> nn.Module | None:
        """The norm layer ``layer``'s attention reads the residual stream through, or ``None``
        where it reads the stream directly (post-norm families such as BERT; no LayerNorm)."""
        return self.arch.attn_norm(self._blocks[self._layer(layer)])

    def _qkv(self, layer: int) -> QKV:
        with resident(self._blocks[self._layer(layer)]) as block:
            return self.arch.qkv(block)

    def _per_head(self, w: torch.Tensor, query: bool) -> torch.Tensor:
        """``(d_model, n * d_head)`` -> ``(n_heads, d_model, d_head)``, K/V repeated per query head."""
        w = w.detach().reshape(w.shape[0], -1, self.d_head).transpose(0, 1)  # (n, d_model, d_head)
        return w if query else w.repeat_interleave(self.n_heads // self.n_kv_heads, dim=0)

    def _bias_per_head(self, b: torch.Tensor | None, query: bool) -> torch.Tensor | None:
        if b is None:
            return None
        b = b.detach().reshape(-1, self.d_head)  # (n, d_head)
        return b if query else b.repeat_interleave(self.n_heads // self.n_kv_heads, dim=0)

    def W_Q(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s query weights by head: ``(head, d_model, d_head)``.

        Row-vector convention: head ``h``'s query is ``x @ W_Q[h] + b_Q[h]``, where ``x`` is the
        output of :meth:`attn_norm` (before any rotary position embedding).
        """
        return self._per_head(self._qkv(layer).W_Q, query=True)

    def W_K(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s key weights by *query* head: ``(head, d_model, d_head)``.

        Under grouped-query attention the key weights of a key/value head are repeated for each
        query head that shares them (query head ``h`` uses key/value head
        ``h // (n_heads // n_kv_heads)``).
        """
        return self._per_head(self._qkv(layer).W_K, query=False)

    def W_V(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s value weights by query head: ``(head, d_model, d_head)`` (repeated
        as in :meth:`W_K` under grouped-query attention)."""
        return self._per_head(self._qkv(layer).W_V, query=False)

    def b_Q(self, layer: int) -> torch.Tensor | None:
        """Layer ``layer``'s query bias by head, ``(head, d_head)``, or ``None`` if it has none."""
        return self._bias_per_head(self._qkv(layer).b_Q, query=True)

    def b_K(self, layer: int) -> torch.Tensor | None:
        """Layer ``layer``'s key bias by query head, ``(head, d_head)``, or ``None``."""
        return self._bias_per_head(self._qkv(layer).b_K, query=False)

    def b_V(self, layer: int) -> torch.Tensor | None:
        """Layer ``layer``'s value bias by query head, ``(head, d_head)``, or ``None``."""
        return self._bias_per_head(self._qkv(layer).b_V, query=False)

    def W_O(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s output projection split by head: ``(head, d_head, d_model)``;
        head ``h`` writes ``z[..., h, :] @ W_O[h]``."""
        with resident(self.out_proj(layer)) as proj:
            w = proj.weight.detach()
        w = w if self.arch.conv1d else w.T  # (n_heads * d_head, d_model)
        return w.reshape(self.n_heads, self.d_head, self.d_model)

    def b_O(self, layer: int) -> torch.Tensor | None:
        """Layer ``layer``'s output bias ``(d_model,)``, which belongs to no head, or ``None``."""
        with resident(self.out_proj(layer)) as proj:
            bias = proj.bias
            return None if bias is None else bias.detach()

    def readout(self) -> Readout:
        """The final norm and the unembedding, with the norm's linearisation:
        :class:`~headlab.heads.readout.Readout` (``logits = readout.logits(last block's output)``).

        Raises:
            ValueError: the model has no language-model head (an encoder such as MiniLM).
        """
        return readout_of(self.model, self.arch, self.name)

    def head_results(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """Each head's write into the residual stream: ``(batch, pos, head, d_head)`` ->
        ``(batch, pos, head, d_model)``, bias excluded."""
        w = self.W_O(layer).to(z.dtype)  # (head, d_head, d_model)
        if not isinstance(z, torch.Tensor) or z.dim() != 4 or tuple(z.shape[2:]) != (self.n_heads, self.d_head):
            raise ValueError(f"head_results needs z of shape (batch, pos, {self.n_heads}, {self.d_head}) (head, "
                             f"d_head), got {tuple(getattr(z, 'shape', ())) or type(z).__name__}")
        return torch.einsum("bphd,hdm->bphm", z, w)


def check_model(hm, where: str) -> HeadModel:
    """``hm`` if it is a :class:`HeadModel`; else a TypeError that names what was given and how to wrap it."""
    if isinstance(hm, HeadModel):
        return hm
    wrap = ("wrap it first: headlab.load(model_or_name) or HeadModel(model, tokenizer)"
            if isinstance(hm, nn.Module) else "load one with headlab.load(NAME)")
    raise TypeError(f"{where} needs a HeadModel, got {type(hm).__name__} {str(hm)[:40]!r}: {wrap}")
