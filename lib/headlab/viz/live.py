"""Widgets that compute wherever the reader is: in a notebook and on the static website.

The live-ablation `anywidget <https://anywidget.dev>`_ widget (:func:`ablation_widget`) with its
typed lines ``text | A | B`` (:func:`parse_line`, :func:`candidate_token`), its front-end in
``headlab/viz/js/``, and what any such widget shares: the tokenizer in the browser (:func:`tokenizer_spec`,
:func:`encode`), packed arrays (:func:`packed`), the front-end's module (:func:`widget_module`). The
book's teaching widgets (the temperature of one row, models that differ only in their number of heads)
are built on these in ``deviating.figures.widgets``. In a notebook the kernel computes each view with
PyTorch; on the static site the front-end runs the models' ONNX exports (:mod:`headlab.heads.onnx`)
with onnxruntime-web. The first view is computed here and saved with the notebook.
"""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import anywidget
import numpy as np
import regex  # GPT-2's pre-tokenizer needs \p{L}; a dependency of transformers
import torch
import traitlets as t

from headlab.heads.model import HeadModel
from headlab.viz.widgets import LiveAblation, check_mode, check_texts, check_top_k
from headlab.models.checkpoints import CHECKPOINT_DIR, available_organisms
from headlab.models.gpt import GPT
from headlab.heads.onnx import onnx_file_name

__all__ = ["AblationWidget", "ablation_widget", "tokenizer_spec", "encode", "byte_chars", "BPE_SPLIT",
           "shipped_checkpoint", "onnx_file", "spec_or_none", "packed", "unpack", "widget_module", "JS_DIR",
           "parse_line", "candidate_token"]

JS_DIR = Path(__file__).resolve().parent / "js"
ABLATION_MODES = ("zero", "mean")


@lru_cache(maxsize=None)
def widget_module(name: str, folder: Path = JS_DIR) -> str:
    """The ES module of widget ``name``: headlab's core.js (shared functions) followed by
    ``folder/name.js``."""
    return (JS_DIR / "core.js").read_text(encoding="utf8") + "\n" + (Path(folder) / f"{name}.js").read_text(encoding="utf8")


# ---------------------------------------------------------------------------- tokens


def tokenizer_spec(tokenizer, add_bos: bool = False, n_ctx: int | None = None) -> dict:
    """What the browser needs to tokenize like ``tokenizer``: a whitespace-split word-level
    vocabulary (``"kind": "words"``) or a byte-level BPE (``"kind": "bpe"``, as GPT-2's).

    Returns ``{"kind", "vocab": "the tokens by id, space-separated", "prefix": [ids], "suffix": [ids],
    "bos_id", "pad_id", "add_bos", "n_ctx"}``; ``prefix``/``suffix``: the special tokens the template
    adds. A BPE spec adds ``"merges"`` (the merge pairs in rank order, space-separated) and ``"special"``
    (special token -> id). Raises ``ValueError`` for any other tokenizer.
    """
    desc = json.loads(tokenizer.backend_tokenizer.to_str())
    model, pre = desc.get("model", {}), desc.get("pre_tokenizer") or {}
    kind = {("WordLevel", "WhitespaceSplit"): "words", ("BPE", "ByteLevel"): "bpe"}.get((model.get("type"), pre.get("type")))
    if kind is None or desc.get("normalizer") is not None or (kind == "bpe" and (
            pre.get("add_prefix_space") or not pre.get("use_regex", True) or model.get("byte_fallback"))):
        raise ValueError(f"the browser tokenizes only whitespace-split word-level vocabularies and byte-level "
                         f"BPE; this tokenizer is {model.get('type')} with pre-tokenizer {pre.get('type')}: "
                         "use the widget with a kernel")
    vocab = tokenizer.get_vocab()
    by_id = sorted(vocab, key=vocab.get)
    if [vocab[w] for w in by_id] != list(range(len(by_id))):
        raise ValueError("the vocabulary's ids are not 0..n-1; the browser tokenizer needs a dense vocabulary")
    special = set(tokenizer.all_special_tokens)
    word = next(w for w in by_id if w not in special)
    ids = tokenizer(word if kind == "words" else tokenizer.convert_tokens_to_string([word]))["input_ids"]
    at = ids.index(vocab[word])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if any(not w or w != w.strip() or len(w.split()) != 1 for w in by_id):
        raise ValueError("a vocabulary entry contains whitespace; the browser tokenizer splits on whitespace")
    # one space-separated string (no entry holds whitespace): one line in a saved notebook
    spec = {"kind": kind, "vocab": " ".join(by_id), "prefix": ids[:at], "suffix": ids[at + 1:],
            "bos_id": tokenizer.bos_token_id, "pad_id": pad if pad is not None else 0, "add_bos": bool(add_bos),
            "n_ctx": n_ctx}
    if kind == "bpe":  # merges are "a b" strings or [a, b] pairs, by tokenizers' version
        spec["merges"] = " ".join(m if isinstance(m, str) else " ".join(m) for m in model["merges"])
        spec["special"] = {t["content"]: t["id"] for t in desc.get("added_tokens", []) if t.get("special")}
    return spec


