"""Interactive widgets (ipywidgets): live ablation.

The computation lives in plain classes (:class:`LiveAblation`) that tests and
benchmarks call directly; the widget functions only lay out controls and call
them. Each widget renders its initial state before it is returned, so the
static site (which embeds widget state) shows a meaningful picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.heads.ablation import Ablation
from headlab.heads.head import Head, format_head, format_heads
from headlab.heads.model import ABLATION_MODES, HeadModel
from headlab.metrics import mean_pool, next_token_loss
from headlab.viz.patterns import plot_pattern

__all__ = ["LiveAblation", "AblationView", "ablation_widget", "check_texts", "check_top_k", "check_mode"]


def check_texts(texts) -> list[str]:  # noqa: ANN001
    """The non-blank texts of a list of strings; ValueError/TypeError naming what is wrong otherwise."""
    if isinstance(texts, str):
        raise TypeError(f"texts must be a list of strings, got one string {texts[:40]!r}: write [{texts[:40]!r}]")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__} {str(texts)[:40]}") from None
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings: text {i} is {type(text).__name__} {str(text)[:40]}; "
                            "give the words themselves, e.g. ['the dog sees the cat .']")
    kept = [t for t in items if t.strip()]
    if not kept:
        raise ValueError("give at least one non-empty text")
    return kept


def check_top_k(top_k, vocab: int | None = None) -> int:  # noqa: ANN001
    """``top_k`` as an int in 1..vocab; ValueError naming it otherwise."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer (how many next tokens to list), got {top_k!r}")
    if vocab is not None and top_k > vocab:
        raise ValueError(f"top_k={top_k} is more than the model's {vocab} tokens: give 1..{vocab} (e.g. 5)")
    return top_k


def check_mode(mode) -> str:  # noqa: ANN001
    """``mode`` if it is an ablation mode; ValueError naming it and the choices otherwise."""
    if mode not in ABLATION_MODES:
        raise ValueError(f"unknown ablation mode {mode!r}: choose from {', '.join(ABLATION_MODES)}")
    return mode


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
        top_ablated: for causal LMs, the ablated model's own top next-token predictions at the
            same position, ``[(token, prob_clean, prob_ablated)]`` (ablated ranking).
    """

    metric: torch.Tensor
    clean: torch.Tensor
    top: list[tuple[str, float, float]]
    similarity: torch.Tensor | None
    pattern: torch.Tensor | None
    tokens: list[str]
    top_ablated: list[tuple[str, float, float]] = field(default_factory=list)


class LiveAblation:
    """Recompute the model's behaviour for a set of ablated heads (one forward pass)."""

    def __init__(self, hm: HeadModel, texts: Sequence[str], reference: Sequence[str] | None = None,
                 top_k: int = 5):
        self.hm = hm
        self.top_k = check_top_k(top_k)
        self.reference = check_texts(reference) if reference is not None else None
        self.set_texts(texts)
        if hm.causal:
            check_top_k(top_k, int(self._clean_out.shape[-1]))

    def set_texts(self, texts: Sequence[str]) -> None:
        texts = check_texts(texts)
        self.texts = texts
        self.batch = self.hm.tokenize(texts)
        with torch.no_grad():
            out = self.hm(self.batch)
        if self.hm.causal:
            self._clean_out = out
            self._pooled = None
            self.clean = next_token_loss(out, self.batch["input_ids"], self.batch["attention_mask"])
        else:
            self._pooled = mean_pool(out, self.batch["attention_mask"])
            self.clean = torch.zeros(len(texts))
        first = self.batch["input_ids"][0][self.batch["attention_mask"][0].bool()]
        tok = self.hm.tokenizer
        self.tokens = tok.convert_ids_to_tokens(first.tolist()) if tok is not None else [str(int(i)) for i in first]

    def view(self, ablated: Sequence[Head] = (), mode: str = "zero", selected: Head | None = None) -> AblationView:
        hm, batch = self.hm, self.batch
        check_mode(mode)
        if selected is not None:
            try:
                selected = hm.check_heads([selected])[0]
            except (TypeError, ValueError) as err:
                raise ValueError(f"selected={selected!r}: {err}") from None
        reference = None if mode == "zero" else (self.reference or self.texts)
        n = int(batch["attention_mask"][0].sum())
        names = ("pattern",) if selected is not None else ()
        layers = [selected[0]] if selected is not None else None
        with torch.no_grad(), hm.capture(names, layers=layers) as cache:
            if ablated:
                with hm.ablate(list(ablated), Ablation(mode, reference=reference)):
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
            ids_abl = torch.topk(p_abl, self.top_k).indices.tolist()
            names_abl = tok.convert_ids_to_tokens(ids_abl) if tok is not None else [str(i) for i in ids_abl]
            top_abl = [(name, float(p_clean[i]), float(p_abl[i])) for name, i in zip(names_abl, ids_abl)]
            return AblationView(metric, self.clean, top, None, pattern, self.tokens, top_abl)
        pooled = mean_pool(out, batch["attention_mask"])
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


    check_mode(mode)
    live = LiveAblation(hm, texts, reference=reference)
    preset = set(hm.check_heads(preset)) if preset else set()
    selected = hm.check_heads([selected])[0] if selected is not None else (sorted(preset)[0] if preset else (0, 0))
    toggles = {}
    for layer, head in hm.heads():
        toggles[(layer, head)] = w.ToggleButton(
            value=(layer, head) in preset, description=format_head((layer, head)),
            tooltip=f"ablate head {format_head((layer, head))}",
            layout=w.Layout(width="46px", height="26px", padding="0px"))
    grid = w.GridBox(list(toggles.values()),
                     layout=w.Layout(grid_template_columns=f"repeat({hm.n_heads}, 48px)", grid_gap="2px"))
    mode_box = w.Dropdown(options=list(ABLATION_MODES), value=mode, description="mode")
    head_box = w.Dropdown(options=[(format_head((l, h)), (l, h)) for l, h in hm.heads()], value=selected,
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
        plot_pattern(ax, view.pattern, view.tokens, title=f"head {format_head((layer, head))} on the first text")
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
    names = format_heads(ablated, empty="none")
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
