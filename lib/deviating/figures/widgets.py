"""The book's teaching widgets: one attention row at an adjustable temperature (chapter 0) and
the patterns of models that differ only in their number of heads (chapter 2).

Both are `anywidget <https://anywidget.dev>`_ widgets built on what the library's live widgets
share (:mod:`headlab.viz.live`: the tokenizer in the browser, packed arrays, core.js); their
front-ends are ``deviating/figures/js/``. In a notebook the kernel computes each view with
PyTorch (:class:`HeadCountPatterns`); on the static site the front-end runs the models' ONNX
exports with onnxruntime-web.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import anywidget
import numpy as np
import torch
import traitlets as t

from headlab.heads.model import HeadModel
from headlab.viz.live import encode, onnx_file, packed, spec_or_none, widget_module
from headlab.viz.widgets import check_texts

__all__ = ["HeadCountView", "HeadCountPatterns", "TemperatureWidget", "temperature_widget", "HeadsWidget",
           "heads_widget", "JS"]

JS = Path(__file__).resolve().parent / "js"  # the front-ends of these widgets (core.js is headlab's)

@dataclass
class HeadCountView:
    """What the adjustable-heads widget shows for one setting.

    Attributes:
        n_heads, d_head: the chosen model's head geometry.
        layer: the layer shown.
        tokens: the text's tokens (``<bos>`` first for the book's GPTs).
        pattern: ``(head, q_pos, k_pos)``, every head's attention pattern on the text.
    """

    n_heads: int
    d_head: int
    layer: int
    tokens: list[str]
    pattern: torch.Tensor


class HeadCountPatterns:
    """Patterns of models that differ only in their number of heads, on any text.

    ``models`` maps a head count to a :class:`HeadModel`; all of them must share the
    number of layers, ``d_model`` and the vocabulary, so that the same text gives the
    same tokens to each.
    """

    def __init__(self, models: dict[int, HeadModel]):
        if not models:
            raise ValueError("give at least one model, as {n_heads: HeadModel}")
        for n_heads, hm in models.items():
            if not isinstance(hm, HeadModel):
                raise TypeError(f"models[{n_heads!r}] must be a HeadModel, got {type(hm).__name__}")
            if hm.n_heads != n_heads:
                raise ValueError(f"models[{n_heads}] has {hm.n_heads} heads; key each model by its head count")
        first = next(iter(models.values()))
        for hm in models.values():
            same = (hm.n_layers, hm.d_model) == (first.n_layers, first.d_model)
            if not same or hm.tokenizer is None or hm.tokenizer.get_vocab() != first.tokenizer.get_vocab():
                raise ValueError(f"{hm.name} and {first.name} differ in layers, d_model or vocabulary: "
                                 "compare models that differ only in their number of heads")
        self.models = dict(sorted(models.items()))
        self.n_layers = first.n_layers

    @property
    def head_counts(self) -> list[int]:
        return list(self.models)

    def tokenize(self, text: str) -> dict[str, torch.Tensor]:
        """Token ids of ``text`` with ``<bos>`` first (added when the tokenizer does not add
        it); raises ``ValueError`` naming the words the vocabulary does not have."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("give a non-empty text")
        tok = next(iter(self.models.values())).tokenizer
        ids = tok(text)["input_ids"]
        if tok.bos_token_id is not None and (not ids or ids[0] != tok.bos_token_id):
            ids = [tok.bos_token_id] + ids
        unk = tok.unk_token_id
        if unk is not None and unk in ids:
            unknown = [w for w in text.split() if tok(w)["input_ids"] == [unk]]
            raise ValueError(f"not in the vocabulary: {', '.join(repr(w) for w in unknown)}; "
                             "use words of the book's synthetic language")
        n_ctx = getattr(next(iter(self.models.values())).model.config, "n_ctx", None)
        if n_ctx is not None and len(ids) > n_ctx:
            raise ValueError(f"the text has {len(ids)} tokens, more than the models' n_ctx = {n_ctx}")
        ids_t = torch.tensor([ids])
        return {"input_ids": ids_t, "attention_mask": torch.ones_like(ids_t)}

    def view(self, n_heads: int, text: str, layer: int = 0) -> HeadCountView:
        """Every head's pattern in ``layer`` of the ``n_heads``-head model on ``text``."""
        if n_heads not in self.models:
            raise ValueError(f"no model with {n_heads} heads; available: {self.head_counts}")
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer {layer} is out of range: the models have layers 0..{self.n_layers - 1}")
        hm = self.models[n_heads]
        batch = self.tokenize(text)
        _, cache = hm.run_with_cache(batch, names=("pattern",), layers=[layer])
        tokens = hm.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
        return HeadCountView(n_heads, hm.d_head, layer, tokens, cache.pattern(layer)[0])  # (head, q, k)


# ---------------------------------------------------------------------------- widgets