def encode(text: str, spec: dict) -> list[int]:
    """Token ids of ``text`` under ``spec`` exactly as the browser computes them (core.js
    ``encode``); raises ``ValueError`` naming every word outside a word-level vocabulary."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("give a non-empty text")
    index = {w: i for i, w in enumerate(spec["vocab"].split(" "))}
    if spec.get("kind") == "bpe":
        body = _bpe_encode(text, spec, index)
    else:
        words = text.split()
        unknown = list(dict.fromkeys(w for w in words if w not in index))
        if unknown:
            raise ValueError(f"not in the vocabulary: {', '.join(repr(w) for w in unknown)}; "
                             "use words of the book's synthetic language")
        body = [index[w] for w in words]
    ids = [*spec["prefix"], *body, *spec["suffix"]]
    if spec["add_bos"] and (not ids or ids[0] != spec["bos_id"]):
        ids = [spec["bos_id"], *ids]
    if spec["n_ctx"] and len(ids) > spec["n_ctx"]:
        raise ValueError(f"the text has {len(ids)} tokens, more than the model's n_ctx = {spec['n_ctx']}")
    return ids


# GPT-2's pre-tokenizer: contractions, letters, digits, other symbols (each with one leading space)
BPE_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@lru_cache(maxsize=1)
def byte_chars() -> tuple[str, ...]:
    """GPT-2's printable stand-in for each byte 0..255 (byte-level BPE's alphabet; a space is ``Ġ``)."""
    kept, shifted = {*range(33, 127), *range(161, 173), *range(174, 256)}, iter(range(256, 512))
    return tuple(chr(b) if b in kept else chr(next(shifted)) for b in range(256))


def _bpe_encode(text: str, spec: dict, index: dict[str, int]) -> list[int]:
    flat = spec["merges"].split(" ")
    ranks = {(a, b): r for r, (a, b) in enumerate(zip(flat[::2], flat[1::2]))}
    special = spec.get("special") or {}
    pieces = regex.split("(" + "|".join(map(regex.escape, special)) + ")", text) if special else [text]
    ids: list[int] = []
    for piece in pieces:
        if piece in special:
            ids.append(special[piece])
            continue
        for word in regex.findall(BPE_SPLIT, piece):
            parts = [byte_chars()[b] for b in word.encode("utf8")]
            while len(parts) > 1:  # merge the best-ranked adjacent pair until none is ranked
                rank, i = min((ranks.get(pair, len(ranks)), i) for i, pair in enumerate(zip(parts, parts[1:])))
                if rank == len(ranks):
                    break
                parts[i:i + 2] = [parts[i] + parts[i + 1]]
            ids.extend(index[p] for p in parts)
    return ids


def parse_line(line: str) -> tuple[str, list[str]]:
    """A typed line as ``(text, candidates)``: ``"text | A | B"`` gives ``(text, [A, B])`` (the text's
    trailing spaces dropped), a line without ``|`` gives ``(line, [])``. ``A`` and ``B`` are two candidate
    next tokens (:func:`candidate_token`); core.js ``parseLine`` is the same rule. Raises ``ValueError``
    naming the line unless exactly two non-empty candidates follow the text."""
    text, *candidates = line.split("|")
    candidates = [c.strip() for c in candidates]
    if candidates and (len(candidates) != 2 or not all(candidates) or not text.strip()):
        found = [c for c in candidates if c]
        problem = "no text before '|'" if not text.strip() else f"{len(found)} candidates {found}, not 2"
        raise ValueError(f"{line.strip()!r}: {problem}; write the text, then two candidate next tokens "
                         "after '|', e.g. 'When Mary and John went out, John gave a drink to | Mary | John'")
    return (text.rstrip(), candidates) if candidates else (line, [])


def candidate_token(word: str, tokenizer, spec: dict | None = None) -> int:
    """The token id of candidate ``word``: the one token of ``" " + word`` (the word after a space), or of
    the characters between the quotes when ``word`` is written in double quotes (``"."``: a full stop
    with no space), tokenized by ``spec`` (as the browser does) or else by ``tokenizer``. Raises
    ``ValueError`` naming a candidate that is not one token, with its tokens and what to do."""
    piece = word[1:-1] if len(word) > 1 and word[0] == word[-1] == '"' else " " + word
    bare = {**spec, "prefix": [], "suffix": [], "add_bos": False, "n_ctx": None} if spec is not None else None
    ids = [] if not piece.strip() else encode(piece, bare) if bare else tokenizer(piece, add_special_tokens=False)[
        "input_ids"]
    if len(ids) != 1:
        parts = [tokenizer.decode([i]) for i in ids]
        raise ValueError(f"candidate {word!r} is {len(ids)} tokens for this model ({' + '.join(map(repr, parts))}), "
                         "not one: the logit difference compares two single next tokens; choose a word the "
                         "tokenizer keeps whole (a more frequent one)")
    return ids[0]


# ---------------------------------------------------------------------------- models


def shipped_checkpoint(hm: HeadModel) -> str | None:
    """The name of the shipped checkpoint whose weights (every tensor) ``hm`` holds, or ``None``."""
    from safetensors.torch import load_file


    if not isinstance(hm.model, GPT) or hm.name not in available_organisms():
        return None
    saved = load_file(str(CHECKPOINT_DIR / hm.name / "model.safetensors"))
    state = hm.model.state_dict()
    if set(saved) != set(state):
        return None
    return hm.name if all(torch.equal(saved[k], state[k].detach().cpu().float()) for k in saved) else None


def onnx_file(hm: HeadModel) -> str:
    """The file name of ``hm``'s ONNX export on the static site, or ``""`` for a model that is no shipped checkpoint."""
    name = shipped_checkpoint(hm)
    return onnx_file_name(name) if name is not None else ""


