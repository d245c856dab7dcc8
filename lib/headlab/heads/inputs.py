"""What the head interface accepts, checked where it comes in: layers, token ids, masks, texts.

Every public method of :class:`~headlab.heads.model.HeadModel` passes its arguments through
these functions before any forward pass, so a wrong call fails at once with an error that
names the wrong value and says what to do, instead of deep inside a model (or not at all):

* :func:`check_layer`, :func:`check_layers` -- layer indices: ints only (``operator.index``;
  no floats, strings or bools), in range;
* :func:`check_batch` -- token ids (a tensor of rank 1 or 2, integer dtype, ids inside the
  vocabulary, no longer than the model's maximum positions, unless truncation is asked for)
  and the attention mask (the ids' shape, only 0 and 1, no row without a real token);
* :func:`check_texts`, :func:`unknown_words` -- texts: a non-empty list of non-empty
  strings, and, for the book's word-level tokenizers, only words they know;
* :func:`check_returned` -- what a callback (``patch_z``, ``patch_pattern``) returned: a
  tensor of the shape, dtype and device it replaces, checked where it returns.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable, Sequence

import torch

__all__ = ["check_layer", "check_layers", "check_batch", "check_texts", "check_words", "unknown_words",
           "check_returned", "callback_name", "BATCH_KEYS"]

#: The keys a batch dict may hold (``token_type_ids`` only as BERT's all-zero default).
BATCH_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_layer(value: Any, n_layers: int, name: str = "the model", what: str = "layer") -> int:
    """``value`` as a layer index in ``0..n_layers - 1``.

    Raises:
        TypeError: not an int (a float, a string, a bool, ...).
        ValueError: out of range.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got the bool {value!r}")
    try:
        index = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {_short(value)} ({type(value).__name__}); "
                        f"{name} has layers 0..{n_layers - 1}") from None
    if not 0 <= index < n_layers:
        raise ValueError(f"{what} {index} is out of range: {name} has layers 0..{n_layers - 1}")
    return index


def check_layers(values: Iterable[int] | None, n_layers: int, name: str = "the model",
                 what: str = "layers") -> list[int]:
    """Layer indices, sorted and without repeats; ``None`` means every layer.

    Raises:
        TypeError: a string or a single number where a collection is expected, or an index
            that is not an int.
        ValueError: an empty collection, or an index out of range.
    """
    if values is None:
        return list(range(n_layers))
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a collection of ints, got the string {values!r}; "
                        f"write e.g. [1] (layers 0..{n_layers - 1})")
    if isinstance(values, torch.Tensor) and values.dim() == 0 or isinstance(values, (int, float)):
        raise TypeError(f"{what} must be a collection of ints, got the single value {values!r}; "
                        f"write [{values!r}] for one layer")
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{what} must be a collection of ints, got {_short(values)} "
                        f"({type(values).__name__})") from None
    if not items:
        raise ValueError(f"{what} is empty: give at least one layer in 0..{n_layers - 1}, or None for all")
    out = set()
    for v in items:
        try:
            out.add(check_layer(v, n_layers, name))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{what}={_short(values)} is invalid: {err}") from None
    return sorted(out)


def check_texts(texts: Sequence[Any]) -> list[str]:
    """A non-empty list of non-empty strings (the error names the first item that is not one)."""
    if not texts:
        raise ValueError(f"no inputs: got an empty {type(texts).__name__} {texts!r}; give at least one text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            hint = ("; to pass token ids, give a tensor, e.g. torch.tensor([[1, 2, 3]])"
                    if isinstance(text, int) else "")
            raise TypeError(f"inputs must be texts, but item {i} is {_short(text)} ({type(text).__name__}){hint}")
        if not text.strip():
            raise ValueError(f"text {i} is empty ({text!r}): every input needs at least one token")
    return list(texts)


