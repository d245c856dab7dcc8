"""Interactive widgets (ipywidgets): live ablation.

The computation lives in plain classes (:class:`LiveAblation`) that tests and
benchmarks call directly; the widget functions only lay out controls and call
them. Each widget renders its initial state before it is returned, so the
static site (which embeds widget state) shows a meaningful picture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .metrics import next_token_loss
from .model import ABLATION_MODES, Head, HeadModel

__all__ = ["LiveAblation", "AblationView", "ablation_widget"]


@dataclass
class AblationView:
    """Everything the live-ablation widget shows for one setting.

    Attributes:
        metric: per text, the ablated metric (next-token loss for causal LMs; 1 - cos of the
            pooled embedding to the clean one for encoders).
        clean: per text, the clean metric (zeros for encoders).
        top: for causal LMs, the top next-token predictions at the last real position of the
            first text, ``[(token, prob_clean, prob_ablated)]`` (clean ranking); ``[]`` for encoders.
        similarity: for encoders, the cosine similarity matrix of the texts' ablated embeddings;
            ``None`` for causal LMs.
        pattern: the selected head's pattern on the first text ``(pos, pos)`` (ablation applied
            to the heads below it), and ``tokens`` its labels.
    """

    metric: torch.Tensor
    clean: torch.Tensor
    top: list[tuple[str, float, float]]
    similarity: torch.Tensor | None
    pattern: torch.Tensor | None
    tokens: list[str]


class LiveAblation:
    """Recompute the model's behaviour for a set of ablated heads (one forward pass)."""

    def __init__(self, hm: HeadModel, texts: Sequence[str], reference: Sequence[str] | None = None,
                 top_k: int = 5):
        self.hm = hm
        self.top_k = top_k
        self.reference = list(reference) if reference is not None else None
        self.set_texts(texts)

    def set_texts(self, texts: Sequence[str]) -> None:
        texts = [t for t in texts if t.strip()]
        if not texts:
            raise ValueError("give at least one non-empty text")
        self.texts = texts
        self.batch = self.hm.tokenize(texts)
        with torch.no_grad():
            out = self.hm(self.batch)
        if self.hm.causal:
            self._clean_out = out
            self._pooled = None
            self.clean = next_token_loss(out, self.batch["input_ids"], self.batch["attention_mask"])
        else:
            self._pooled = self.hm.metric(out, self.batch)
            self.clean = torch.zeros(len(texts))
        first = self.batch["input_ids"][0][self.batch["attention_mask"][0].bool()]
        tok = self.hm.tokenizer
        self.tokens = tok.convert_ids_to_tokens(first.tolist()) if tok is not None else [str(int(i)) for i in first]

    def view(self, ablated: Sequence[Head] = (), mode: str = "zero", selected: Head | None = None) -> AblationView:
        hm, batch = self.hm, self.batch
        if mode not in ABLATION_MODES:
            raise ValueError(f"unknown ablation mode {mode!r}: choose from {', '.join(ABLATION_MODES)}")
        reference = None if mode == "zero" else (self.reference or self.texts)
        n = int(batch["attention_mask"][0].sum())
        names = ("pattern",) if selected is not None else ()
        layers = [selected[0]] if selected is not None else None
        with torch.no_grad(), hm.capture(names, layers=layers) as cache:
            if ablated:
                with hm.ablate(list(ablated), mode=mode, reference=reference):
                    out = hm(batch)
            else:
                out = hm(batch)
        pattern = None
        if selected is not None:
            pattern = cache.pattern(selected[0])[0, selected[1], :n, :n]
        if hm.causal:
            metric = next_token_loss(out, batch["input_ids"], batch["attention_mask"])
            last = n - 1
            p_clean = torch.softmax(self._clean_out[0, last].float(), -1)
            p_abl = torch.softmax(out[0, last].float(), -1)
            ids = torch.topk(p_clean, self.top_k).indices.tolist()
            tok = hm.tokenizer
            names_ = tok.convert_ids_to_tokens(ids) if tok is not None else [str(i) for i in ids]
            top = [(name, float(p_clean[i]), float(p_abl[i])) for name, i in zip(names_, ids)]
            return AblationView(metric, self.clean, top, None, pattern, self.tokens)
        pooled = hm.metric(out, batch)
        metric = 1 - torch.nn.functional.cosine_similarity(pooled, self._pooled, dim=-1)
        e = torch.nn.functional.normalize(pooled, dim=-1)
        return AblationView(metric, self.clean, [], e @ e.T, pattern, self.tokens)


