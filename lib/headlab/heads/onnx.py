"""ONNX exports of the book's GPTs, for the widgets that compute in the reader's browser.

The browser runs the *same* model as PyTorch: :func:`export_gpt` traces
:class:`headlab.models.gpt.GPT`'s own ``forward`` (no hand port), with two hooks
that give the export the head interface of :mod:`headlab.heads`:

* a **gate** on the input of each attention block's output projection ``W_O``:
  head ``h`` of layer ``l`` writes ``g * z + (1 - g) * r`` instead of its output
  ``z``, with the formula :meth:`headlab.HeadModel.gated` applies (one function,
  :func:`headlab.heads.gate.gate_heads`, traced into the graph). ``g = 1`` leaves a
  head alone; ``g = 0`` with ``r = 0`` is zero ablation, with ``r`` the head's
  mean output it is mean ablation;
* read-outs of every head's attention pattern and of ``z`` before the gate (the
  browser takes the mean for mean ablation from the clean ``z``).

The exported graph, for a model of ``n_layers`` layers and ``n_heads`` heads of
width ``d_head``:

=================  =======  ============================================
input              dtype    shape
=================  =======  ============================================
``input_ids``      int64    ``(batch, pos)``
``attention_mask`` int64    ``(batch, pos)``, 1 = real token, 0 = right padding
``gate``           float32  ``(n_layers, n_heads)``
``replacement``    float32  ``(n_layers, n_heads, d_head)``
=================  =======  ============================================

=================  =======  ============================================
output             dtype    shape
=================  =======  ============================================
``logits``         float32  ``(batch, pos, d_vocab)``
``patterns``       float32  ``(n_layers, batch, n_heads, q_pos, k_pos)``
``z``              float32  ``(n_layers, batch, pos, n_heads, d_head)``
=================  =======  ============================================

Exports are build artefacts: :func:`export_organism` writes one per shipped
checkpoint into a cache folder, under a name that carries the checkpoint's
sha256, so a page can never pair a model with weights it was not built from.
The ``onnx`` package (and ``onnxruntime`` to check an export) come with the
``book`` and ``test`` extras; nothing here is needed to *use* the book's models.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from headlab.heads.gate import gate_heads
from headlab.heads.head import parse_head
from headlab.models.checkpoints import CHECKPOINT_DIR, available_organisms, load_organism, verify_checkpoint
from headlab.models.gpt import GPT

__all__ = ["INPUTS", "OUTPUTS", "EXPORT_VERSION", "GatedGPT", "export_gpt", "onnx_file_name",
           "export_organism", "gate_inputs"]

INPUTS = ("input_ids", "attention_mask", "gate", "replacement")
OUTPUTS = ("logits", "patterns", "z")
# Bumped whenever the exported graph's inputs, outputs or meaning change: it is
# part of every export's file name, so browsers never mix two versions.
EXPORT_VERSION = 1
OPSET = 17


class GatedGPT(nn.Module):
    """A :class:`GPT` whose forward takes a per-head gate and replacement, and also
    returns every pattern and every head output (the graph :func:`export_gpt` writes).

    ``forward(input_ids, attention_mask, gate, replacement) -> (logits, patterns, z)``
    with the shapes of the module docstring. The GPT's own ``forward`` runs; the gate
    and the read-outs are hooks on ``W_O`` and ``hook_pattern`` that exist only
    during the call.
    """

    def __init__(self, model: GPT):
        super().__init__()
        if not isinstance(model, GPT):
            raise TypeError(f"GatedGPT wraps a headlab.models.gpt.GPT, got {type(model).__name__}; "
                            "other models have no ONNX export here")
        self.model = model.eval()
        config = model.config
        self.n_layers, self.n_heads, self.d_head = config.n_layers, config.n_heads, config.d_head

    @contextlib.contextmanager
    def _hooks(self, gate: torch.Tensor, replacement: torch.Tensor, zs: list, patterns: list) -> Iterator[None]:
        n_heads, d_head = self.n_heads, self.d_head
        handles = []

        def gate_hook(layer: int):
            def hook(module, args):
                z = args[0]
                shape = z.shape
                z = z.reshape(shape[0], shape[1], n_heads, d_head)  # (batch, pos, head, d_head)
                zs.append(z)
                g = gate[layer][None, None, :, None]  # (1, 1, head, 1)
                r = replacement[layer][None, None]  # (1, 1, head, d_head)
                return gate_heads(z, g, r).reshape(shape), *args[1:]
            return hook

        try:
            for layer, block in enumerate(self.model.blocks):
                handles.append(block.attn.W_O.register_forward_pre_hook(gate_hook(layer)))
                handles.append(block.attn.hook_pattern.register_forward_hook(
                    lambda module, args, output: patterns.append(output)))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, gate: torch.Tensor,
                replacement: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        expected = {"gate": (self.n_layers, self.n_heads),
                    "replacement": (self.n_layers, self.n_heads, self.d_head)}
        for name, value in (("gate", gate), ("replacement", replacement)):
            if tuple(value.shape) != expected[name]:
                raise ValueError(f"{name} must have shape {expected[name]} (n_layers, n_heads"
                                 f"{', d_head' if name == 'replacement' else ''}), got {tuple(value.shape)}")
        zs: list[torch.Tensor] = []
        patterns: list[torch.Tensor] = []
        with self._hooks(gate, replacement, zs, patterns):
            logits = self.model(input_ids, attention_mask)  # (batch, pos, d_vocab)
        # (n_layers, batch, head, q_pos, k_pos), (n_layers, batch, pos, head, d_head)
        return logits, torch.stack(patterns), torch.stack(zs)


def gate_inputs(model: GPT, ablated=(), replacement: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gate, replacement)`` for the export: gate 0 on the ``ablated`` ``(layer, head)``
    pairs, 1 elsewhere; ``replacement`` zeros unless given ``(n_layers, n_heads, d_head)``."""
    c = model.config
    gate = torch.ones(c.n_layers, c.n_heads)
    for item in ablated:
        layer, head = parse_head(item)  # ints only: a float or a bool is refused by name
        if not (layer < c.n_layers and head < c.n_heads):
            raise ValueError(f"head {layer}.{head} is out of range: the model has layers "
                             f"0..{c.n_layers - 1} and heads 0..{c.n_heads - 1}")
        gate[layer, head] = 0.0
    if replacement is None:
        replacement = torch.zeros(c.n_layers, c.n_heads, c.d_head)
    return gate, replacement.float()


