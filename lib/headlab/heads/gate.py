"""What an intervention writes into a layer's head outputs ``z``.

The head interface (:mod:`headlab.heads.model`) owns one dispatcher per attention block;
the objects here are what it applies: a gate with replacements (zero, mean and
resample ablation, gradients), an arbitrary function of ``z`` (``patch_z``), and
the draw that decides which reference input supplies each position in resample
ablation. Each edit counts its applications, so that an ablation whose gate was
never reached fails loudly instead of changing nothing.
"""

from __future__ import annotations

from typing import Callable

import torch


class _Edit:
    """Something that rewrites ``z`` at the gate. Counts how often each layer's gate ran."""

    layers: frozenset[int]

    def __init__(self) -> None:
        self.reached: dict[int, int] = {}

    def __call__(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        self.reached[layer] = self.reached.get(layer, 0) + 1
        return self.apply(layer, z)

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class _GateEdit(_Edit):
    """``z[b, :, h] <- g[b, l, h] * z[b, :, h] + (1 - g[b, l, h]) * r_l[b, :, h]``.

    ``gate``: ``(n_layers, n_heads)`` (same for every input) or
    ``(batch, n_layers, n_heads)`` (one value per input, for batched sweeps).
    ``replacement``: ``None`` (zeros) or, per layer, a tensor broadcastable to
    ``(batch, pos, head, d_head)`` or a callable ``z -> tensor`` (resampling). Layers whose gates are all one are left
    untouched (and still counted as reached).
    """

    def __init__(self, gate: torch.Tensor, replacement: dict[int, torch.Tensor] | None = None):
        super().__init__()
        self.gate = gate
        self.replacement = replacement or {}
        per_layer = gate if gate.dim() == 2 else gate.transpose(0, 1)  # (n_layers, ...)
        self.layers = frozenset(
            l for l in range(per_layer.shape[0]) if gate.requires_grad or not torch.all(per_layer[l] == 1)
        )

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        if layer not in self.layers:
            return z
        g = self.gate[layer] if self.gate.dim() == 2 else self.gate[:, layer]
        if g.dim() == 2 and g.shape[0] != z.shape[0]:
            raise RuntimeError(
                f"gate has {g.shape[0]} rows but layer {layer} sees a batch of {z.shape[0]}"
            )
        g = g.to(z.dtype)
        g = g[None, None, :, None] if g.dim() == 1 else g[:, None, :, None]  # (batch|1, 1, head, 1)
        r = self.replacement.get(layer)
        if r is None:
            return z * g
        r = (r(z) if callable(r) else r).to(z.dtype)  # (head, d_head) or (batch, pos, head, d_head)
        return z * g + r * (1 - g)


class _FunctionEdit(_Edit):
    """``z <- fn(layer, z)`` on the given layers."""

    def __init__(self, fn: Callable[[int, torch.Tensor], torch.Tensor], layers: frozenset[int]):
        super().__init__()
        self.fn, self.layers = fn, layers

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        if layer not in self.layers:
            return z
        new = self.fn(layer, z)
        if new.shape != z.shape:
            raise ValueError(f"patch_z: fn returned shape {tuple(new.shape)} for z of shape {tuple(z.shape)} "
                             f"at layer {layer}")
        return new


class _ResampleDraw:
    """Which reference input supplies each (input, position): drawn once per forward shape.

    With ``base_batch`` set (batched sweeps), the draw is made for ``base_batch``
    inputs and tiled, so a batch of k tiled copies sees exactly the draw a single
    copy would.
    """

    def __init__(self, lengths: torch.Tensor, seed: int, base_batch: int | None):
        self.lengths, self.seed, self.base_batch = lengths, seed, base_batch
        self._drawn: dict[tuple[int, int], torch.Tensor] = {}

    def __call__(self, n: int, pos: int) -> torch.Tensor:
        """``(n, pos)`` indices of reference inputs."""
        base = self.base_batch or n
        if n % base:
            raise RuntimeError(f"resample: a batch of {n} is not a multiple of the base batch {base}")
        if (base, pos) not in self._drawn:
            if pos > int(self.lengths.max()):
                raise ValueError(
                    f"resample ablation: the inputs have {pos} positions but the longest reference "
                    f"input has {int(self.lengths.max())}; give reference texts at least as long")
            gen = torch.Generator().manual_seed(self.seed)
            choice = torch.empty(base, pos, dtype=torch.long)
            for p in range(pos):
                candidates = (self.lengths > p).nonzero().flatten()
                choice[:, p] = candidates[torch.randint(len(candidates), (base,), generator=gen)]
            self._drawn[(base, pos)] = choice
        return self._drawn[(base, pos)].repeat(n // base, 1)


class Resampler:
    """Replacement for resample ablation of one layer: ``z_ref`` ``(n_ref, pos, head, d_head)``."""

    def __init__(self, z_ref: torch.Tensor, draw: _ResampleDraw):
        self.z_ref, self.draw = z_ref, draw

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        n, pos = z.shape[:2]
        choice = self.draw(n, pos).to(self.z_ref.device)  # (n, pos)
        positions = torch.arange(pos, device=self.z_ref.device).expand(n, pos)
        return self.z_ref[choice, positions]  # (n, pos, head, d_head)
