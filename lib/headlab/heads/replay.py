"""Replay and tiling: the two edits of a forward pass that a batched sweep makes, owned by the head interface.

:func:`headlab.analysis.sweep.sweep` runs many ablations in few forward passes. Two of its savings
change how the model's blocks run, so they live here, beside the gate, and nothing outside
``headlab.heads`` registers a hook or replaces a module's ``forward``:

* :class:`CleanRecord` -- the clean pass, recorded: every block's output (to replay) and the
  widest activation per token of the top block (to size the tiles). :meth:`CleanRecord.replaying`
  makes blocks ``0 .. below-1`` return their recorded outputs instead of running, and tells the
  dispatcher (``Dispatcher.replayed``) that those layers' gates acted already, in the recorded
  pass, under the same open contexts.
* :func:`tiled_from_gate` -- from one layer's gate on, ``n`` inputs run as ``k`` tiles, each tile
  with its own gate: the layer's attention runs once on the untiled inputs, ``W_O``'s input is
  tiled and gated, ``W_O``'s output is viewed as ``(k, n, pos, d_model)`` so the block's residual
  add broadcasts the clean stream over the tiles, and every block above runs on ``k * n`` rows
  (its batch-shaped arguments, such as masks, tiled on the way in).

The reading hooks (the record, the tiling at ``W_O`` and the merge after its block) go through the
dispatcher (:meth:`Dispatcher.hook`: counted in ``hooks_installed``, routed by the calling thread,
nothing stored on the model). Two things cannot be hooks: a block that must not run, and a block
whose keyword arguments must be tiled (torch's process-wide pre-hooks see no keyword arguments).
For those, and only inside the block of the context, the block's instance ``forward`` is replaced
by a router that runs the replacement for the calling thread alone (a sweep in one thread and a
plain forward, or another sweep, in another see each their own blocks); the original (a class's or
an instance's own) is put back whatever happens, once no thread replaces it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator

import torch

from headlab.heads.gate import GateEdit
from headlab.heads.head import Head

__all__ = ["CleanRecord", "tiled_from_gate", "map_tensors", "chunk_plan", "groups_per_pass", "tile_budget",
           "record_budget"]

_MISSING = object()


def map_tensors(x, fn: Callable[[torch.Tensor], Any]):
    """``x`` with ``fn`` applied to every tensor in it (nested tuples, lists and dicts)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(map_tensors(v, fn) for v in x)
    if isinstance(x, list):
        return [map_tensors(v, fn) for v in x]
    if isinstance(x, dict):
        return {key: map_tensors(v, fn) for key, v in x.items()}
    return x


class _Router:
    """A block's ``forward`` while some thread replays or tiles it: each thread runs its own
    replacement (the innermost it installed), every other thread the block's original forward."""

    def __init__(self, original: Callable, own: Any):
        self.original, self.own = original, own
        self.by_thread: dict[int, list[Callable]] = {}
        self.users = 0

    def __call__(self, *args, **kwargs):
        stack = self.by_thread.get(threading.get_ident())
        return (stack[-1] if stack else self.original)(*args, **kwargs)


_ROUTERS: "weakref.WeakKeyDictionary[torch.nn.Module, _Router]" = weakref.WeakKeyDictionary()
_ROUTERS_LOCK = threading.Lock()


@contextlib.contextmanager
def _instance_forward(block: torch.nn.Module, make: Callable[[Callable], Callable]) -> Iterator[None]:
    """Inside the block, ``block.forward`` is ``make(original forward)`` for the calling thread only
    (another thread's forward of the same block runs as before); afterwards, once no thread
    replaces it any more, the block's own instance ``forward`` (if it had one) or its class's is back."""
    tid = threading.get_ident()
    with _ROUTERS_LOCK:
        router = _ROUTERS.get(block)
        if router is None:
            router = _Router(block.forward, block.__dict__.get("forward", _MISSING))
            block.forward = router
            _ROUTERS[block] = router
        router.users += 1
        router.by_thread.setdefault(tid, []).append(make(router.original))
    try:
        yield
    finally:
        with _ROUTERS_LOCK:
            stack = router.by_thread[tid]
            stack.pop()
            if not stack:
                del router.by_thread[tid]
            router.users -= 1
            if router.users == 0:
                del _ROUTERS[block]
                del block.forward
                if router.own is not _MISSING:
                    block.forward = router.own


