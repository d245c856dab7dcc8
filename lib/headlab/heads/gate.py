"""The gate before ``W_O``: what an intervention writes into a layer's head outputs ``z``.

The dispatcher (:mod:`headlab.heads.dispatch`) applies the active ``Edit`` objects at
the input of every attention output projection, in the order their contexts were entered.
The edits are: a gate with replacements (:class:`GateEdit`: zero, mean and resample ablation,
batched sweeps, gradients) and an arbitrary function of ``z`` (:class:`FunctionEdit`, for
``patch_z``). :class:`ResampleDraw` decides which reference
input supplies each position in resample ablation. Each edit counts its applications, and
every forward pass run while it is active must reach each layer it changes, or that forward
raises :class:`~headlab.heads.AblationNotApplied` (the dispatcher checks it, :mod:`headlab.heads.dispatch`).

``GateMethods`` puts the contexts built on them on :class:`~headlab.heads.model.HeadModel`:
``gated``, ``ablate``, ``patch_z``, ``replacements`` and ``head_gradients``.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator, Sequence

import torch

from headlab.heads.ablation import ABLATION_MODES, Ablation
from headlab.heads.dispatch import AblationNotApplied, Check
from headlab.heads.head import Head
from headlab.heads.inputs import check_layers, check_returned
from headlab.metrics import Metric

__all__ = ["ABLATION_MODES", "AblationNotApplied", "gate_heads", "Edit", "GateEdit", "FunctionEdit",
           "ResampleDraw", "Resampler", "GateMethods"]


# ------------------------------------------------------------------------------- the edits


def gate_heads(z: torch.Tensor, g: torch.Tensor, r: torch.Tensor | None = None) -> torch.Tensor:
    """The gate's formula, the one place it is written: ``g * z + (1 - g) * r``.

    ``z`` is ``(batch, pos, head, d_head)``; ``g`` broadcasts to it (e.g. ``(batch | 1, 1, head, 1)``:
    1 keeps a head, 0 removes it); ``r`` (broadcastable, ``None`` for zeros) is what a removed head
    writes instead. :class:`GateEdit` applies it inside the head interface, and the ONNX export of
    the book's GPT (``headlab.heads.onnx``) traces it into the browser's graph.
    """
    return z * g if r is None else z * g + r * (1 - g)


class Edit(Check):
    """Something that rewrites ``z`` at the gate; counts how often each layer's gate ran.

    Subclasses set ``layers`` (the layers they change) and define :meth:`apply`.
    """

    what = "an edit of the head outputs"

    def __call__(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        self.reach(layer)
        return self.apply(layer, z)

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """The new ``z`` ``(batch, pos, head, d_head)`` of layer ``layer``."""
        raise NotImplementedError(f"{type(self).__name__} must define apply(layer, z)")


class GateEdit(Edit):
    """``z[b, :, h] <- g[b, l, h] * z[b, :, h] + (1 - g[b, l, h]) * r_l[b, :, h]``.

    Args:
        gate: ``(n_layers, n_heads)`` (the same for every input) or ``(batch, n_layers,
            n_heads)`` (one value per input, for batched sweeps).
        replacement: ``None`` (zeros) or, per layer, a tensor broadcastable to ``(batch, pos,
            head, d_head)`` or a callable ``z -> tensor`` (resampling). Layers whose gates are
            all one are left untouched (and still counted as reached).
    """

    what = "a gated (ablation) block"

    def __init__(self, gate: torch.Tensor, replacement: dict | None = None):
        super().__init__()
        self.gate = gate
        self.replacement = replacement or {}
        per_layer = gate if gate.dim() == 2 else gate.transpose(0, 1)  # (n_layers, ...)
        self.layers = frozenset(
            l for l in range(per_layer.shape[0]) if gate.requires_grad or not torch.all(per_layer[l] == 1))

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        if layer not in self.layers:
            return z
        if self.gate.dim() == 3 and self.gate.shape[0] != z.shape[0]:
            raise ValueError(f"the gate has one row per input, {self.gate.shape[0]} rows, but layer {layer} "
                             f"sees a batch of {z.shape[0]} inputs")
        g = self.gate[layer] if self.gate.dim() == 2 else self.gate[:, layer]
        g = g.to(z.dtype)
        g = g[None, None, :, None] if g.dim() == 1 else g[:, None, :, None]  # (batch|1, 1, head, 1)
        r = self.replacement.get(layer)
        if r is not None:
            r = (r(z) if callable(r) else r).to(z.dtype)  # (head, d_head) or (batch, pos, head, d_head)
        return gate_heads(z, g, r)


class FunctionEdit(Edit):
    """``z <- fn(layer, z)`` on the given layers; ``fn`` must keep the shape, dtype and device
    (checked where it returns, naming ``fn``)."""

    what = "a patch_z block"

    def __init__(self, fn: Callable[[int, torch.Tensor], torch.Tensor], layers: frozenset[int]):
        super().__init__()
        if not callable(fn):
            raise TypeError(f"patch_z needs a callable fn(layer, z) -> z, got {fn!r}")
        self.fn, self.layers = fn, layers

    def apply(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        if layer not in self.layers:
            return z
        return check_returned(self.fn(layer, z), z, self.fn, "patch_z", layer, "z")


class ResampleDraw:
    """Which reference input supplies each (input, position): drawn once per forward shape.

    Args:
        lengths: ``(n_ref,)`` number of real tokens of each reference input.
        seed: seed of the draw.
        base_batch: with it set (batched sweeps), the draw is made for ``base_batch`` inputs
            and tiled, so a batch of k tiled copies sees exactly the draw a single copy would.
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

    def __init__(self, z_ref: torch.Tensor, draw: ResampleDraw):
        self.z_ref, self.draw = z_ref, draw

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        n, pos = z.shape[:2]
        choice = self.draw(n, pos).to(self.z_ref.device)  # (n, pos)
        positions = torch.arange(pos, device=self.z_ref.device).expand(n, pos)
        return self.z_ref[choice, positions]  # (n, pos, head, d_head)


