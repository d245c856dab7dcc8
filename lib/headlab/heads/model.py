"""One head interface for every model: capture, ablate, differentiate.

Hugging Face ``transformers`` 5 removed ``head_mask`` (passing it is silently
swallowed) and ``prune_heads``, and its fast attention paths return no
attention weights. So the book owns its access point to heads: a **gate on the
input of each attention block's output projection** ``W_O``. That input is the
concatenation of the per-head outputs ``z``, ``(batch, pos, n_heads * d_head)``;
writing ``z`` as ``(batch, pos, head, d_head)``, head ``h`` of layer ``l``
contributes ``z[..., h, :] @ W_O[:, h-th slice]`` to the residual stream and
nothing else does. Replacing that slice of ``z`` removes the head exactly.

Everything goes through one forward pre-hook per output projection (the
*dispatcher*), which applies the active edits in the order their contexts were
entered and then hands the edited ``z`` to the active readers. Every temporary
change is a context manager built on ``try/finally``: contexts nest, and after
any exception the model is exactly as before (no hooks left, same attention
implementation, same parameters).

Gates generalise ablation: with a gate ``g`` per (input, layer, head) and a
replacement ``r``, the head's output becomes ``g * z + (1 - g) * r``.
``g = 0`` ablates (``r = 0``: zero ablation; ``r`` = mean over a reference set:
mean ablation; ``r`` = the head's output on another input: resample ablation),
``g = 1`` leaves the head alone, and ``d metric / d g`` at ``g = 1`` is Michel
et al.'s head importance.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from headlab.heads.ablation import ABLATION_MODES, Ablation
from headlab.heads.adapters import Architecture, architecture_of
from headlab.heads.head import Head, parse_head
from headlab.heads.gate import Resampler, _Edit, _FunctionEdit, _GateEdit, _ResampleDraw  # noqa: F401 (re-exported)
from headlab.metrics import cosine_distance, mean_pool, next_token_loss, retrieval_loss

__all__ = ["HeadModel", "ActivationCache", "AblationNotApplied", "Resampler", "Head", "ABLATION_MODES"]


class AblationNotApplied(RuntimeError):
    """A forward pass ran inside an ablation, but the gate of a targeted layer was never reached."""


# ------------------------------------------------------------------------- capture


class ActivationCache:
    """Activations recorded during a :meth:`HeadModel.capture` block.

    Keys follow TransformerLens: ``blocks.{l}.attn.hook_pattern``
    ``(batch, head, q_pos, k_pos)``, ``blocks.{l}.attn.hook_z``
    ``(batch, pos, head, d_head)`` (exactly what enters ``W_O``, after any active
    edit), and ``blocks.{l}.attn.hook_result`` ``(batch, pos, head, d_model)``,
    each head's write into the residual stream (``z_h @ W_O_h``, without the
    bias, which belongs to no head), computed on demand from ``hook_z``.

    A key recorded by several forward passes is returned concatenated along the
    batch (they must share a sequence length); :meth:`all` gives the list.
    """

    def __init__(self, head_model: "HeadModel"):
        self._hm = head_model
        self._store: dict[str, list[torch.Tensor]] = {}
        self.input_ids: torch.Tensor | None = None
        self.attention_mask: torch.Tensor | None = None

    def _record(self, key: str, value: torch.Tensor) -> None:
        self._store.setdefault(key, []).append(value)

    def keys(self) -> list[str]:
        keys = list(self._store)
        keys += [k.replace("hook_z", "hook_result") for k in keys if k.endswith("hook_z")]
        return keys

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def all(self, key: str) -> list[torch.Tensor]:
        if key.endswith("hook_result"):
            layer = int(key.split(".")[1])
            return [self._hm.head_results(layer, z) for z in self.all(key.replace("hook_result", "hook_z"))]
        if key not in self._store:
            raise KeyError(f"{key!r} was not captured; captured: {sorted(self.keys())}")
        return self._store[key]

    def __getitem__(self, key: str) -> torch.Tensor:
        values = self.all(key)
        if len(values) == 1:
            return values[0]
        if len({v.shape[1:] for v in values}) != 1:
            raise ValueError(f"{key!r} was recorded by {len(values)} forward passes of different "
                             "shapes; use cache.all(key) for the list")
        return torch.cat(values, dim=0)

    def pattern(self, layer: int) -> torch.Tensor:
        """``(batch, head, q_pos, k_pos)``"""
        return self[f"blocks.{layer}.attn.hook_pattern"]

    def z(self, layer: int) -> torch.Tensor:
        """``(batch, pos, head, d_head)``"""
        return self[f"blocks.{layer}.attn.hook_z"]

    def result(self, layer: int) -> torch.Tensor:
        """``(batch, pos, head, d_model)``"""
        return self[f"blocks.{layer}.attn.hook_result"]


# ---------------------------------------------------------------------- HeadModel


@dataclass
class _State:
    edits: list[_Edit] = field(default_factory=list)
    readers: list[Callable[[int, torch.Tensor], None]] = field(default_factory=list)
    handles: list = field(default_factory=list)
    depth: int = 0     # open contexts that need the dispatcher hooks
    level: int = 0     # incremented while outer edits and captures are suspended
    forwards: int = 0


class HeadModel:
    """A transformer seen as ``n_layers x n_heads`` heads.

    Wraps a torch module (``.model``; calling it directly inside an
    :meth:`ablate` block sees the ablation) and its tokenizer.

    Attributes:
        n_layers, n_heads, d_head, d_model: the head geometry.
        causal: True for causal language models (metric: next-token loss),
            False for encoders (metric: embedding change).
    """

    def __init__(self, model: nn.Module, tokenizer=None, name: str | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or type(model).__name__
        self.arch: Architecture = architecture_of(model)
        self._blocks = list(self.arch.blocks(model))
        self._out_projs = [self.arch.out_proj(b) for b in self._blocks]
        self.n_layers = len(self._blocks)
        self.n_heads = int(self.arch.n_heads(model.config))
        self.d_head = int(self.arch.d_head(model.config))
        w = self._out_projs[0].weight
        self.d_model = int(w.shape[1] if self.arch.conv1d else w.shape[0])
        if (w.shape[0] if self.arch.conv1d else w.shape[1]) != self.n_heads * self.d_head:
            raise ValueError(f"{self.name}: W_O takes {tuple(w.shape)}, expected n_heads*d_head = "
                             f"{self.n_heads}*{self.d_head} inputs")
        self.causal = self.arch.causal
        self._state = _State()

    # ------------------------------------------------------------------ basics
    def __repr__(self) -> str:
        return (f"HeadModel({self.name!r}: {self.n_layers} layers x {self.n_heads} heads, "
                f"d_head={self.d_head}, d_model={self.d_model}, "
                f"{'causal LM' if self.causal else 'encoder'})")

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def blocks(self) -> list[nn.Module]:
        """The transformer blocks, first to last (a new list: changing it changes nothing)."""
        return list(self._blocks)

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
            layer, head = parse_head(item)
            if not (layer < self.n_layers and head < self.n_heads):
                raise ValueError(f"head {layer}.{head} is out of range: {self.name} has layers "
                                 f"0..{self.n_layers - 1} and heads 0..{self.n_heads - 1}")
            out.append(Head(layer, head))
        if not out:
            raise ValueError("empty head set: give at least one (layer, head) pair")
        return sorted(set(out))

    def tokenize(self, inputs) -> dict[str, torch.Tensor]:
        """Texts, token ids or a tokenizer batch -> ``{"input_ids", "attention_mask"}`` on the model's device.

        Texts are padded on the right. A 1-d tensor is one sequence.
        """
        if isinstance(inputs, str):
            inputs = [inputs]
        if isinstance(inputs, torch.Tensor):
            ids = inputs[None] if inputs.dim() == 1 else inputs
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        elif isinstance(inputs, dict) or hasattr(inputs, "keys"):
            if "input_ids" not in inputs:
                raise ValueError("a batch dict must contain 'input_ids'")
            ids = inputs["input_ids"]
            mask = inputs.get("attention_mask")
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids) if mask is None else mask}
        elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
            if self.tokenizer is None:
                raise ValueError(f"{self.name} has no tokenizer; pass token ids instead of texts")
            tok = self.tokenizer
            if tok.pad_token is None:  # GPT-2 style tokenizers: pad with EOS, masked out anyway
                tok.pad_token = tok.eos_token
            tok.padding_side = "right"
            enc = tok(list(inputs), padding=True, return_tensors="pt")
            batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        else:
            raise TypeError("inputs must be a text, a list of texts, a tensor of token ids or a dict "
                            f"with 'input_ids'; got {type(inputs).__name__}")
        if batch["input_ids"].shape[-1] == 0:
            raise ValueError("empty input: no tokens to run")
        return {k: v.to(self.device) for k, v in batch.items()}

    def forward(self, inputs) -> torch.Tensor:
        """Run the model: logits ``(batch, pos, d_vocab)`` for causal LMs, last hidden states
        ``(batch, pos, d_model)`` for encoders."""
        batch = self.tokenize(inputs)
        if self.arch.name == "headlab":
            return self.model(batch["input_ids"], attention_mask=batch["attention_mask"])
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
        return out.logits if self.causal else out.last_hidden_state

    __call__ = forward

    def metric(self, output: torch.Tensor, batch: dict, clean: torch.Tensor | None = None,
               kind: str | None = None, loss_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The default per-input metric (see :mod:`headlab.metrics`).

        Causal LMs: ``kind="loss"`` (next-token loss). Encoders: ``kind="cosine"``
        (1 - cos to the ``clean`` pooled embedding) or ``"retrieval"``; with
        ``clean=None`` an encoder's metric is its pooled embedding itself.
        """
        kind = kind or ("loss" if self.causal else "cosine")
        if kind == "loss":
            if not self.causal:
                raise ValueError(f"{self.name} is an encoder with no language-model head: use "
                                 "kind='cosine' or kind='retrieval'")
            return next_token_loss(output, batch["input_ids"], batch["attention_mask"], loss_mask)
        if self.causal:
            raise ValueError(f"metric kind {kind!r} is for encoders; {self.name} is a causal LM (use 'loss')")
        pooled = mean_pool(output, batch["attention_mask"])
        if clean is None:
            return pooled
        if kind == "cosine":
            return cosine_distance(pooled, clean.repeat(len(pooled) // len(clean), 1))
        if kind == "retrieval":
            return retrieval_loss(pooled, clean)
        raise ValueError(f"unknown metric kind {kind!r}: use 'loss' (causal LMs), 'cosine' or 'retrieval' (encoders)")

    # --------------------------------------------------------- the dispatcher
    def _gate_hook(self, layer: int):
        n_heads, d_head = self.n_heads, self.d_head

        def hook(module, args):
            z = args[0]
            shape = z.shape
            z = z.reshape(*shape[:-1], n_heads, d_head)  # (batch, pos, head, d_head)
            for edit in tuple(self._state.edits):
                z = edit(layer, z)
            for read in tuple(self._state.readers):
                read(layer, z)
            return (z.reshape(shape), *args[1:])

        return hook

    def _count_forward(self, module, args):
        self._state.forwards += 1

    @contextlib.contextmanager
    def _active(self, edit: _Edit | None = None, reader=None) -> Iterator[None]:
        """Install ``edit``/``reader`` for the duration of the block.

        The dispatcher hooks are installed when the first such block opens and
        removed when the last one closes, whatever happens inside.
        """
        state = self._state
        state.depth += 1
        try:
            if not state.handles:
                for layer, proj in enumerate(self._out_projs):
                    state.handles.append(proj.register_forward_pre_hook(self._gate_hook(layer)))
                state.handles.append(self.model.register_forward_pre_hook(self._count_forward))
            if edit is not None:
                state.edits.append(edit)
            if reader is not None:
                state.readers.append(reader)
            yield
        finally:
            if edit is not None and edit in state.edits:
                state.edits.remove(edit)
            if reader is not None and reader in state.readers:
                state.readers.remove(reader)
            state.depth -= 1
            if state.depth == 0:
                for handle in state.handles:
                    handle.remove()
                state.handles.clear()

    @contextlib.contextmanager
    def _suspended(self) -> Iterator[None]:
        """Run the clean model inside other contexts: outer edits are lifted and outer
        captures record nothing until the block ends (used to compute ablation references)."""
        state = self._state
        saved = state.edits, state.readers
        state.edits, state.readers = [], []
        state.level += 1
        try:
            yield
        finally:
            state.level -= 1
            state.edits, state.readers = saved

    def _check_reached(self, edit: _Edit, forwards_before: int) -> None:
        if self._state.forwards == forwards_before:
            return  # no forward ran in the block: nothing was produced
        missing = sorted(l for l in edit.layers if edit.reached.get(l, 0) == 0)
        if missing:
            raise AblationNotApplied(
                f"a forward pass ran but the gate of layer(s) {missing} was never reached, so the "
                "ablation had no effect. The model must call its attention output projection as a "
                "module (see headlab.heads.adapters); if you replaced or fused it, the gate is bypassed."
            )

    # ---------------------------------------------------------------- capture
    @contextlib.contextmanager
    def capture(self, names: Sequence[str] = ("pattern", "z"), layers: Iterable[int] | None = None,
                detach: bool = True) -> Iterator[ActivationCache]:
        """Record activations of every forward pass inside the block.

        ``names``: any of ``"pattern"``, ``"z"`` (``"result"`` is computed from ``z``).
        Hugging Face models are switched to eager attention while patterns are
        captured (the fast kernels return no weights) and switched back after.
        """
        names = set(names)
        if "result" in names:
            names = (names - {"result"}) | {"z"}
        unknown = names - {"pattern", "z"}
        if unknown:
            raise ValueError(f"unknown activation(s) {sorted(unknown)}: choose from 'pattern', 'z', 'result'")
        layers = set(range(self.n_layers)) if layers is None else set(layers)
        bad = [l for l in layers if not 0 <= l < self.n_layers]
        if bad:
            raise ValueError(f"layers {bad} out of range 0..{self.n_layers - 1}")
        cache = ActivationCache(self)
        keep = (lambda t: t.detach()) if detach else (lambda t: t)

        level = self._state.level

        def read_z(layer: int, z: torch.Tensor) -> None:
            if layer in layers and self._state.level == level:
                cache._record(f"blocks.{layer}.attn.hook_z", keep(z))

        with contextlib.ExitStack() as stack:
            if "pattern" in names:
                stack.enter_context(self._eager_attention())
                for layer in sorted(layers):
                    module = self.arch.pattern_module(self._blocks[layer])
                    hook = self._pattern_hook(cache, layer, keep, level)
                    stack.callback(module.register_forward_hook(hook).remove)
            reader = read_z if "z" in names else None
            stack.enter_context(self._active(reader=reader) if reader else contextlib.nullcontext())
            yield cache

    def _pattern_hook(self, cache: ActivationCache, layer: int, keep, level: int):
        index = self.arch.pattern_index

        def hook(module, args, output):
            if self._state.level != level:
                return
            pattern = output if index is None else output[index]
            if pattern is None:
                raise RuntimeError(f"layer {layer}'s attention returned no weights; the eager "
                                   "attention implementation is required to capture patterns")
            cache._record(f"blocks.{layer}.attn.hook_pattern", keep(pattern))

        return hook

    @contextlib.contextmanager
    def _eager_attention(self) -> Iterator[None]:
        config = getattr(self.model, "config", None)
        old = getattr(config, "_attn_implementation", None)
        if self.arch.name == "headlab" or old in (None, "eager"):
            yield
            return
        try:
            self.model.set_attn_implementation("eager")
            yield
        finally:
            self.model.set_attn_implementation(old)

    def run_with_cache(self, inputs, names: Sequence[str] = ("pattern", "z"),
                       layers: Iterable[int] | None = None) -> tuple[torch.Tensor, ActivationCache]:
        """One forward pass; returns ``(output, cache)`` with the batch's ids and mask in the cache."""
        batch = self.tokenize(inputs)
        with torch.no_grad(), self.capture(names, layers) as cache:
            out = self.forward(batch)
        cache.input_ids, cache.attention_mask = batch["input_ids"], batch["attention_mask"]
        return out, cache

    def head_results(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """Each head's write into the residual stream: ``(batch, pos, head, d_head)`` ->
        ``(batch, pos, head, d_model)``, bias excluded."""
        w = self.W_O(layer).to(z.dtype)  # (head, d_head, d_model)
        return torch.einsum("bphd,hdm->bphm", z, w)

    def W_O(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s output projection split by head: ``(head, d_head, d_model)``."""
        w = self._out_projs[layer].weight.detach()
        w = w if self.arch.conv1d else w.T  # (n_heads * d_head, d_model)
        return w.reshape(self.n_heads, self.d_head, self.d_model)

    # --------------------------------------------------------- custom patches
    @contextlib.contextmanager
    def patch_z(self, fn: Callable[[int, torch.Tensor], torch.Tensor],
                layers: Iterable[int] | None = None) -> Iterator["HeadModel"]:
        """Inside the block, layer ``l``'s head outputs ``z`` ``(batch, pos, head, d_head)`` are
        replaced by ``fn(l, z)`` (same shape) before ``W_O``, for ``l`` in ``layers`` (default: all).

        The general form of every intervention at the gate: e.g. replacing a layer's heads by their
        mean, or ``z`` by a sparse autoencoder's reconstruction. Nests with :meth:`ablate` and
        :meth:`capture` in entering order; fails loudly if a forward pass never reaches a gate.
        """
        layers = frozenset(range(self.n_layers) if layers is None else layers)
        bad = sorted(l for l in layers if not 0 <= l < self.n_layers)
        if bad or not layers:
            raise ValueError(f"layers {bad or '[]'} invalid: give layers in 0..{self.n_layers - 1}")
        edit = _FunctionEdit(fn, layers)
        before = self._state.forwards
        with self._active(edit=edit):
            yield self
            self._check_reached(edit, before)

    @contextlib.contextmanager
    def patch_pattern(self, fn: Callable[[int, torch.Tensor], torch.Tensor],
                      layers: Iterable[int] | None = None) -> Iterator["HeadModel"]:
        """Inside the block, layer ``l``'s attention pattern ``(batch, head, q_pos, k_pos)`` is
        replaced by ``fn(l, pattern)`` before it weighs the values (e.g. every head given its
        layer's mean pattern). Only the book's own GPT exposes the pattern before it is used
        (``hook_pattern``); Hugging Face attention computes its output internally, so other
        architectures raise ``NotImplementedError``."""
        if self.arch.name != "headlab":
            raise NotImplementedError(
                f"patch_pattern needs the pattern before it is applied to the values; {self.name} "
                f"({self.arch.name}) computes it inside its attention kernel. Use patch_z to intervene "
                "on head outputs, or a headlab organism.")
        layers = sorted(range(self.n_layers) if layers is None else layers)
        if not layers or any(not 0 <= l < self.n_layers for l in layers):
            raise ValueError(f"layers {layers} invalid: give layers in 0..{self.n_layers - 1}")
        level = self._state.level

        def make_hook(layer):
            def hook(module, args, output):
                if self._state.level != level:
                    return None
                new = fn(layer, output)
                if new.shape != output.shape:
                    raise ValueError(f"patch_pattern: fn returned shape {tuple(new.shape)} for a pattern "
                                     f"of shape {tuple(output.shape)}")
                return new
            return hook

        with contextlib.ExitStack() as stack:
            for layer in layers:
                module = self.arch.pattern_module(self._blocks[layer])
                stack.callback(module.register_forward_hook(make_hook(layer)).remove)
            yield self

    # ------------------------------------------------------------------- gates
    @contextlib.contextmanager
    def gated(self, gate: torch.Tensor, replacement: dict | None = None) -> Iterator["HeadModel"]:
        """Inside the block, head ``h`` of layer ``l`` writes ``g * z + (1 - g) * r`` instead of ``z``.

        The general form of :meth:`ablate`, for many ablations in one pass and for gradients:

        Args:
            gate: ``(n_layers, n_heads)`` (the same for every input) or ``(batch, n_layers,
                n_heads)`` (one value per input row, e.g. one ablation per tile of a batched
                sweep). Layers whose gates are all one are left untouched; a gate that
                requires grad makes ``d metric / d gate`` available.
            replacement: ``r`` per layer, as returned by :meth:`replacements` (``None``: zeros).

        Raises ``AblationNotApplied`` if a forward pass runs but a gated layer is never reached.
        """
        edit = _GateEdit(gate, replacement)
        before = self._state.forwards
        with self._active(edit=edit):
            yield self
            self._check_reached(edit, before)

    # ---------------------------------------------------------------- ablation
    @contextlib.contextmanager
    def ablate(self, heads: Iterable[Head], mode: str = "zero", reference=None,
               seed: int = 0, *, ablation: Ablation | None = None) -> Iterator["HeadModel"]:
        """Inside the block, the given heads are ablated in every forward pass.

        Args:
            heads: ``(layer, head)`` pairs.
            mode: ``"zero"`` (the head's output is replaced by 0), ``"mean"`` (by its
                mean over every real token of ``reference``), or ``"resample"``
                (at each position, by its output at the same position of a
                reference input drawn at random among those long enough).
            reference: texts (or a batch) for ``"mean"`` / ``"resample"``.
            seed: the draw of ``"resample"``.
            ablation: the same three as one :class:`~headlab.heads.ablation.Ablation`
                value (then leave ``mode``, ``reference`` and ``seed`` alone).

        Raises ``AblationNotApplied`` if a forward pass runs but a targeted gate is never reached.
        """
        if ablation is None:
            ablation = Ablation(mode, reference, seed)
        elif mode != "zero" or reference is not None or seed != 0:
            raise TypeError("give either ablation= or mode=/reference=/seed=, not both")
        heads = self.check_heads(heads)
        gate = torch.ones(self.n_layers, self.n_heads, device=self.device)
        for layer, head in heads:
            gate[layer, head] = 0.0
        replacement = ablation.replacements(self, sorted({l for l, _ in heads}))
        edit = _GateEdit(gate, replacement)
        before = self._state.forwards
        with self._active(edit=edit):
            yield self
            self._check_reached(edit, before)

    def replacements(self, mode: str, reference, layers: Sequence[int], seed: int = 0,
                     base_batch: int | None = None) -> dict | None:
        """What replaces an ablated head's ``z``, per layer (``None`` for zero ablation).

        ``mean``: a ``(head, d_head)`` tensor per layer, the mean over every real
        token of ``reference``. ``resample``: a :class:`Resampler` per layer that,
        given the ``z`` being run, returns for each input and position the head's
        output at the same position of a reference input drawn at random among
        those long enough (one draw per forward shape, shared by all layers).
        """
        Ablation(mode, reference, seed)  # refuses an unknown mode and a missing or needless reference
        if mode == "zero":
            return None
        ref = self.tokenize(reference)
        with torch.no_grad(), self._suspended(), self.capture(("z",), layers=layers) as cache:
            self.forward(ref)
        real = ref["attention_mask"].bool()  # (n_ref, pos)
        if mode == "mean":
            return {l: cache.z(l)[real].mean(dim=0) for l in layers}  # (head, d_head)
        draw = _ResampleDraw(real.sum(dim=1).cpu(), seed, base_batch)
        return {l: Resampler(cache.z(l), draw) for l in layers}

    # --------------------------------------------------------------- gradients
    def head_gradients(self, inputs, kind: str | None = None, loss_mask: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """``d metric_i / d g_{l,h}`` at ``g = 1`` for every input ``i``: ``(batch, n_layers, n_heads)``.

        The metric is the next-token loss for causal LMs and the self-retrieval
        loss for encoders (1 - cos has zero gradient at the clean model). Michel et
        al.'s importance is the mean over inputs of the absolute value. Parameters'
        ``.grad`` are left untouched.
        """
        batch = self.tokenize(inputs)
        kind = kind or ("loss" if self.causal else "retrieval")
        clean = None
        if not self.causal:
            with torch.no_grad():
                clean = self.metric(self.forward(batch), batch)
        n = batch["input_ids"].shape[0]
        gate = torch.ones(n, self.n_layers, self.n_heads, device=self.device, requires_grad=True)
        edit = _GateEdit(gate)
        with torch.enable_grad(), self._active(edit=edit):  # also inside a caller's no_grad
            out = self.forward(batch)
            values = self.metric(out, batch, clean=clean, kind=kind, loss_mask=loss_mask)
            (grad,) = torch.autograd.grad(values.sum(), gate)
        return grad
