"""The hooks of the head interface: one dispatcher per model.

A :class:`Dispatcher` owns one forward pre-hook per attention output projection. At each, it
reshapes the projection's input into ``z`` ``(batch, pos, head, d_head)``, applies the active
edits (:mod:`headlab.heads.gate`) in the order their contexts were entered, and hands the
edited ``z`` to the active readers (captures, :mod:`headlab.heads.capture`). Every other hook a
context needs (pattern readers, pattern patches) is registered through it too, so that
:attr:`Dispatcher.installed` says how many hooks are on the model.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

__all__ = ["Dispatcher"]

Rewrite = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, z) -> new z
Reader = Callable[[int, torch.Tensor], None]  # (layer, z) -> None


class Dispatcher:
    """The hooks of one model: a pre-hook on each output projection, and every hook a context adds.

    The pre-hooks are installed when the first context opens (:meth:`active`) and removed when
    the last one closes, whatever happens inside. Every hook goes through :meth:`hook`, so
    :attr:`installed` is the number of hooks the head interface has on the model right now.

    Args:
        model: the whole model (a pre-hook on it counts forward passes).
        out_projs: each layer's attention output projection, first to last.
        n_heads, d_head: the geometry ``z`` is reshaped to.

    Attributes:
        edits: the active edits ``(layer, z) -> z``, applied in order at every gate.
        readers: the active readers ``(layer, z) -> None``, called after the edits.
        level: incremented while outer edits and readers are suspended (:meth:`suspended`); a
            hook added at one level ignores forward passes run at another.
        forwards: how many forward passes of the whole model ran while a context was open.
    """

    def __init__(self, model: nn.Module, out_projs: Sequence[nn.Module], n_heads: int, d_head: int):
        self.model, self.out_projs, self.n_heads, self.d_head = model, list(out_projs), n_heads, d_head
        self.edits: list[Rewrite] = []
        self.readers: list[Reader] = []
        self.level = 0
        self.forwards = 0
        self._depth = 0  # open contexts that need the pre-hooks
        self._gates: list[Callable[[], None]] = []
        self._live: set[int] = set()

    @property
    def installed(self) -> int:
        """The number of hooks installed through this dispatcher and not yet removed."""
        return len(self._live)

    def hook(self, module: nn.Module, fn: Callable, pre: bool = False) -> Callable[[], None]:
        """Register ``fn`` as a forward (``pre``: forward pre-) hook of ``module``; returns its remover."""
        handle = (module.register_forward_pre_hook if pre else module.register_forward_hook)(fn)
        self._live.add(handle.id)

        def remove() -> None:
            handle.remove()
            self._live.discard(handle.id)

        return remove

    def _gate(self, layer: int):
        def hook(module, args):
            z = args[0]
            shape = z.shape
            z = z.reshape(*shape[:-1], self.n_heads, self.d_head)  # (batch, pos, head, d_head)
            for edit in tuple(self.edits):
                z = edit(layer, z)
            for read in tuple(self.readers):
                read(layer, z)
            return (z.reshape(shape), *args[1:])

        return hook

    def _count(self, module, args) -> None:
        self.forwards += 1

    @contextlib.contextmanager
    def active(self, edit: Rewrite | None = None, reader: Reader | None = None) -> Iterator[None]:
        """Install ``edit`` and/or ``reader`` for the duration of the block."""
        self._depth += 1
        try:
            if not self._gates:
                self._gates = [self.hook(proj, self._gate(layer), pre=True)
                               for layer, proj in enumerate(self.out_projs)]
                self._gates.append(self.hook(self.model, self._count, pre=True))
            if edit is not None:
                self.edits.append(edit)
            if reader is not None:
                self.readers.append(reader)
            yield
        finally:
            if edit is not None and edit in self.edits:
                self.edits.remove(edit)
            if reader is not None and reader in self.readers:
                self.readers.remove(reader)
            self._depth -= 1
            if self._depth == 0:
                for remove in self._gates:
                    remove()
                self._gates = []

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Run the clean model inside other contexts: outer edits are lifted and outer readers
        record nothing until the block ends (used to compute ablation references)."""
        saved = self.edits, self.readers
        self.edits, self.readers = [], []
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1
            self.edits, self.readers = saved