class CleanRecord:
    """The clean pass of a sweep, recorded.

    Args:
        hm: the :class:`~headlab.heads.model.HeadModel`.
        tokens: the number of tokens of the batch (``n * pos``), to measure activations per token.
        keep: keep every block's output (for :meth:`replaying`); ``False`` only measures.

    Attributes:
        outputs: ``layer -> output`` of each block in the recorded forward (empty unless ``keep``).
        seen: whether a forward ran inside :meth:`recording`.
        width: the widest floating activation per token among the top block's modules (floats).
    """

    def __init__(self, hm, tokens: int, keep: bool):
        if tokens < 1:
            raise ValueError(f"tokens must be positive, got {tokens}")
        self.hm, self.tokens, self.keep = hm, tokens, keep
        self.outputs: dict[int, Any] = {}
        self.seen = False
        self.width = 0

    @contextlib.contextmanager
    def recording(self) -> Iterator["CleanRecord"]:
        """Record every forward pass of the model run inside the block (the last one wins)."""
        def keep(layer: int):
            def read(module, args, output):
                self.seen = True
                if self.keep:
                    self.outputs[layer] = output
            return read

        def width(t: torch.Tensor) -> torch.Tensor:
            if t.is_floating_point():
                self.width = max(self.width, t.numel() // self.tokens)
            return t

        def measure(module, args, output):
            map_tensors(output, width)

        dispatcher, blocks = self.hm.dispatcher, self.hm.blocks
        with contextlib.ExitStack() as stack:
            for layer, block in enumerate(blocks):
                stack.callback(dispatcher.hook(block, keep(layer)))
            for module in blocks[-1].modules():
                stack.callback(dispatcher.hook(module, measure))
            yield self

    @contextlib.contextmanager
    def replaying(self, below: int) -> Iterator[None]:
        """Inside the block, blocks ``0 .. below-1`` do not run: each returns its recorded output.

        Only valid for forwards of the recorded batch under the contexts that were open when it was
        recorded (the dispatcher excuses those layers' gates, which acted in the recorded pass).
        """
        if not 0 <= below <= self.hm.n_layers:
            raise ValueError(f"below must be between 0 and {self.hm.n_layers}, got {below}")
        missing = [l for l in range(below) if l not in self.outputs]
        if missing:
            raise ValueError(f"layers {missing} were not recorded (record with keep=True, and run a forward "
                             "inside recording() first)")
        with contextlib.ExitStack() as stack:
            for layer, block in enumerate(self.hm.blocks[:below]):
                out = self.outputs[layer]
                stack.enter_context(_instance_forward(block, lambda original, out=out: lambda *a, **kw: out))
            stack.enter_context(self.hm.dispatcher.replayed(range(below)))
            yield


@contextlib.contextmanager
def tiled_from_gate(hm, first: int, n: int, k: int, gate: GateEdit) -> Iterator[None]:
    """Inside the block, from layer ``first``'s gate on, the ``n`` inputs run as ``k`` tiles.

    ``gate`` (that layer's part of the sweep's gate, one row per tiled input) is applied to the
    tiled ``z`` after the interface's own gate (every other open edit, outer ones included) ran on
    the untiled one. Blocks above ``first`` receive their batch-shaped arguments tiled; the output
    of block ``first`` is flattened to ``(k * n, ...)``.
    """
    if k < 1 or n < 1:
        raise ValueError(f"n ({n}) and k ({k}) must be positive")
    tiled: dict[int, tuple] = {}  # each argument tiled once, however many blocks read it

    def tile(x: torch.Tensor) -> torch.Tensor:
        if not x.dim() or x.shape[0] != n:
            return x
        if id(x) not in tiled:  # holding x keeps its id from being reused by another tensor
            tiled[id(x)] = (x, x.repeat(k, *([1] * (x.dim() - 1))))
        return tiled[id(x)][1]

    def tile_z(module, args):
        z = args[0].repeat(k, *([1] * (args[0].dim() - 1)))
        z = gate.apply(first, z.unflatten(-1, (hm.n_heads, hm.d_head))).flatten(-2)
        return (z, *args[1:])

    def merge(module, args, output):
        return map_tensors(output, lambda t: t.flatten(0, 1) if t.dim() > 2 and t.shape[:2] == (k, n) else t)

    def tiling(original: Callable) -> Callable:
        return lambda *args, **kwargs: original(*map_tensors(args, tile), **map_tensors(kwargs, tile))

    dispatcher, proj, blocks = hm.dispatcher, hm.out_proj(first), hm.blocks
    with contextlib.ExitStack() as stack:
        # the gates' routes exist before the tiling's, so the interface's gate runs first
        stack.enter_context(dispatcher.active())
        stack.callback(dispatcher.hook(proj, tile_z, pre=True))
        stack.callback(dispatcher.hook(proj, lambda module, args, output: output.unflatten(0, (k, n))))
        stack.callback(dispatcher.hook(blocks[first], merge))
        for block in blocks[first + 1:]:
            stack.enter_context(_instance_forward(block, tiling))
        stack.callback(tiled.clear)
        yield


# ------------------------------------------------------------------ the tiling plan

_CPU_TILE_BYTES = 8 * 2**20  # measured: benchmarks/sweep.py --sections tiles (see tile_budget)
_CPU_RECORD_BYTES = 2**30  # the clean outputs kept for replay on a CPU, at most


def tile_budget(device: torch.device | str) -> int:
    """The bytes the widest activation of one forward pass of a sweep may take on ``device``.

    On a CPU a fixed 8 MiB, the same on every machine (so a sweep's chunks, and its floats, do
    not depend on the machine). ``benchmarks/sweep.py --sections tiles`` measured why: on the
    project's CPU, GPT-2's element-wise work costs several times more per row once a tile
    outgrows the cache; tiles of about a thousand tokens (6 MiB of MLP activations) beat both
    one copy of the inputs and all twelve heads of a layer at once. On a CUDA device, a quarter
    of the free memory (wide tiles keep it busy); 1 GiB on other accelerators.
    """
    return _memory(torch.device(device), _CPU_TILE_BYTES)


def record_budget(device: torch.device | str) -> int:
    """The bytes of clean outputs a sweep keeps for replay on ``device`` (1 GiB on a CPU)."""
    return _memory(torch.device(device), _CPU_RECORD_BYTES)


def _memory(device: torch.device, on_cpu: int) -> int:
    """``on_cpu`` bytes on a CPU, a quarter of the free memory on a CUDA device, 1 GiB on others."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] // 4
    return on_cpu if device.type == "cpu" else 2**30


def groups_per_pass(copy_bytes: int, budget: int, cap: int) -> int:
    """How many groups one forward pass runs: as many tiles of ``copy_bytes`` (the widest
    activation of one copy of the inputs) as fit in ``budget``, between 1 and ``cap``."""
    if copy_bytes <= 0 or cap < 1:
        raise ValueError(f"copy_bytes ({copy_bytes}) and cap ({cap}) must be positive")
    return int(max(1, min(cap, budget // copy_bytes)))


def chunk_plan(groups: list[tuple[Head, ...]], per_pass: int) -> list[list[int]]:
    """Indices of the groups each forward pass runs.

    Groups that share their lowest layer run together (mixing lowest layers would run the
    lower one's blocks for groups that do not need them), at most ``per_pass`` at a time,
    split into chunks of near-equal size (12 groups at 5 per pass: 4 + 4 + 4, not 5 + 5 + 2).
    Lowest layers in increasing order, groups in their given order within a layer.
    """
    if per_pass < 1:
        raise ValueError(f"per_pass must be at least 1, got {per_pass}")
    by_first: dict[int, list[int]] = {}
    for i, group in enumerate(groups):
        by_first.setdefault(min(l for l, _ in group), []).append(i)
    plan = []
    for first in sorted(by_first):
        idx = by_first[first]
        n_chunks = -(-len(idx) // per_pass)
        size, extra = divmod(len(idx), n_chunks)
        start = 0
        for c in range(n_chunks):
            stop = start + size + (c < extra)
            plan.append(idx[start:stop])
            start = stop
    return plan
