"""Every forward of the book's GPT reports itself, however it is called: the witness op.

A forward that skips the head interface's hooks (a trace or deep copy made before an
ablation block) would run clean and say nothing. So :class:`~headlab.models.gpt.GPT` passes
its ids through ``torch.ops.headlab.witness(ids, token)``, which a trace records; it calls
the watchers registered for ``token`` (the model's ``witness_token``, kept by a deep copy).
:func:`claim` gives a model a token of its own.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import Callable

import torch

__all__ = ["witness", "claim", "watch", "new_token"]

_COUNTER = itertools.count(1)
_LOCK = threading.Lock()
# token -> [(a weak reference to the model, a weak reference to its watcher, a bound method)]
_WATCHERS: dict[int, list[tuple[weakref.ref, weakref.WeakMethod]]] = {}
# tokens whose model died: emptied under _LOCK by _purge. A weak reference's callback may run in
# the middle of any allocation (a garbage collection), also while this thread holds _LOCK, so it
# must never take the lock itself: it only appends here (as WeakValueDictionary does).
_DEAD: list[int] = []


def _purge() -> None:
    """Drop the entries of dead models (call with ``_LOCK`` held)."""
    while _DEAD:
        token = _DEAD.pop()
        entries = [e for e in _WATCHERS.get(token, ()) if e[0]() is not None]
        if entries:
            _WATCHERS[token] = entries
        else:
            _WATCHERS.pop(token, None)


def new_token() -> int:
    """A token no model of this process has had."""
    return next(_COUNTER)


def _witness_impl(ids: torch.Tensor, token: int) -> torch.Tensor:
    for _, method in tuple(_WATCHERS.get(token, ())):
        watcher = method()
        if watcher is not None:
            watcher()
    return ids.clone()


def _register() -> None:
    """Register ``headlab::witness`` with torch, once per process, at the first forward that needs it
    (never at import: importing headlab registers nothing)."""
    with _LOCK:
        if hasattr(torch.ops.headlab, "witness"):  # registered already (also after a reload of this module)
            return
        op = torch.library.custom_op("headlab::witness", _witness_impl, mutates_args=())

        @op.register_fake
        def _(ids: torch.Tensor, token: int) -> torch.Tensor:
            return torch.empty_like(ids)


def witness(ids: torch.Tensor, token: int) -> torch.Tensor:
    """``ids`` (a copy), after telling the watchers of ``token`` that a forward is running.

    Skipped while the model is exported to ONNX (the browser's runtime knows no such op).
    """
    if torch.onnx.is_in_onnx_export():
        return ids
    if not hasattr(torch.ops.headlab, "witness"):
        _register()
    return torch.ops.headlab.witness(ids, token)


def claim(model: torch.nn.Module) -> int:
    """Give ``model`` a token no other live watched model holds (a deep copy shares its
    original's until then); returns it."""
    with _LOCK:
        _purge()
        token = getattr(model, "witness_token", None)
        owners = [ref() for ref, _ in _WATCHERS.get(token, ())] if token is not None else []
        if token is None or any(owner is not None and owner is not model for owner in owners):
            token = new_token()
            model.witness_token = token
        return token


def watch(model: torch.nn.Module, watcher: Callable[[], None]) -> None:
    """Call ``watcher()`` at every forward of ``model`` (traced or compiled copies included),
    for as long as both live: ``watcher`` is a bound method, held by a weak reference, so
    watching keeps neither it nor the model alive."""
    token = claim(model)

    def forget(_ref, token=token) -> None:  # no lock here: see _DEAD
        _DEAD.append(token)

    with _LOCK:
        _purge()
        alive = [e for e in _WATCHERS.get(token, ()) if e[0]() is not None and e[1]() is not None]
        _WATCHERS[token] = alive + [(weakref.ref(model, forget), weakref.WeakMethod(watcher))]