def export_gpt(model: GPT, path: str | Path | None = None) -> bytes:
    """Export ``model`` with its gate (see the module docstring); returns the ONNX bytes
    and writes them to ``path`` when given.

    Batch and sequence length are dynamic (up to the model's ``n_ctx``). The export
    uses PyTorch's TorchScript-based exporter, which traces the GPT's own forward:
    its input checks run once on the example and are not part of the graph. The caller's
    model is left as it was found (its training mode and its device), also when the export fails.

    Raises:
        ValueError: ``path``'s folder does not exist, or ``path`` is a folder (checked before exporting).
    """
    if path is not None:
        target = Path(path)
        if target.is_dir() or not target.parent.is_dir():
            raise ValueError(f"cannot write the export to {str(path)!r}: "
                             + ("it is a folder" if target.is_dir() else f"the folder {str(target.parent)!r} does "
                                "not exist") + "; give a file path in an existing folder")
    try:
        import onnx  # noqa: F401  (torch.onnx needs it to serialise)
    except ImportError as err:
        raise ImportError("exporting to ONNX needs the `onnx` package: pip install onnx "
                          "(it comes with headlab's `book` and `test` extras)") from err
    if not isinstance(model, GPT):
        raise TypeError(f"export_gpt exports a headlab.models.gpt.GPT, got {type(model).__name__}; "
                        "other models have no ONNX export here")
    training = model.training
    device = next(model.parameters()).device
    try:
        data = _export(GatedGPT(model).cpu(), model)
    finally:
        model.train(training).to(device)
    if path is not None:
        Path(path).write_bytes(data)
    return data


def _export(wrapped: GatedGPT, model: GPT) -> bytes:
    c = model.config
    n = min(c.n_ctx, 8)
    ids = torch.zeros(2, n, dtype=torch.long)
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, n // 2:] = 0  # one padded row, so masking is traced as a computation
    gate, replacement = gate_inputs(model)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns that the GPT's input checks are evaluated once; that is the intent
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapped, (ids, mask, gate, replacement), buffer, dynamo=False, opset_version=OPSET,
            input_names=list(INPUTS), output_names=list(OUTPUTS),
            dynamic_axes={"input_ids": {0: "batch", 1: "pos"}, "attention_mask": {0: "batch", 1: "pos"},
                          "logits": {0: "batch", 1: "pos"}, "patterns": {1: "batch", 3: "pos", 4: "pos"},
                          "z": {1: "batch", 2: "pos"}},
        )
    return buffer.getvalue()


def onnx_file_name(name: str, checkpoint_dir: str | Path | None = None) -> str:
    """The export's file name for the shipped checkpoint ``name``:
    ``<name>-<first 12 hex digits of its sha256>-v<EXPORT_VERSION>.onnx``."""
    if checkpoint_dir is not None and not Path(checkpoint_dir).is_dir():
        raise ValueError(f"checkpoint_dir {str(checkpoint_dir)!r} is not a folder: give the folder that holds the "
                         "checkpoints (one sub-folder per model), or None for the shipped ones")
    names = available_organisms(checkpoint_dir)
    if name not in names:
        raise ValueError(f"unknown organism {name!r}; available: {', '.join(names) or '(none shipped)'}")
    root = Path(checkpoint_dir) if checkpoint_dir is not None else CHECKPOINT_DIR
    provenance = verify_checkpoint(root / name)
    return f"{name}-{provenance['sha256'][:12]}-v{EXPORT_VERSION}.onnx"


def export_organism(name: str, out_dir: str | Path, checkpoint_dir: str | Path | None = None) -> Path:
    """Export the shipped checkpoint ``name`` into ``out_dir`` (kept if already there);
    returns the file's path, named by :func:`onnx_file_name`."""
    out_dir = Path(out_dir)
    target = out_dir / onnx_file_name(name, checkpoint_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir {str(out_dir)!r} is a file: give a folder to write the export into")
    if not target.is_file():
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create out_dir {str(out_dir)!r} ({err.strerror}): give a writable folder") from None
        model = load_organism(name, checkpoint_dir=checkpoint_dir).model
        partial = target.with_suffix(".partial")
        export_gpt(model, partial)
        partial.replace(target)
    return target
