"""Models dispatched by accelerate (``headlab.load(name, device_map=...)``). An offloaded module
keeps its weights on the ``meta`` device between passes; the gate's hooks see real activations,
and :func:`resident` makes a weight readable (``W_O``, the unembedding)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

__all__ = ["is_offloaded", "resident", "execution_device"]


def is_offloaded(model: nn.Module) -> bool:
    """Whether some weight of ``model`` is offloaded (on the ``meta`` device until a pass loads it)."""
    return any(p.device.type == "meta" for p in model.parameters())


@contextlib.contextmanager
def resident(module: nn.Module) -> Iterator[nn.Module]:
    """Inside, every weight of ``module`` is a real tensor, also where accelerate offloads it (a
    tensor read inside stays valid after); a no-op for a module with no offloaded weight."""
    if not any(p.device.type == "meta" for p in module.parameters()):
        yield module
        return
    from accelerate.utils import align_module_device, has_offloaded_params

    with contextlib.ExitStack() as stack:
        for sub in module.modules():
            if has_offloaded_params(sub):
                stack.enter_context(align_module_device(sub))
        yield module


def execution_device(model: nn.Module) -> torch.device:
    """Where inputs go: for a dispatched model (``hf_device_map``), its embeddings' execution
    device (offloaded parts run on the first GPU, else the CPU); else its first parameter's."""
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return next(model.parameters()).device
    accelerators = [d for d in device_map.values() if d not in ("cpu", "disk")]
    first = next(iter(device_map.values()))
    if first in ("cpu", "disk"):
        first = accelerators[0] if accelerators else "cpu"
    return torch.device(f"cuda:{first}" if isinstance(first, int) else first)