def spec_or_none(tokenizer, **kwargs) -> dict | None:
    """:func:`tokenizer_spec`, or None for a tokenizer the browser cannot run."""
    try:
        return tokenizer_spec(tokenizer, **kwargs)
    except (ValueError, AttributeError):
        return None


def packed(x: torch.Tensor) -> dict:
    """An array as ``{"shape": [...], "float32": base64 of its little-endian float32 bytes}``:
    one short line in a saved notebook and a page, where nested lists take a line a number.
    The front-end unpacks it (core.js ``unpack``)."""

    a = np.ascontiguousarray(x.detach().cpu().numpy(), dtype="<f4")
    return {"shape": list(a.shape), "float32": base64.b64encode(a.tobytes()).decode("ascii")}


def unpack(value) -> np.ndarray:
    """The array of :func:`packed` (or of a nested list, as the browser's own views hold)."""

    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["float32"]), dtype="<f4").reshape(value["shape"])
    return np.asarray(value, dtype=float)


# ---------------------------------------------------------------------------- widgets


class AblationWidget(anywidget.AnyWidget):
    """Live ablation of a causal language model's heads (see :func:`ablation_widget`)."""

    _esm = widget_module("ablation")
    n_layers = t.Int().tag(sync=True)
    n_heads = t.Int().tag(sync=True)
    d_head = t.Int().tag(sync=True)
    ablated = t.List(t.List(t.Int())).tag(sync=True)
    mode = t.Unicode("zero").tag(sync=True)
    selected = t.List(t.Int()).tag(sync=True)
    texts = t.List(t.Unicode()).tag(sync=True)
    top_k = t.Int(5).tag(sync=True)
    tokenizer = t.Dict(allow_none=True).tag(sync=True)
    onnx = t.Unicode("").tag(sync=True)
    view = t.Dict().tag(sync=True)

    def __repr__(self) -> str:
        ablated = ", ".join(f"{l}.{h}" for l, h in self.ablated) or "none"
        return f"AblationWidget({self._hm.name}: ablated {ablated}, {self.mode} ablation)"

    def __init__(self, hm: HeadModel, **kwargs):
        self._hm = hm
        self._live: LiveAblation | None = None
        super().__init__(**kwargs)
        self.observe(self._recompute, names=["ablated", "mode", "selected", "texts"])
        self._recompute()

    def compute(self) -> dict:
        """The view for the current controls, with PyTorch (raises ``ValueError`` on bad input)."""
        check_mode(self.mode, ABLATION_MODES)
        lines = [parse_line(x) for x in self.texts if x.strip()]
        texts, candidates = [x for x, _ in lines], [c for _, c in lines]
        if any(candidates) and not self._hm.causal:
            raise ValueError(f"{self._hm.name} is an encoder: it predicts no next token, so no line can end in "
                             "'| A | B'")
        if self.tokenizer is not None:
            for text in texts:
                encode(text, self.tokenizer)
        pairs = [tuple(candidate_token(w, self._hm.tokenizer, self.tokenizer) for w in c) if c else None
                 for c in candidates]
        if self._live is None or self._live.texts != texts or self._live.contrast != pairs:
            self._live = LiveAblation(self._hm, texts, top_k=self.top_k, contrast=pairs)
        heads = self._hm.check_heads(self.ablated) if self.ablated else []
        selected = self._hm.check_heads([self.selected])[0]
        view = self._live.view(heads, self.mode, selected)
        return {"texts": texts, "clean": view.clean.tolist(), "metric": view.metric.tolist(), "what":
                "next-token loss (nats)" if self._hm.causal else "1 - cos of the pooled embedding to the clean one",
                "candidates": candidates, "contrast": view.contrast, "contrast_clean": view.contrast_clean,
                "ablated": [list(x) for x in heads], "mode": self.mode, "selected": list(selected),
                "top": [list(x) for x in view.top], "top_ablated": [list(x) for x in view.top_ablated],
                "tokens": list(view.tokens), "pattern": packed(view.pattern), "error": None}

    def _recompute(self, *_) -> None:
        try:
            self.view = self.compute()
        except ValueError as err:
            self.view = {**self.view, "error": str(err)}


