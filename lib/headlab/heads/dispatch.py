"""The hooks of the head interface: one dispatcher per model, one state per thread.

A :class:`Dispatcher` owns a pre-hook on each attention output projection. At each, it
reshapes the projection's input into ``z`` ``(batch, pos, head, d_head)``, applies the
calling thread's active edits (:mod:`headlab.heads.gate`) in the order their contexts were
entered, and hands the edited ``z`` to that thread's readers (captures,
:mod:`headlab.heads.capture`). Every other hook a context needs (pattern readers, pattern
patches) is registered through it too, so that :attr:`Dispatcher.installed` says how many
hooks the head interface has on the model.

Three guarantees, each tested:

* **Every forward is checked, not every block.** A hook on the whole model opens a record at
  the start of each forward and closes it at the end: if a layer that an active edit changes
  (or a pattern hook reads) was not reached *in that forward*, the forward raises
  :class:`~headlab.heads.AblationNotApplied`. Forwards run by ``Dispatcher.suspended`` (the
  clean reference pass of a mean ablation opened inside another ablation) have no active edit
  and so never count. The book's own GPT also reports each of its forwards to the dispatcher
  through ``headlab.models.witness``, from inside its computation: a forward that skipped
  the hooks altogether (a ``torch.jit.trace`` made before the block, a ``copy.deepcopy`` of
  the model) raises too. Tracing the model inside a block is refused (the trace would bake
  the ablation in).
* **Nothing is stored on the model.** The hooks are module hooks of the whole process
  (``torch.nn.modules.module.register_module_forward_pre_hook``), routed to the dispatcher by
  module identity, and exist only while a context is open. ``copy.deepcopy`` (or pickling) of
  the model inside a block copies no hook. (The sweep's replay and tiling, :mod:`headlab.heads.replay`,
  also replace a block's instance ``forward``, for the length of one chunk's forward pass.)
* **State is per thread.** Edits, readers and suspension belong to the thread that opened
  the context; a forward in another thread sees none of them (it runs the clean model, and is
  not counted). The hooks are installed while any thread has a context open.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from headlab.heads._routes import LOCK as _LOCK
from headlab.heads._routes import POST as _POST
from headlab.heads._routes import PRE as _PRE
from headlab.heads._routes import add_route as _add_route
from headlab.heads._routes import live_routes

__all__ = ["Dispatcher", "Check", "AblationNotApplied", "live_routes"]

Rewrite = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, z) -> new z
Reader = Callable[[int, torch.Tensor], None]  # (layer, z) -> None


class AblationNotApplied(RuntimeError):
    """A forward pass ran inside an ablation (or any context), but did not pass through a hook
    the context needs (the gate of a targeted layer, a pattern hook), so the context had no
    effect on it. Importable from ``headlab.heads.gate`` and ``headlab.heads``."""


class Check:
    """Something a context needs every forward to reach: ``layers``, counted in ``reached``.

    Edits (``headlab.heads.gate.Edit``) are checks; so are pattern readers and patches.
    ``what`` names it in the error of a forward that missed a layer.
    """

    what = "the context"
    layers: frozenset[int] = frozenset()

    def __init__(self) -> None:
        self.reached: dict[int, int] = {}

    def reach(self, layer: int) -> None:
        """Record that ``layer``'s hook ran."""
        self.reached[layer] = self.reached.get(layer, 0) + 1


# ------------------------------------------------------------------------- one per model


class _ThreadState(threading.local):
    """What one thread has open on one dispatcher."""

    def __init__(self) -> None:
        self.edits: list[Rewrite] = []
        self.readers: list[Reader] = []
        self.checks: list[Check] = []
        self.level = 0
        self.depth = 0  # contexts this thread has open
        self.forwards = 0  # forwards of the model this thread ran with a context open
        self.eager = 0  # forwards of the model in progress that passed the model's own hook
        self.frames: list[dict[int, tuple[Check, dict[int, int]]]] = []
        self.replayed: frozenset[int] = frozenset()  # layers whose outputs are replayed, not run


