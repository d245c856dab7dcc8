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
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from headlab.models.gpt import GPT, GPTConfig

__all__ = ["CHECKPOINT_DIR", "CheckpointError", "Organism", "sha256_file", "save_checkpoint",
           "available_organisms", "read_provenance", "regenerate_command", "verify_checkpoint", "is_checkpoint",
           "load_checkpoint", "load_organism"]

CHECKPOINT_DIR = Path(__file__).resolve().parents[1] / "checkpoints"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used: a file is missing, damaged, or does not match the hash its
    provenance records. The message names the file and the command that regenerates it."""


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


def regenerate_command(path: str | Path, provenance: dict | None = None) -> str:
    """The command that rebuilds the checkpoint in ``path``: the one its provenance records, else
    ``python -m deviating train NAME`` for the folder's name."""
    command = provenance.get("command") if isinstance(provenance, dict) else None
    return command if isinstance(command, str) and command else f"python -m deviating train {Path(path).name}"


def read_provenance(path: str | Path) -> dict[str, Any]:
    """``path/provenance.json`` as a dict; :class:`CheckpointError` naming the file and the
    regenerate command when it is missing or not a JSON object."""
    path = Path(path)
    prov_file = path / "provenance.json"
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a folder; a headlab checkpoint is a folder holding "
                              "model.safetensors, tokenizer.json and provenance.json")
    if not prov_file.is_file():
        raise CheckpointError(f"{prov_file} is missing; {path} is not a headlab checkpoint "
                              f"(regenerate one with: {regenerate_command(path)})")
    try:
        provenance = json.loads(prov_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{prov_file} is not valid JSON ({err}); regenerate the checkpoint with: "
                              f"{regenerate_command(path)}") from None
    if not isinstance(provenance, dict):
        raise CheckpointError(f"{prov_file} holds a JSON {type(provenance).__name__}, not the provenance object; "
                              f"regenerate the checkpoint with: {regenerate_command(path)}")
    return provenance


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check every file hash recorded in ``path/provenance.json``; return the provenance.

    Raises :class:`CheckpointError` naming the file, the expected and actual
    sha256 and the command that regenerates the checkpoint.
    """
    path = Path(path)
    provenance = read_provenance(path)
    files = provenance.get("files") or {"model.safetensors": provenance.get("sha256")}
    regen = regenerate_command(path, provenance)
    if not isinstance(files, dict):
        raise CheckpointError(f"{path / 'provenance.json'}: 'files' must map file names to sha256; regenerate "
                              f"the checkpoint with: {regen}")
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


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding a headlab checkpoint (a ``provenance.json``)."""
    return Path(path).is_dir() and (Path(path) / "provenance.json").is_file()


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Organism:
    """Load a checkpoint folder (model.safetensors, provenance.json, tokenizer files) after verifying it.

    Every failure -- a hash that does not match, a provenance without a valid config, weights that
    are not a safetensors file, do not fit the config or hold NaN or inf, a tokenizer that does not
    load -- is a :class:`CheckpointError` naming the file and the command that regenerates it.
    """
    from transformers import PreTrainedTokenizerFast  # heavy: imported when a checkpoint is loaded

    path = Path(path)
    provenance = verify_checkpoint(path)  # before reading any weight
    regen = regenerate_command(path, provenance)
    prov_file, weights = path / "provenance.json", path / "model.safetensors"
    try:
        config = GPTConfig.from_dict(provenance["config"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{prov_file} has no valid model config ({type(err).__name__}: {err}); regenerate the "
                              f"checkpoint with: {regen}") from None
    model = GPT(config)
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{weights} is not a readable safetensors file ({err}); regenerate the checkpoint "
                              f"with: {regen}") from None
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise CheckpointError(f"{weights} holds NaN or inf in {len(bad)} tensor(s), e.g. {bad[0]!r}: the training run "
                              f"diverged or the file was damaged; regenerate the checkpoint with: {regen}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[:2]
        raise CheckpointError(f"{weights} does not fit the config in {prov_file} ({' '.join(first)}); regenerate the "
                              f"checkpoint with: {regen}") from None
    model.to(device).eval()
    try:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    except Exception as err:  # noqa: BLE001 - the tokenizers library raises a bare Exception
        raise CheckpointError(f"{path / 'tokenizer.json'} does not load as a tokenizer ({type(err).__name__}: "
                              f"{str(err)[:120]}); regenerate the checkpoint with: {regen}") from None
    return Organism(model, tokenizer, provenance)


def load_organism(name: str, device: str | torch.device = "cpu", checkpoint_dir: str | Path | None = None) -> Organism:
    """Load the shipped organism ``name`` as ``(model, tokenizer, provenance)``; the model is in eval mode.

    The sha256 of each file is checked before loading (:class:`CheckpointError`
    on mismatch). An unknown name raises ``ValueError`` listing the available ones.
    """
    names = available_organisms(checkpoint_dir)
    if not isinstance(name, str):
        raise TypeError(f"name must be the name of a shipped organism, got {name!r}; available: {', '.join(names)}")
    if name not in names:
        raise ValueError(f"unknown organism {name!r}; available: {', '.join(names) or '(none shipped)'}")
    root = Path(checkpoint_dir) if checkpoint_dir is not None else CHECKPOINT_DIR
    return load_checkpoint(root / name, device)
