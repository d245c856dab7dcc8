"""Where the book's computations run: ``resolve_device("auto")`` picks CUDA, then Apple's MPS, then the CPU.

Every entry point that takes a ``device`` (``headlab.load``, training, the sweep's chapters) accepts
``"auto"`` and passes it through :func:`resolve_device`, so a chapter opened in Colab with a GPU
runs on it and the same chapter on a laptop or in CI runs on the CPU, with no edit.
"""

from __future__ import annotations

import torch

__all__ = ["resolve_device", "DEVICE_CHOICES"]

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The :class:`torch.device` that ``device`` names; ``"auto"`` is CUDA, else MPS, else the CPU.

    ``"cuda"``, ``"cuda:1"`` or ``"mps"`` that this machine lacks raise a ``ValueError`` saying what
    is available instead (rather than failing later inside the first forward pass).
    """
    if isinstance(device, torch.device):
        name = str(device)
    elif isinstance(device, str) and device.strip():
        name = device.strip().lower()
    else:
        raise TypeError(f"device must be 'auto', 'cpu', 'cuda' (or 'cuda:N') or 'mps'; got {device!r}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"device {device!r} is not a device torch knows; use one of "
                         f"{', '.join(DEVICE_CHOICES)} (or 'cuda:N')") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this machine has no CUDA device; use 'auto' or 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif dev.type == "mps" and not _mps_available():
        raise ValueError(f"device {device!r}: MPS is not available here; use 'auto' or 'cpu'")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r}: headlab runs on {', '.join(DEVICE_CHOICES)}")
    return dev