class TemperatureWidget(anywidget.AnyWidget):
    """One attention row at an adjustable temperature (computed in the browser)."""

    def __repr__(self) -> str:  # what a notebook shows where widgets do not render
        return f"TemperatureWidget(T = {self.temperature:g} over {len(self.scores)} keys)"

    _esm = widget_module("temperature", JS)
    scores = t.List(t.Float()).tag(sync=True)
    labels = t.List(t.Unicode()).tag(sync=True)  # ("keys" is taken: ipywidgets' list of synced traits)
    temperature = t.Float(1.0).tag(sync=True)
    t_min = t.Float(0.1).tag(sync=True)
    t_max = t.Float(5.0).tag(sync=True)
    step = t.Float(0.1).tag(sync=True)


def temperature_widget(scores: Sequence[float], keys: Sequence[str], temperature: float = 1.0,
                       t_min: float = 0.1, t_max: float = 5.0, step: float = 0.1) -> TemperatureWidget:
    """A slider for ``T`` and the bar chart of ``softmax(scores / T)`` over ``keys``, titled
    with the row's entropy in nats."""
    scores = [float(s) for s in np.asarray(scores, dtype=float).ravel()]
    keys = [str(k) for k in keys]
    if not scores or len(scores) != len(keys):
        raise ValueError(f"give one key per score: {len(scores)} scores, {len(keys)} keys")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"scores must be finite, got {scores}")
    if not 0 < t_min <= temperature <= t_max:
        raise ValueError(f"need 0 < t_min <= temperature <= t_max, got {t_min}, {temperature}, {t_max}")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step <= t_max - t_min:
        raise ValueError(f"step must be a number in (0, t_max - t_min] = (0, {t_max - t_min:g}], got {step!r}: the "
                         "slider moves by it")
    return TemperatureWidget(scores=scores, labels=keys, temperature=float(temperature), t_min=float(t_min),
                             t_max=float(t_max), step=float(step))


class HeadsWidget(anywidget.AnyWidget):
    """Patterns of models that differ only in their number of heads (see :func:`heads_widget`)."""

    _esm = widget_module("heads", JS)
    head_counts = t.List(t.Int()).tag(sync=True)
    n_heads = t.Int().tag(sync=True)
    n_layers = t.Int().tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    text = t.Unicode().tag(sync=True)
    texts = t.List(t.Unicode()).tag(sync=True)
    notes = t.Dict().tag(sync=True)
    d_heads = t.Dict().tag(sync=True)
    tokenizer = t.Dict(allow_none=True).tag(sync=True)
    onnx = t.Dict().tag(sync=True)
    view = t.Dict().tag(sync=True)

    def __repr__(self) -> str:
        return (f"HeadsWidget({'/'.join(map(str, self.head_counts))} heads, showing {self.n_heads} "
                f"in layer {self.layer})")

    def __init__(self, core: HeadCountPatterns, **kwargs):
        self._core = core
        super().__init__(**kwargs)
        self.observe(self._recompute, names=["n_heads", "layer", "text"])
        self._recompute()

    def compute(self) -> dict:
        """The view for the current controls, with PyTorch (raises ``ValueError`` on bad input)."""
        if self.tokenizer is not None:
            encode(self.text, self.tokenizer)  # the browser's message for words outside the vocabulary
        view = self._core.view(self.n_heads, self.text, self.layer)
        return {"n_heads": view.n_heads, "d_head": view.d_head, "layer": view.layer, "tokens": view.tokens,
                "pattern": packed(view.pattern), "error": None}

    def _recompute(self, *_) -> None:
        try:
            self.view = self.compute()
        except ValueError as err:
            self.view = {**self.view, "error": str(err)}


def heads_widget(models: dict[int, HeadModel], texts: Sequence[str], n_heads: int | None = None,
                 layer: int = 0, notes: dict[int, str] | None = None) -> HeadsWidget:
    """Choose a number of heads, a layer and a sentence; see every head's pattern.

    ``models``: head count -> model (:class:`~headlab.viz.widgets.HeadCountPatterns`);
    ``texts``: suggestions; ``notes``: a line per head count."""
    core = HeadCountPatterns(models)
    if isinstance(texts, str):
        raise TypeError(f"texts must be a list of texts, got one string {texts[:40]!r}: write [{texts[:20]!r}, ...]")
    texts = check_texts(list(texts))
    n_heads = core.head_counts[-1] if n_heads is None else n_heads
    if n_heads not in core.models:
        raise ValueError(f"no model with {n_heads} heads; available: {core.head_counts}")
    if not 0 <= layer < core.n_layers:
        raise ValueError(f"layer {layer} is out of range: the models have layers 0..{core.n_layers - 1}")
    first = next(iter(core.models.values()))
    spec = spec_or_none(first.tokenizer, add_bos=True, n_ctx=getattr(first.model.config, "n_ctx", None))
    onnx = {str(h): onnx_file(hm) for h, hm in core.models.items()} if spec is not None else {}
    widget = HeadsWidget(core, head_counts=core.head_counts, n_heads=n_heads, n_layers=core.n_layers,
                         layer=layer, text=texts[0], texts=texts,
                         notes={str(k): v for k, v in (notes or {}).items()},
                         d_heads={str(h): hm.d_head for h, hm in core.models.items()},
                         tokenizer=spec, onnx={k: v for k, v in onnx.items() if v})
    if widget.view.get("error"):
        raise ValueError(widget.view["error"])
    return widget