def ablation_widget(hm: HeadModel, texts: Sequence[str], preset: Sequence[Head] = (), mode: str = "zero",
                    selected: Head | None = None, reference: Sequence[str] | None = None):
    """A layers x heads grid of toggles (on = ablated), a mode choice, a text box, and a live
    read-out: the metric per text and, for causal LMs, the top next-token predictions of the first
    text; plus the selected head's pattern. ``preset``: heads ablated at start."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    from .plotting import plot_pattern

    live = LiveAblation(hm, texts, reference=reference)
    preset = set(hm.check_heads(preset)) if preset else set()
    selected = selected or (sorted(preset)[0] if preset else (0, 0))
    toggles = {}
    for layer, head in hm.heads():
        toggles[(layer, head)] = w.ToggleButton(
            value=(layer, head) in preset, description=f"{layer}.{head}", tooltip=f"ablate head {layer}.{head}",
            layout=w.Layout(width="46px", height="26px", padding="0px"))
    grid = w.GridBox(list(toggles.values()),
                     layout=w.Layout(grid_template_columns=f"repeat({hm.n_heads}, 48px)", grid_gap="2px"))
    mode_box = w.Dropdown(options=list(ABLATION_MODES), value=mode, description="mode")
    head_box = w.Dropdown(options=[(f"{l}.{h}", (l, h)) for l, h in hm.heads()], value=selected,
                          description="show head")
    text_box = w.Textarea(value="\n".join(texts), description="texts", rows=min(6, len(texts) + 1),
                          layout=w.Layout(width="95%"))
    readout = w.HTML()
    figure = w.Output()

    def render(*_):
        try:
            lines = [t for t in text_box.value.splitlines() if t.strip()]
            if lines != live.texts:
                live.set_texts(lines)
            ablated = [h for h, t in toggles.items() if t.value]
            view = live.view(ablated, mode_box.value, head_box.value)
        except ValueError as err:
            readout.value = f"<b>error:</b> {err}"
            return
        readout.value = _readout_html(hm, live.texts, ablated, view)
        figure.clear_output(wait=True)
        fig, ax = plt.subplots(figsize=(3.6, 3.4), constrained_layout=True)
        layer, head = head_box.value
        plot_pattern(ax, view.pattern, view.tokens, title=f"head {layer}.{head} on the first text")
        plt.close(fig)
        with figure:
            display(fig)

    for t in toggles.values():
        t.observe(render, names="value")
    mode_box.observe(render, names="value")
    head_box.observe(render, names="value")
    text_box.observe(render, names="value")
    render()
    return w.VBox([w.HTML("<b>Click heads to ablate them</b> (rows: layers, columns: heads)"), grid,
                   w.HBox([mode_box, head_box]), text_box, w.HBox([readout, figure])])


def _readout_html(hm: HeadModel, texts, ablated, view: AblationView) -> str:
    names = ", ".join(f"{l}.{h}" for l, h in ablated) or "none"
    rows = []
    what = "next-token loss" if hm.causal else "1 - cos to clean embedding"
    for text, clean, value in zip(texts, view.clean.tolist(), view.metric.tolist()):
        short = (text[:48] + "…") if len(text) > 49 else text
        if hm.causal:
            rows.append(f"<tr><td>{_esc(short)}</td><td>{clean:.3f}</td><td>{value:.3f}</td></tr>")
        else:
            rows.append(f"<tr><td>{_esc(short)}</td><td></td><td>{value:.4f}</td></tr>")
    html = (f"<div style='font-size:12px'><b>ablated:</b> {names}<br><b>{what}</b>"
            "<table><tr><th>text</th><th>clean</th><th>ablated</th></tr>" + "".join(rows) + "</table>")
    if view.top:
        html += "<b>top predictions after the first text</b><table><tr><th>token</th><th>clean</th><th>ablated</th></tr>"
        html += "".join(f"<tr><td>{_esc(t)}</td><td>{a:.3f}</td><td>{b:.3f}</td></tr>" for t, a, b in view.top)
        html += "</table>"
    return html + "</div>"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
