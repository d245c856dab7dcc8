"""Process-wide module hooks, routed by module identity (private to :mod:`headlab.heads`).

The head interface stores no hook on a model (a ``copy.deepcopy`` or pickle of it would carry
the hook along). Instead two hooks of the whole process
(``torch.nn.modules.module.register_module_forward_pre_hook`` and ``..._forward_hook``) exist
while any context is open, and hand each module's forward to the routes registered for that
module object. :mod:`headlab.heads.dispatch` is the only user.
"""

from __future__ import annotations

import threading
from typing import Callable

from torch import nn
from torch.nn.modules import module as torch_module

LOCK = threading.RLock()
PRE: dict[int, list[Callable]] = {}  # id(module) -> pre-hook routes
POST: dict[int, list[Callable]] = {}  # id(module) -> forward-hook routes
HELD: dict[int, tuple[nn.Module, int]] = {}  # id(module) -> (module, routes): keeps ids valid
HANDLES: list = []


def route_pre(module, args):
    """The process's forward pre-hook: ``module``'s pre-hook routes, in order."""
    routes = PRE.get(id(module))
    if not routes:
        return None
    changed = False
    for fn in tuple(routes):
        new = fn(module, args)
        if new is not None:
            args, changed = new, True
    return args if changed else None


def route_post(module, args, output):
    """The process's forward hook (called also while an exception leaves a module, with
    ``output=None``): ``module``'s forward-hook routes, in order."""
    routes = POST.get(id(module))
    if not routes:
        return None
    changed = False
    for fn in tuple(routes):
        new = fn(module, args, output)
        if new is not None:
            output, changed = new, True
    return output if changed else None


def add_route(table: dict, module: nn.Module, fn: Callable) -> Callable[[], None]:
    """Route ``module``'s forwards to ``fn`` (``table`` is :data:`PRE` or :data:`POST`); returns the
    remover. The process hooks are installed with the first route and removed with the last."""
    with LOCK:
        if not HANDLES:
            HANDLES.append(torch_module.register_module_forward_pre_hook(route_pre))
            HANDLES.append(torch_module.register_module_forward_hook(route_post, always_call=True))
        key = id(module)
        table.setdefault(key, []).append(fn)
        held = HELD.get(key, (module, 0))
        HELD[key] = (module, held[1] + 1)

    def remove() -> None:
        with LOCK:
            routes = table.get(key, [])
            if fn in routes:
                routes.remove(fn)
                if not routes:
                    del table[key]
                m, n = HELD[key]
                HELD[key] = (m, n - 1)
                if n == 1:
                    del HELD[key]
            if not HELD and HANDLES:
                for handle in HANDLES:
                    handle.remove()
                HANDLES.clear()

    return remove


def live_routes() -> int:
    """How many hooks every dispatcher of the process has installed now (0 outside every context)."""
    with LOCK:
        return sum(n for _, n in HELD.values())
