"""Reading the heads: :class:`ActivationCache` and the capture and pattern-patching contexts.

``CaptureMethods`` puts ``capture``, ``run_with_cache``, ``outputs_of``, ``residual_stream``,
``patch_pattern`` and ``patch_resid`` on :class:`~headlab.heads.model.HeadModel`. The head outputs
``z`` are read at the gate before ``W_O`` (after any active edit, :mod:`headlab.heads.gate`);
patterns are read where the model's adapter says they appear (:mod:`headlab.heads.adapters`).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator, Sequence

import torch

from headlab.heads.dispatch import Check
from headlab.heads.inputs import check_layer, check_layers, check_returned

__all__ = ["ActivationCache", "CaptureMethods", "ACTIVATIONS"]

#: What :meth:`CaptureMethods.capture` can record (``"result"`` is computed from ``"z"``).
ACTIVATIONS = ("pattern", "z", "result")


class PatternCheck(Check):
    """The hooks of one context (patterns, the residual stream): each forward must reach every one of ``layers``."""

    def __init__(self, layers: Iterable[int], what: str):
        super().__init__()
        self.layers, self.what = frozenset(layers), what


class ActivationCache:
    """Activations recorded during a ``HeadModel.capture`` block.

    Keys follow TransformerLens: ``blocks.{l}.attn.hook_pattern`` ``(batch, head, q_pos,
    k_pos)``, ``blocks.{l}.attn.hook_z`` ``(batch, pos, head, d_head)`` (exactly what enters
    ``W_O``, after any active edit), and ``blocks.{l}.attn.hook_result`` ``(batch, pos, head,
    d_model)``, each head's write into the residual stream (``z_h @ W_O_h``, without the bias,
    which belongs to no head), computed on demand from ``hook_z``.

    A key recorded by several forward passes is returned concatenated along the batch (they
    must share a sequence length); :meth:`all` gives the list.

    Attributes:
        input_ids, attention_mask: the batch of ``HeadModel.run_with_cache`` (``None`` after a
            bare ``capture`` block).
    """

    def __init__(self, head_model):
        self._hm = head_model
        self._store: dict[str, list[torch.Tensor]] = {}
        self.input_ids: torch.Tensor | None = None
        self.attention_mask: torch.Tensor | None = None

    def _record(self, key: str, value: torch.Tensor) -> None:
        self._store.setdefault(key, []).append(value)

    def keys(self) -> list[str]:
        """Every key that can be read, ``hook_result`` keys included."""
        keys = list(self._store)
        keys += [k.replace("hook_z", "hook_result") for k in keys if k.endswith("hook_z")]
        return keys

    def __contains__(self, key: str) -> bool:
        return key in self.keys()

    def all(self, key: str) -> list[torch.Tensor]:
        """Every recording of ``key``, one tensor per forward pass."""
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

    def _key(self, layer: int, name: str) -> str:
        return f"blocks.{check_layer(layer, self._hm.n_layers, self._hm.name)}.attn.hook_{name}"

    def pattern(self, layer: int) -> torch.Tensor:
        """``(batch, head, q_pos, k_pos)``"""
        return self[self._key(layer, "pattern")]

    def z(self, layer: int) -> torch.Tensor:
        """``(batch, pos, head, d_head)``"""
        return self[self._key(layer, "z")]

    def result(self, layer: int) -> torch.Tensor:
        """``(batch, pos, head, d_model)``"""
        return self[self._key(layer, "result")]


class CaptureMethods:
    """The reading contexts, methods of :class:`~headlab.heads.model.HeadModel` (mixed into it).

    They use the model's ``arch``, ``blocks``, ``dispatcher``, geometry, ``tokenize`` and ``forward``.
    """

    @contextlib.contextmanager
    def capture(self, names: Sequence[str] = ("pattern", "z"), layers: Iterable[int] | None = None,
                detach: bool = True) -> Iterator[ActivationCache]:
        """Record activations of every forward pass inside the block.

        Args:
            names: a collection of ``"pattern"``, ``"z"``, ``"result"`` (computed from ``z``); empty
                records nothing.
            layers: the layers to record (default: all).
            detach: record detached tensors (``False`` keeps them in the autograd graph).

        Hugging Face models are switched to eager attention while patterns are captured (the
        fast kernels return no weights) and switched back after. Each forward in the block must
        reach every captured layer, or it raises
        :class:`~headlab.heads.AblationNotApplied`.
        """
        if isinstance(names, (str, bytes)):
            raise TypeError(f"names must be a collection of activation names, got the string {names!r}; "
                            f"write names=({names!r},) (choose from {', '.join(map(repr, ACTIVATIONS))})")
        try:
            names = set(names)
        except TypeError:
            raise TypeError(f"names must be a collection of activation names such as ('pattern', 'z'), got "
                            f"{names!r}") from None
        unknown = sorted(map(repr, names - set(ACTIVATIONS)))
        if unknown:
            raise ValueError(f"unknown activation(s) {', '.join(unknown)}: choose from {', '.join(map(repr, ACTIVATIONS))}")
        if "result" in names:
            names = (names - {"result"}) | {"z"}
        if not isinstance(detach, bool):
            raise TypeError(f"detach must be True or False, got {detach!r}")
        layers = set(check_layers(layers, self.n_layers, self.name))
        cache = ActivationCache(self)
        keep = (lambda t: t.detach()) if detach else (lambda t: t)
        dispatcher = self.dispatcher
        level = dispatcher.level

        def read_z(layer: int, z: torch.Tensor) -> None:
            if layer in layers and dispatcher.level == level:
                cache._record(f"blocks.{layer}.attn.hook_z", keep(z))

        with contextlib.ExitStack() as stack:
            check = None
            if "pattern" in names:
                stack.enter_context(dispatcher.eager(lambda: self.arch.eager_attention(self.model)))
                check = PatternCheck(layers, "a capture of patterns")
                for layer in sorted(layers):
                    module = self.arch.pattern_module(self.blocks[layer])
                    stack.callback(dispatcher.hook(module, self._pattern_reader(cache, layer, keep, check)))
            if names:  # (an empty ``names`` records nothing: a block that only runs the model)
                stack.enter_context(dispatcher.active(reader=read_z if "z" in names else None, check=check))
            yield cache

    @contextlib.contextmanager
    def outputs_of(self, module: torch.nn.Module) -> Iterator[list]:
        """Inside the block, the output of ``module`` (a submodule of the model, e.g. its token
        embedding) in every forward pass of the calling thread is appended to the list this yields,
        as it is (not detached: a gradient can be taken with respect to it).

        The one way to read a module other than the heads; it goes through the dispatcher like
        every other hook of the head interface (nothing stored on the model).
        """
        if not isinstance(module, torch.nn.Module) or not any(m is module for m in self.model.modules()):
            raise ValueError(f"outputs_of needs a submodule of {self.name}, got {type(module).__name__}: "
                             "pass one of hm.model.modules() (e.g. its token embedding)")
        seen: list = []
        remove = self.dispatcher.hook(module, lambda mod, args, output: seen.append(output))
        try:
            yield seen
        finally:
            remove()

    @contextlib.contextmanager
    def residual_stream(self) -> Iterator[list]:
        """Inside the block, each forward appends ``n_layers + 1`` tensors ``(batch, pos, d_model)``
        to the list this yields: block 0's input (the embeddings), then each block's output (not detached)."""
        seen: list = []
        with contextlib.ExitStack() as stack:  # every family passes the stream as the first positional argument
            stack.callback(self.dispatcher.hook(self._blocks[0], lambda m, args: seen.append(args[0]), pre=True))
            for block in self._blocks:
                stack.callback(self.dispatcher.hook(
                    block, lambda module, args, out: seen.append(out[0] if isinstance(out, tuple) else out)))
            yield seen

    @contextlib.contextmanager
    def patch_resid(self, fn: Callable[[int, torch.Tensor], torch.Tensor],
                    layers: Iterable[int] | None = None) -> Iterator["CaptureMethods"]:
        """Inside the block, block ``l``'s output (the residual stream after layer ``l``, ``(batch, pos,
        d_model)``) is replaced by ``fn(l, resid)`` for ``l`` in ``layers`` (default: all)."""
        if not callable(fn):
            raise TypeError(f"patch_resid needs a callable fn(layer, resid) -> resid, got {fn!r}")
        layers = check_layers(layers, self.n_layers, self.name)
        check = PatternCheck(layers, "a patch_resid block")

        def make_hook(layer):
            def hook(module, args, output):
                check.reach(layer)
                x = output[0] if isinstance(output, tuple) else output
                new = check_returned(fn(layer, x), x, fn, "patch_resid", layer, "residual stream")
                return (new, *output[1:]) if isinstance(output, tuple) else new
            return hook

        with contextlib.ExitStack() as stack:
            for layer in layers:
                stack.callback(self.dispatcher.hook(self._blocks[layer], make_hook(layer)))
            stack.enter_context(self.dispatcher.active(check=check))
            yield self

    def _pattern_reader(self, cache: ActivationCache, layer: int, keep, check: Check):
        index = self.arch.pattern_index

        def hook(module, args, output):
            check.reach(layer)
            pattern = output if index is None else output[index]
            if pattern is None:
                raise RuntimeError(f"layer {layer}'s attention returned no weights; the eager "
                                   "attention implementation is required to capture patterns")
            cache._record(f"blocks.{layer}.attn.hook_pattern", keep(pattern))

        return hook

    def run_with_cache(self, inputs, names: Sequence[str] = ("pattern", "z"),
                       layers: Iterable[int] | None = None) -> tuple[torch.Tensor, ActivationCache]:
        """One forward pass; returns ``(output, cache)`` with the batch's ids and mask in the cache."""
        batch = self.tokenize(inputs)
        with torch.no_grad(), self.capture(names, layers) as cache:
            out = self.forward(batch)
        cache.input_ids, cache.attention_mask = batch["input_ids"], batch["attention_mask"]
        return out, cache

    @contextlib.contextmanager
    def patch_pattern(self, fn: Callable[[int, torch.Tensor], torch.Tensor],
                      layers: Iterable[int] | None = None) -> Iterator["CaptureMethods"]:
        """Inside the block, layer ``l``'s attention pattern ``(batch, head, q_pos, k_pos)`` is
        replaced by ``fn(l, pattern)`` before it weighs the values (e.g. every head given its
        layer's mean pattern).

        Only models whose adapter exposes the pattern before it is used support it (the book's
        own GPT, through ``hook_pattern``); Hugging Face attention computes its output
        internally, so other models raise ``NotImplementedError``.
        """
        if not self.arch.pattern_replaceable:
            raise NotImplementedError(
                f"patch_pattern needs the pattern before it is applied to the values; {self.name} "
                f"({self.arch.name}) computes it inside its attention kernel. Use patch_z to intervene "
                "on head outputs, or a headlab organism.")
        if not callable(fn):
            raise TypeError(f"patch_pattern needs a callable fn(layer, pattern) -> pattern, got {fn!r}")
        layers = check_layers(layers, self.n_layers, self.name)
        dispatcher = self.dispatcher
        check = PatternCheck(layers, "a patch_pattern block")

        def make_hook(layer):
            def hook(module, args, output):
                check.reach(layer)
                return check_returned(fn(layer, output), output, fn, "patch_pattern", layer, "pattern")
            return hook

        with contextlib.ExitStack() as stack:
            for layer in layers:
                module = self.arch.pattern_module(self.blocks[layer])
                stack.callback(dispatcher.hook(module, make_hook(layer)))
            stack.enter_context(dispatcher.active(check=check))
            yield self