# ----------------------------------------------------------------- the contexts on HeadModel

MEAN_CACHE_BYTES, MEAN_CACHE_ENTRIES = 256 * 2**20, 4  # z captured at most by a mean reference; references kept


class GateMethods:
    """The gate's contexts, methods of :class:`~headlab.heads.model.HeadModel` (mixed into it).

    They use the model's ``dispatcher`` (:class:`~headlab.heads.dispatch.Dispatcher`), geometry,
    ``tokenize``, ``forward`` and ``capture``.
    """

    @contextlib.contextmanager
    def _applying(self, edit: Edit) -> Iterator[None]:
        """Install ``edit`` for the block; each forward in it must reach every layer ``edit``
        changes, or that forward raises :class:`~headlab.heads.AblationNotApplied`."""
        with self.dispatcher.active(edit=edit):
            yield

    @contextlib.contextmanager
    def gated(self, gate: torch.Tensor, replacement: dict | None = None) -> Iterator["GateMethods"]:
        """Inside the block, head ``h`` of layer ``l`` writes ``g * z + (1 - g) * r`` instead of ``z``.

        The general form of :meth:`ablate`, for many ablations in one pass and for gradients.

        Args:
            gate: ``(n_layers, n_heads)`` (the same for every input) or ``(batch, n_layers,
                n_heads)`` (one value per input row, e.g. one ablation per tile of a batched
                sweep). Layers whose gates are all one are left untouched; a gate that requires
                grad makes ``d metric / d gate`` available.
            replacement: ``r`` per layer, as returned by :meth:`replacements` (``None``: zeros).

        Raises:
            AblationNotApplied: a forward pass ran but a gated layer was never reached.
        """
        if not isinstance(gate, torch.Tensor):
            raise TypeError(f"gate must be a tensor of shape ({self.n_layers}, {self.n_heads}) or (batch, "
                            f"{self.n_layers}, {self.n_heads}), got a {type(gate).__name__}")
        if gate.dim() not in (2, 3) or tuple(gate.shape[-2:]) != (self.n_layers, self.n_heads):
            raise ValueError(f"gate of shape {tuple(gate.shape)} does not fit {self.name}: give "
                             f"({self.n_layers}, {self.n_heads}) (n_layers, n_heads) or (batch, {self.n_layers}, "
                             f"{self.n_heads})")
        if not torch.is_floating_point(gate) or not bool(torch.isfinite(gate).all()):
            raise ValueError(f"gate must hold finite floats, got dtype {gate.dtype}"
                             + (" with NaN or inf" if torch.is_floating_point(gate) else ""))
        with self._applying(GateEdit(gate, replacement)):
            yield self

    @contextlib.contextmanager
    def ablate(self, heads: Iterable[Head], ablation: Ablation | None = None) -> Iterator["GateMethods"]:
        """Inside the block, the given heads are ablated in every forward pass.

        Args:
            heads: ``(layer, head)`` pairs.
            ablation: how they are removed, an :class:`~headlab.heads.ablation.Ablation` (default:
                zero ablation): ``Ablation("mean", reference=texts)`` replaces a head's output by its
                mean over every real token of ``texts``, ``Ablation("resample", reference=texts,
                seed=0)`` by its output at the same position of a text drawn at random among those
                long enough.

        Raises:
            AblationNotApplied: a forward pass ran but a targeted gate was never reached.
        """
        ablation = Ablation.of(ablation)
        heads = self.check_heads(heads)
        gate = torch.ones(self.n_layers, self.n_heads, device=self.device)
        for layer, head in heads:
            gate[layer, head] = 0.0
        replacement = self.replacements(ablation, sorted({l for l, _ in heads}))
        with self._applying(GateEdit(gate, replacement)):
            yield self

    @contextlib.contextmanager
    def patch_z(self, fn: Callable[[int, torch.Tensor], torch.Tensor],
                layers: Iterable[int] | None = None) -> Iterator["GateMethods"]:
        """Inside the block, layer ``l``'s head outputs ``z`` ``(batch, pos, head, d_head)`` are
        replaced by ``fn(l, z)`` (same shape) before ``W_O``, for ``l`` in ``layers`` (default: all).

        The general form of every intervention at the gate: e.g. replacing a layer's heads by
        their mean, or ``z`` by a sparse autoencoder's reconstruction. Nests with :meth:`ablate`
        and ``capture`` in entering order; fails loudly if a forward pass never reaches a gate.
        """
        layers = frozenset(check_layers(layers, self.n_layers, self.name))
        with self._applying(FunctionEdit(fn, layers)):
            yield self

    def replacements(self, ablation: Ablation, layers: Sequence[int], base_batch: int | None = None
                     ) -> dict | None:
        """What replaces an ablated head's ``z``, per layer (``None`` for zero ablation).

        ``Ablation("mean", reference)``: a ``(head, d_head)`` tensor per layer, the mean over every
        real token of ``reference``. ``Ablation("resample", reference, seed)``: a :class:`Resampler`
        per layer that, given the ``z`` being run, returns for each input and position the head's
        output at the same position of a reference input drawn at random among those long enough
        (one draw per forward shape, shared by all layers; ``base_batch`` as in :class:`ResampleDraw`).
        """
        if not isinstance(ablation, Ablation):
            raise TypeError(f"replacements needs an Ablation, got {type(ablation).__name__} {ablation!r:.60}: "
                            "write hm.replacements(Ablation('mean', reference=texts), layers)")
        mode, reference, seed = ablation.mode, ablation.reference, ablation.seed
        layers = check_layers(layers, self.n_layers, self.name)
        if mode == "zero":
            return None
        if mode == "mean":
            return self._reference_means(ablation, layers)
        ref = self.tokenize(reference)
        with torch.no_grad(), self.dispatcher.suspended(), self.capture(("z",), layers=layers) as cache:
            self.forward(ref)
        real = ref["attention_mask"].bool()  # (n_ref, pos)
        draw = ResampleDraw(real.sum(dim=1).cpu(), seed, base_batch)
        return {l: Resampler(cache.z(l), draw) for l in layers}

    def _reference_means(self, ablation: Ablation, layers: Sequence[int]) -> dict:
        """Mean ablation's ``(head, d_head)`` per layer, kept per ``Ablation`` object until a weight
        changes (torch's version counters), so a loop of ablations runs one reference forward; the
        first miss captures every layer when they fit in :data:`MEAN_CACHE_BYTES`. Exact values."""
        cache = self.__dict__.setdefault("_mean_cache", {})
        state = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        entry = cache.get(id(ablation))
        if entry is None or entry[0] is not ablation or entry[1] != state:
            entry = cache[id(ablation)] = (ablation, state, {})  # holding the Ablation keeps its id unique
            while len(cache) > MEAN_CACHE_ENTRIES:
                cache.pop(next(iter(cache)))
        means, missing = entry[2], [l for l in layers if l not in entry[2]]
        if missing:
            ref = self.tokenize(ablation.reference)
            if ref["input_ids"].numel() * self.n_heads * self.d_head * 4 * self.n_layers <= MEAN_CACHE_BYTES:
                missing = list(range(self.n_layers))
            with torch.no_grad(), self.dispatcher.suspended(), self.capture(("z",), layers=missing) as cache_z:
                self.forward(ref)
            real = ref["attention_mask"].bool()  # (n_ref, pos)
            means.update({l: cache_z.z(l)[real].mean(dim=0) for l in missing})  # (head, d_head)
        return {l: means[l] for l in layers}

    def head_gradients(self, inputs, metric: Metric | str | None = None) -> torch.Tensor:
        """``d metric_i / d g_{l,h}`` at ``g = 1`` for every input ``i``: ``(batch, n_layers, n_heads)``.

        ``metric``: any :class:`~headlab.metrics.Metric` (default: :func:`headlab.metrics.default_kind`
        for gradients, the next-token loss for causal LMs and the self-retrieval loss for encoders,
        since 1 - cos has zero gradient at the clean model), with its ``loss_mask`` if any, or a
        differentiable callable such as a :class:`~headlab.metrics.LogitMetric`. Michel et al.'s
        importance is the mean over inputs of the absolute value. Parameters' ``.grad`` are left
        untouched.

        Raises:
            ValueError: a metric whose gradient is zero by construction: ``"cosine"`` or ``"kl"``
                (each is smallest, so flat, at the clean model) or the retrieval loss of a single
                input (it ranks an input among the batch, and alone it has no rival); a
                ``loss_mask`` that is not ``(batch, pos)``; a callable whose values do not depend
                on the gates (no gradient).
        """
        metric = Metric.of(metric).bound(self, gradients=True)
        batch = self.tokenize(inputs)
        if metric.kind in ("cosine", "kl"):
            raise ValueError(f"head_gradients with Metric({metric.kind!r}) would be zero for every head: it is at "
                             "its minimum at the clean model; use Metric('retrieval') for an encoder, the loss or "
                             "a LogitMetric for a causal LM")
        if metric.kind == "retrieval" and batch["input_ids"].shape[0] < 2:
            raise ValueError("head_gradients with the retrieval loss needs at least 2 inputs, got 1: the loss ranks "
                             "each input's embedding among the batch's, and one input has no rival (its gradient "
                             "is zero for every head)")
        loss_mask = metric.loss_mask
        if loss_mask is not None and tuple(loss_mask.shape) != tuple(batch["input_ids"].shape):
            raise ValueError(f"loss_mask must be a (batch, pos) = {tuple(batch['input_ids'].shape)} tensor, got "
                             f"{tuple(loss_mask.shape)}")
        reference = metric.reference(self, batch)
        n = batch["input_ids"].shape[0]
        gate = torch.ones(n, self.n_layers, self.n_heads, device=self.device, requires_grad=True)
        with torch.enable_grad(), self.dispatcher.active(edit=GateEdit(gate)):  # also inside no_grad
            values = metric.score(self.forward(batch), batch, reference)
            if not values.requires_grad:
                raise ValueError(f"the metric {metric.name!r} does not depend on the heads' outputs (its values "
                                 "carry no gradient): give a differentiable metric")
            (grad,) = torch.autograd.grad(values.sum(), gate)
        return grad