def unknown_words(tokenizer: Any, texts: Sequence[str]) -> list[tuple[int, str]] | None:
    """``(text index, word)`` for every word a word-level tokenizer does not know, or ``None``
    for a tokenizer that is not word-level (subword tokenizers read any text)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.model).__name__ != "WordLevel":
        return None
    vocab = tokenizer.get_vocab()
    found = []
    for i, text in enumerate(texts):
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        words = ([w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
                 if backend.pre_tokenizer is not None else text.split())
        found += [(i, w) for w in words if w not in vocab]
    return found


def check_words(tokenizer: Any, texts: Sequence[str], name: str) -> None:
    """Raise naming the first word a word-level ``tokenizer`` does not know."""
    unknown = unknown_words(tokenizer, texts)
    if unknown:
        i, word = unknown[0]
        others = sorted({w for _, w in unknown} - {word})
        more = f" (and {len(others)} more: {', '.join(map(repr, others[:5]))})" if others else ""
        vocab = [w for w in tokenizer.get_vocab() if not w.startswith("<")][:6]
        raise ValueError(f"{name}'s vocabulary has no word {word!r} (in text {i}: {_short(texts[i])}){more}; "
                         f"it reads only its own words, e.g. {', '.join(vocab)}")


def _first_bad(mask: torch.Tensor) -> str:
    bad = mask[(mask != 0) & (mask != 1)]
    value = bad.flatten()[0].item()
    return repr(value)


def check_batch(batch: dict, *, name: str, vocab_size: int | None, max_positions: int | None,
                truncate: bool = False) -> dict[str, torch.Tensor]:
    """``{"input_ids", "attention_mask"}`` from a batch dict, both ``(batch, pos)``, checked.

    ``input_ids`` of rank 1 is one sequence; a missing mask means every token is real. With
    ``truncate=True`` inputs longer than ``max_positions`` keep their first ``max_positions``
    tokens; otherwise they are an error naming the limit.
    """
    unknown = sorted(set(batch) - set(BATCH_KEYS), key=str)
    if "input_ids" not in batch:
        raise ValueError(f"a batch dict needs 'input_ids'; got the keys {sorted(batch, key=str)!r}")
    if unknown:
        raise ValueError(f"a batch dict may hold only {', '.join(map(repr, BATCH_KEYS))}; got also "
                         f"{', '.join(map(repr, unknown))} (the head interface would ignore it)")
    ids, mask = batch["input_ids"], batch.get("attention_mask")
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"input_ids must be a tensor of token ids, got a {type(ids).__name__}; "
                        "use torch.tensor(...)")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"input_ids must hold integer token ids (int64), got dtype {ids.dtype}; "
                        "convert them with ids.long() if they are whole numbers")
    if ids.dim() == 1:
        ids = ids[None]
        mask = mask[None] if isinstance(mask, torch.Tensor) and mask.dim() == 1 else mask
    if ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, pos) or (pos,), got shape {tuple(ids.shape)}"
                         + (" (a 0-d tensor)" if ids.dim() == 0 else ""))
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"input_ids of shape {tuple(ids.shape)} is empty: no "
                         f"{'inputs' if ids.shape[0] == 0 else 'tokens'} to run")
    if mask is None:
        mask = torch.ones_like(ids)
    elif not isinstance(mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a tensor, got a {type(mask).__name__}")
    elif tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"attention_mask of shape {tuple(mask.shape)} does not match input_ids of shape "
                         f"{tuple(ids.shape)}: give one 0/1 per token")
    elif mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (real token), found {_first_bad(mask)}")
    mask = mask.to(torch.long)
    if "token_type_ids" in batch:
        types = batch["token_type_ids"]
        if not isinstance(types, torch.Tensor) or bool((types != 0).any()):
            raise ValueError("token_type_ids other than all zeros (a second segment) are not supported: "
                             "the head interface runs one segment per input")
    if max_positions is not None and ids.shape[1] > max_positions:
        lengths = mask.sum(dim=1)
        row = int(lengths.argmax())
        if not truncate and bool(mask[:, max_positions:].any()):  # (padding alone is cut without loss)
            raise ValueError(f"input {row} has {int(lengths[row])} tokens, more than {name}'s maximum of "
                             f"{max_positions}; shorten it, or pass truncate=True to tokenize() to keep "
                             f"the first {max_positions}")
        ids, mask = ids[:, :max_positions], mask[:, :max_positions]
    empty = (mask.sum(dim=1) == 0).nonzero().flatten()
    if len(empty):
        raise ValueError(f"attention_mask row {int(empty[0])} is all zeros: that input has no real token")
    if vocab_size is not None:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token id {bad} is outside {name}'s vocabulary of {vocab_size} ids "
                             f"(0..{vocab_size - 1})")
    return {"input_ids": ids, "attention_mask": mask}


def callback_name(fn) -> str:
    """How an error names a callback: its qualified name, else its repr."""
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def check_returned(new, old: torch.Tensor, fn, context: str, layer: int, what: str) -> torch.Tensor:
    """``new``, the value callback ``fn`` returned for ``old``, if it can replace it; else a clear
    error naming the callback, the layer and what is wrong."""
    name = callback_name(fn)
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"{context}: callback {name} returned {type(new).__name__ if new is not None else 'None'} "
                        f"for layer {layer}'s {what}; it must return a tensor of shape {tuple(old.shape)}")
    problems = [f"shape {tuple(new.shape)} instead of {tuple(old.shape)}" if new.shape != old.shape else "",
                f"dtype {new.dtype} instead of {old.dtype}" if new.dtype != old.dtype else "",
                f"device {new.device} instead of {old.device}" if new.device != old.device else ""]
    problems = [p for p in problems if p]
    if problems:
        raise ValueError(f"{context}: callback {name} returned {' and '.join(problems)} for layer "
                         f"{layer}'s {what}; it must keep the {what}'s shape, dtype and device")
    return new
