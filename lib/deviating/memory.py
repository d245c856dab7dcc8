"""Peak memory of one call, measured by the allocator that serves its arrays.

- numpy: ``tracemalloc``. NumPy reports every array buffer it allocates or
  frees to tracemalloc, so the traced peak includes the arrays (and, a little,
  Python objects).
- torch on CPU: the profiler's memory events (``profile_memory=True``). The
  CPU allocator reports each allocation and free with its size; their running
  sum, in time order, is the memory held by tensors, and its maximum is the peak.
- torch on CUDA: ``torch.cuda.max_memory_allocated`` after
  ``reset_peak_memory_stats``.

Each method reports the peak *above* what was allocated when the call began:
the memory the call itself needed (temporaries plus its result).
"""

from __future__ import annotations

import itertools
import tracemalloc
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile


def peak_memory(fn: Callable[..., Any], *args: Any, method: str | None = None, **kwargs: Any) -> int:
    """Peak bytes allocated while ``fn(*args, **kwargs)`` runs, above the level at its start.

    ``method`` is ``"tracemalloc"`` (numpy), ``"torch_cpu"`` or ``"cuda"``; by
    default it follows the first torch tensor among ``args`` (its device), or
    tracemalloc when there is none. The result of ``fn`` is counted (it is
    allocated during the call) and then dropped.
    """
    if method is None:
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        method = "tracemalloc" if tensor is None else "cuda" if tensor.is_cuda else "torch_cpu"
    if method == "tracemalloc":
        return _peak_tracemalloc(fn, args, kwargs)
    if method == "torch_cpu":
        return _peak_torch_cpu(fn, args, kwargs)
    if method == "cuda":
        return _peak_cuda(fn, args, kwargs)
    raise ValueError(f"method must be 'tracemalloc', 'torch_cpu', 'cuda' or None; got {method!r}")


def _peak_tracemalloc(fn, args, kwargs) -> int:
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        result = fn(*args, **kwargs)
        _, peak = tracemalloc.get_traced_memory()
        del result
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return peak - start


def _peak_torch_cpu(fn, args, kwargs) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    del result
    try:  # the raw allocator events, in time order
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns())
        sizes = [e.nbytes() for e in events if e.device_type() == torch.autograd.DeviceType.CPU]
    except AttributeError as err:  # the profiler's result API moved
        raise RuntimeError(
            f"this torch ({torch.__version__}) exposes no profiler memory events the way "
            "headlab expects; measure CPU torch memory another way, or use numpy (tracemalloc)"
        ) from err
    return max(itertools.accumulate(sizes, initial=0))


def _peak_cuda(fn, args, kwargs) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    result = fn(*args, **kwargs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del result
    return peak - start