def ablation_widget(hm: HeadModel, texts: Sequence[str], preset: Sequence = (), mode: str = "zero",
                    selected=None, top_k: int = 5, contrast: Sequence | None = None) -> AblationWidget:
    """A layers x heads grid of toggles (on = ablated) with the loss per text, the top-``top_k``
    next tokens and the ``selected`` head's pattern, clean and ablated. For an encoder, 1 - cos of
    each text's pooled embedding to the clean one instead of the loss, and no next tokens.

    ``contrast``: per text ``None`` or two candidate next tokens ``(A, B)`` (:func:`candidate_token`),
    e.g. ``("Mary", "John")``; the widget then also shows logit(A) - logit(B) at the text's end. The
    reader writes the same as a typed line, ``text | A | B`` (:func:`parse_line`)."""
    check_mode(mode, ABLATION_MODES)
    texts = check_texts(texts)
    if contrast is not None:
        if len(contrast) != len(texts) or any(c is not None and (isinstance(c, str) or len(c) != 2)
                                              for c in contrast):
            raise ValueError(f"contrast: give one pair (A, B) or None per text, got {contrast!r} for {len(texts)} "
                             "texts")
        texts = [t if c is None else " | ".join([t.rstrip(), *map(str, c)]) for t, c in zip(texts, contrast)]
    check_top_k(top_k, getattr(hm.model.config, "d_vocab", None))
    preset = hm.check_heads(preset) if preset else []
    selected = hm.check_heads([selected])[0] if selected is not None else (preset[0] if preset else (0, 0))
    spec = spec_or_none(hm.tokenizer, n_ctx=getattr(hm.model.config, "n_ctx", None))
    widget = AblationWidget(hm, n_layers=hm.n_layers, n_heads=hm.n_heads, d_head=hm.d_head,
                            ablated=[list(x) for x in preset], mode=mode, selected=list(selected),
                            texts=texts, top_k=top_k, tokenizer=spec,
                            onnx=onnx_file(hm) if spec is not None else "")
    if widget.view.get("error"):
        raise ValueError(widget.view["error"])
    return widget
