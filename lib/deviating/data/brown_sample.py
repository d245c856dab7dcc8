"""The held-out Brown Corpus text that ships with the book.

A Brown model's fixed evaluation data (:meth:`BrownWindows.eval_data
<deviating.data.brown_windows.BrownWindows.eval_data>`: validation windows, repeated spans of
validation text, repeated random tokens, chance scores and n-gram baselines) is saved once as
token ids, so that chapters and tests measure the shipped Brown models on held-out English
without the corpus (the Brown Corpus permits redistribution). ``python scripts/brown_sample.py``
writes it from the cached corpus; the tests check that it equals a fresh ``eval_data``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from deviating.data.brown_windows import BrownEval, BrownWindows

__all__ = ["SAMPLE_DIR", "sample_path", "save_eval", "load_eval", "held_out"]

SAMPLE_DIR = Path(__file__).resolve().parent.parent / "results" / "brown"
_TENSORS = ("windows", "text_repeats", "random_repeats")


def sample_path(task: BrownWindows, n: int) -> Path:
    """Where the sample of ``n`` validation windows for ``task``'s tokenizer and context is kept."""
    return SAMPLE_DIR / f"eval-v{task.vocab_size}-c{task.n_ctx}-n{n}.safetensors"


def save_eval(data: BrownEval, path: str | Path) -> Path:
    """Write ``data`` to ``path`` (safetensors: the token ids as int16, the rest as metadata)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: getattr(data, name).to(torch.int16).contiguous() for name in _TENSORS}
    if any(int(getattr(data, name).max()) > torch.iinfo(torch.int16).max for name in _TENSORS):
        raise ValueError("token ids above 32767 do not fit the sample's int16; this sample is for small vocabularies")
    meta = {"half": str(data.half), "chance": json.dumps(data.chance), "baselines": json.dumps(data.baselines)}
    save_file(tensors, str(path), metadata=meta)
    return path


def load_eval(path: str | Path) -> BrownEval:
    """The :class:`~deviating.data.brown_windows.BrownEval` saved in ``path`` by :func:`save_eval`.

    Raises:
        FileNotFoundError: no file there (it says how to write one).
        ValueError: a file that is not such a sample.
    """
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no Brown sample at {path}: write it with `python scripts/brown_sample.py` "
                                "(it needs the corpus: python -m deviating fetch-brown)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {name: f.get_tensor(name).long() for name in _TENSORS}
            half, chance, baselines = int(meta["half"]), json.loads(meta["chance"]), json.loads(meta["baselines"])
    except (SafetensorError, KeyError, ValueError) as err:
        raise ValueError(f"{path} is not a Brown sample written by save_eval ({type(err).__name__}: {err}); "
                         "rewrite it with `python scripts/brown_sample.py`") from None
    return BrownEval(tensors["windows"], tensors["text_repeats"], tensors["random_repeats"], half, chance, baselines)


def held_out(task: BrownWindows, n: int = 128) -> BrownEval:
    """``task``'s evaluation data of ``n`` windows: the shipped sample when there is one, else
    computed from the cached corpus (:meth:`~deviating.data.brown_windows.BrownWindows.eval_data`)."""
    path = sample_path(task, n)
    return load_eval(path) if path.is_file() else task.eval_data(n)