class Dispatcher:
    """The hooks of one model: a pre-hook on each output projection, and every hook a context adds.

    The hooks exist while any context is open (:meth:`active`, :meth:`hook`), in any thread,
    and are removed when the last one closes, whatever happens inside. Everything a context
    adds belongs to the thread that opened it.

    Args:
        model: the whole model (its hook opens and closes the record of each forward).
        out_projs: each layer's attention output projection, first to last.
        n_heads, d_head: the geometry ``z`` is reshaped to.
        name: the model's name, for messages.

    Attributes:
        edits: the calling thread's active edits ``(layer, z) -> z``, applied in order at every gate.
        readers: the calling thread's active readers ``(layer, z) -> None``, called after the edits.
        level: incremented while the calling thread's outer contexts are suspended
            (``Dispatcher.suspended``); a hook added at one level ignores forward passes run at another.
        forwards: how many forward passes of the whole model the calling thread ran while a
            context was open.
    """

    def __init__(self, model: nn.Module, out_projs: Sequence[nn.Module], n_heads: int, d_head: int,
                 name: str = "the model"):
        self.model, self.out_projs, self.n_heads, self.d_head = model, list(out_projs), n_heads, d_head
        self.name = name
        self._local = _ThreadState()
        self._users = 0  # open contexts over every thread that need the gates
        self._gates: list[Callable[[], None]] = []
        self._live = 0
        self._eager_users = 0
        self._eager_stack: contextlib.ExitStack | None = None

    def __deepcopy__(self, memo):
        # A copy of a HeadModel gets a fresh dispatcher for the copied model (no state, no hooks).
        return Dispatcher(copy.deepcopy(self.model, memo), [copy.deepcopy(p, memo) for p in self.out_projs],
                          self.n_heads, self.d_head, self.name)

    @property
    def edits(self) -> list[Rewrite]:
        return self._local.edits

    @property
    def readers(self) -> list[Reader]:
        return self._local.readers

    @property
    def level(self) -> int:
        return self._local.level

    @property
    def forwards(self) -> int:
        return self._local.forwards

    @property
    def installed(self) -> int:
        """The number of hooks installed through this dispatcher and not yet removed."""
        return self._live

    @property
    def idle(self) -> bool:
        """Whether the calling thread has nothing open here (no edit, reader or check, not
        suspended, no forward record left), as every context leaves it, error or not."""
        s = self._local
        return not (s.edits or s.readers or s.checks or s.level or s.depth or s.frames or s.eager)

    def _counted(self, remove: Callable[[], None]) -> Callable[[], None]:
        with _LOCK:
            self._live += 1
        done = []

        def once() -> None:
            if not done:
                done.append(True)
                remove()
                with _LOCK:
                    self._live -= 1

        return once

    def hook(self, module: nn.Module, fn: Callable, pre: bool = False) -> Callable[[], None]:
        """Register ``fn`` as a forward (``pre``: forward pre-) hook of ``module`` for the calling
        thread at its current level; returns its remover.

        ``fn`` is called only for forwards run by that thread at that level, and a forward hook
        only when the module returned (not while an exception passes through it).
        """
        state, tid, level = self._local, threading.get_ident(), self._local.level
        if pre:
            def route(module, args):
                if threading.get_ident() == tid and state.level == level:
                    return fn(module, args)
                return None
        else:
            def route(module, args, output):
                if output is not None and threading.get_ident() == tid and state.level == level:
                    return fn(module, args, output)
                return None
        return self._counted(_add_route(_PRE if pre else _POST, module, route))

    # ------------------------------------------------------------------ the routes

    def _gate(self, layer: int):
        state = self._local

        def gate(module, args):
            edits, readers = state.edits, state.readers
            if not edits and not readers:
                return None
            z = args[0]
            shape = z.shape
            z = z.reshape(*shape[:-1], self.n_heads, self.d_head)  # (batch, pos, head, d_head)
            for edit in tuple(edits):
                z = edit(layer, z)
            for read in tuple(readers):
                read(layer, z)
            return (z.reshape(shape), *args[1:])

        return gate

    def _forward_starts(self, module, args) -> None:
        state = self._local
        if not state.depth:  # this thread has nothing open: nothing to check
            return
        if torch.jit.is_tracing() and state.checks:
            raise AblationNotApplied(
                f"{self.name} is being traced inside a headlab context: the trace would record this "
                "context's edits as constants and apply them forever. Trace the model outside every "
                "context (and call the model itself, not the trace, inside blocks).")
        state.forwards += 1
        state.eager += 1
        state.frames.append({id(c): (c, dict(c.reached)) for c in state.checks})

    def _forward_ends(self, module, args, output) -> None:
        state = self._local
        if not state.depth or not state.frames:
            return
        frame = state.frames.pop()
        state.eager -= 1
        if output is None:  # the forward raised: that error is the one to see
            return
        active = {id(c) for c in state.checks}
        for key, (check, before) in frame.items():
            if key not in active:
                continue
            missing = sorted(l for l in check.layers
                             if l not in state.replayed and check.reached.get(l, 0) == before.get(l, 0))
            if missing:
                raise AblationNotApplied(
                    f"a forward pass of {self.name} ran inside {check.what} but never reached the hook of "
                    f"layer(s) {missing}, so {check.what} had no effect there. The model must call its "
                    "attention output projection (and, for patterns, its pattern module) as modules "
                    "(see headlab.heads.adapters); if you replaced or fused them, the hooks are bypassed.")

    def witness(self) -> None:
        """Called from inside each forward of the model, however it was called (the book's GPT
        reports its forwards through ``headlab.models.witness``): raises when the calling
        thread has a context open but this forward did not pass through the model's own hook."""
        state = self._local
        if state.checks and state.eager == 0:
            raise AblationNotApplied(
                f"a forward pass of {self.name}'s weights ran inside {state.checks[-1].what} without passing "
                "through headlab's hooks (a torch.jit.trace or torch.compile made before the block, or a "
                "copy.deepcopy of the model?), so the context does not apply to it. Inside the block, call "
                "the model itself (hm(...) or hm.model(...)).")

    # ------------------------------------------------------------------ contexts

    @contextlib.contextmanager
    def active(self, edit: Rewrite | None = None, reader: Reader | None = None,
               check: Check | None = None) -> Iterator[None]:
        """Install ``edit`` and/or ``reader`` for the calling thread for the duration of the block;
        ``check`` (an edit is one by itself) must be reached by every forward run in it."""
        state = self._local
        with _LOCK:
            self._users += 1
            try:
                if not self._gates:
                    self._gates = [self._counted(_add_route(_PRE, proj, self._gate(layer)))
                                   for layer, proj in enumerate(self.out_projs)]
                    self._gates.append(self._counted(_add_route(_PRE, self.model, self._forward_starts)))
                    self._gates.append(self._counted(_add_route(_POST, self.model, self._forward_ends)))
            except BaseException:
                self._release()
                raise
        state.depth += 1
        checks = [c for c in (check, edit) if isinstance(c, Check)]
        try:
            if edit is not None:
                state.edits.append(edit)
            if reader is not None:
                state.readers.append(reader)
            state.checks.extend(checks)
            yield
        finally:
            for lst, item in ((state.edits, edit), (state.readers, reader)):
                if item is not None and item in lst:
                    lst.remove(item)
            for c in checks:
                if c in state.checks:
                    state.checks.remove(c)
            state.depth -= 1
            if state.depth == 0:
                state.frames.clear()
                state.eager = 0
            with _LOCK:
                self._release()

    def _release(self) -> None:
        self._users -= 1
        if self._users == 0:
            for remove in self._gates:
                remove()
            self._gates = []

    @contextlib.contextmanager
    def replayed(self, layers: Sequence[int]) -> Iterator[None]:
        """Forwards of the calling thread in this block do not run ``layers``: their blocks return
        outputs recorded by an earlier forward *under the same open contexts* (the sweep's clean
        record), so those contexts already acted there and the checks do not ask for those
        layers' hooks again. Only the caller that recorded the outputs can promise this:
        :meth:`headlab.heads.replay.CleanRecord.replaying` is the one that does."""
        layers = frozenset(int(l) for l in layers)
        bad = sorted(l for l in layers if not 0 <= l < len(self.out_projs))
        if bad:
            raise ValueError(f"replayed layers {bad} are not layers of {self.name} "
                             f"(0..{len(self.out_projs) - 1})")
        state = self._local
        saved = state.replayed
        state.replayed = saved | layers
        try:
            yield
        finally:
            state.replayed = saved

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Run the clean model inside other contexts of the calling thread: its outer edits are
        lifted and its outer readers record nothing until the block ends (used to compute
        ablation references). Forwards run here are not checked against the outer contexts."""
        state = self._local
        saved = state.edits, state.readers, state.checks
        state.edits, state.readers, state.checks = [], [], []
        state.level += 1
        try:
            yield
        finally:
            state.level -= 1
            state.edits, state.readers, state.checks = saved

    @contextlib.contextmanager
    def eager(self, switch: Callable[[], contextlib.AbstractContextManager]) -> Iterator[None]:
        """Hold ``switch()`` (the adapter's switch to eager attention) open while any thread needs it.

        The first context to enter switches the model, the last to leave switches it back, so two
        threads capturing patterns at once do not undo each other's switch.
        """
        with _LOCK:
            if self._eager_users == 0:
                stack = contextlib.ExitStack()
                stack.enter_context(switch())
                self._eager_stack = stack
            self._eager_users += 1
        try:
            yield
        finally:
            with _LOCK:
                self._eager_users -= 1
                if self._eager_users == 0 and self._eager_stack is not None:
                    stack, self._eager_stack = self._eager_stack, None
                    stack.close()
