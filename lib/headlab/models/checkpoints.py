"""The book's shipped checkpoints: saving, verifying and loading the trained organisms.

A checkpoint is a folder ``headlab/checkpoints/<name>/`` holding ``model.safetensors``
(float32), the tokenizer files and ``provenance.json``: the command, seed, config, data and
final metrics that produced it, and the sha256 of every file. :func:`load_organism` loads one
by name; every file is verified against its recorded sha256 before any weight is read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, NamedTuple

import torch

from headlab.models.gpt import GPT, GPTConfig

__all__ = ["CHECKPOINT_DIR", "CheckpointError", "Organism", "sha256_file", "save_checkpoint",
           "available_organisms", "verify_checkpoint", "load_checkpoint", "load_organism"]

CHECKPOINT_DIR = Path(__file__).resolve().parents[1] / "checkpoints"


class CheckpointError(RuntimeError):
    """A checkpoint's files do not match the hashes recorded in its provenance."""


class Organism(NamedTuple):
    """What :func:`load_organism` returns; unpacks as ``model, tokenizer, provenance``."""

    model: GPT
    tokenizer: Any  # transformers.PreTrainedTokenizerFast
    provenance: dict[str, Any]


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, as a hex string."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(out: str | Path, model: GPT, tokenizer: Any, provenance: dict[str, Any]) -> dict[str, Any]:
    """Write ``model.safetensors`` (float32), the tokenizer files and ``provenance.json`` to ``out``.

    The provenance written is ``provenance`` plus the sha256 of the weights
    (``sha256``) and of every verified file (``files``); it is returned.
    """
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    tokenizer.save_pretrained(str(out))
    files = {f: sha256_file(out / f) for f in ("model.safetensors", "tokenizer.json")}
    provenance = {**provenance, "sha256": files["model.safetensors"], "files": files}
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return provenance


def available_organisms(checkpoint_dir: str | Path | None = None) -> list[str]:
    """Names of the shipped checkpoints (folders holding a provenance.json), sorted."""
    root = Path(checkpoint_dir) if checkpoint_dir is not None else CHECKPOINT_DIR
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "provenance.json").is_file())


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check every file hash recorded in ``path/provenance.json``; return the provenance.

    Raises :class:`CheckpointError` naming the file, the expected and actual
    sha256 and the command that regenerates the checkpoint.
    """
    path = Path(path)
    prov_file = path / "provenance.json"
    if not prov_file.is_file():
        raise CheckpointError(f"{prov_file} is missing; {path} is not a headlab checkpoint")
    provenance = json.loads(prov_file.read_text())
    files = provenance.get("files") or {"model.safetensors": provenance.get("sha256")}
    regen = provenance.get("command", "(no command recorded)")
    for fname, expected in files.items():
        f = path / fname
        if not f.is_file():
            raise CheckpointError(f"{f} is missing; regenerate the checkpoint with: {regen}")
        actual = sha256_file(f)
        if actual != expected:
            raise CheckpointError(
                f"{f} does not match its recorded hash: expected sha256 {expected}, got {actual}. "
                f"The file is corrupt or was changed; regenerate it with: {regen}")
    return provenance


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Organism:
    """Load a checkpoint folder (model.safetensors, provenance.json, tokenizer files) after verifying it."""
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    provenance = verify_checkpoint(path)  # before reading any weight
    model = GPT(GPTConfig.from_dict(provenance["config"]))
    state = load_file(str(path / "model.safetensors"), device="cpu")
    model.load_state_dict(state, strict=True)
    model.to(device).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    return Organism(model, tokenizer, provenance)


def load_organism(name: str, device: str | torch.device = "cpu", checkpoint_dir: str | Path | None = None) -> Organism:
    """Load the shipped organism ``name`` as ``(model, tokenizer, provenance)``; the model is in eval mode.

    The sha256 of each file is checked before loading (:class:`CheckpointError`
    on mismatch). An unknown name raises ``ValueError`` listing the available ones.
    """
    names = available_organisms(checkpoint_dir)
    if name not in names:
        raise ValueError(f"unknown organism {name!r}; available: {', '.join(names) or '(none shipped)'}")
    root = Path(checkpoint_dir) if checkpoint_dir is not None else CHECKPOINT_DIR
    return load_checkpoint(root / name, device)
