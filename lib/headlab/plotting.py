"""The book's figures: one module, so every chapter draws a pattern the same way.

Functions take a matplotlib ``Axes`` (or create a figure) and return what they
drew; nothing here changes global matplotlib settings.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def new_axes(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (3.2, 3.0), **kwargs):
    """A figure with ``nrows x ncols`` axes of the given size each (inches)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False,
                             constrained_layout=True, **kwargs)
    return fig, axes


def plot_pattern(ax, pattern, tokens: Sequence[str] | None = None, title: str | None = None,
                 vmax: float | None = 1.0, cmap: str = "Blues", max_labels: int = 40):
    """An attention pattern ``(q_pos, k_pos)`` as a heat map: rows are queries, columns keys."""
    p = _np(pattern)
    if p.ndim != 2:
        raise ValueError(f"pattern must be (q_pos, k_pos), got shape {p.shape}")
    image = ax.imshow(p, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
    if tokens is not None and len(tokens) <= max_labels:
        if len(tokens) != p.shape[1]:
            raise ValueError(f"{len(tokens)} token labels for {p.shape[1]} keys")
        ax.set_xticks(range(len(tokens)), [str(t) for t in tokens], rotation=90, fontsize=7)
        ax.set_yticks(range(p.shape[0]), [str(t) for t in tokens[: p.shape[0]]], fontsize=7)
    else:
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
    if title:
        ax.set_title(title, fontsize=9)
    return image


def plot_head_grid(ax, values, title: str | None = None, cmap: str = "viridis", annotate: bool = True,
                   fmt: str = "{:.2f}", vmin: float | None = None, vmax: float | None = None,
                   colorbar: bool = True, label: str | None = None):
    """A ``(n_layers, n_heads)`` score as a grid: one cell per head, layer on the vertical axis."""
    v = _np(values)
    if v.ndim != 2:
        raise ValueError(f"values must be (n_layers, n_heads), got shape {v.shape}")
    image = ax.imshow(v, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(v.shape[1]))
    ax.set_yticks(range(v.shape[0]))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if annotate and v.size <= 160:
        finite = v[np.isfinite(v)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        for (l, h), x in np.ndenumerate(v):
            if np.isfinite(x):
                ax.text(h, l, fmt.format(x), ha="center", va="center", fontsize=6,
                        color="white" if x < mid else "black")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8, label=label)
    return image


def plot_lorenz(ax, x, y, label: str | None = None):
    """A Lorenz curve with the line of perfect equality."""
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
    ax.plot(x, y, lw=2, label=label, drawstyle="steps-post")
    ax.set_xlabel("fraction of heads (least important first)")
    ax.set_ylabel("fraction of total effect")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return ax


# ------------------------------------------------------------ the checklist report's figures


def _head_name(head) -> str:
    return f"{int(head[0])}.{int(head[1])}"


def plot_mean_vs_worst(ax, mean, worst, highlight: dict | None = None, annotate: int = 5):
    """Each head's mean effect (x) against its worst case over inputs (y), both ``(n_layers, n_heads)``.

    Points far above the diagonal matter on a few inputs far more than on average. ``highlight``
    maps ``(layer, head)`` to a legend label (e.g. ``"hidden in the tail"``); the ``annotate``
    heads with the largest worst case are named.
    """
    m, w = _np(mean), _np(worst)
    if m.shape != w.shape or m.ndim != 2:
        raise ValueError(f"mean and worst must both be (n_layers, n_heads), got {m.shape} and {w.shape}")
    ax.scatter(m.ravel(), w.ravel(), s=14, color="0.55", label="head", zorder=2)
    top = max(float(np.nanmax(w)), float(np.nanmax(m)), 1e-12)
    low = min(float(np.nanmin(m)), 0.0)
    ax.plot([low, top], [low, top], color="0.7", lw=1, ls="--", label="worst = mean")
    for label, colour in zip(sorted(set((highlight or {}).values())), ("tab:red", "tab:orange", "tab:purple")):
        heads = [h for h, lab in highlight.items() if lab == label]
        ax.scatter([m[h] for h in heads], [w[h] for h in heads], s=40, color=colour, label=label, zorder=3)
    order = np.argsort(-w.ravel(), kind="stable")[:annotate]
    for i in order:
        l, h = divmod(int(i), m.shape[1])
        ax.annotate(f"{l}.{h}", (m[l, h], w[l, h]), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel("mean effect over inputs")
    ax.set_ylabel("worst case (largest effect on one input)")
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_circuit_drops(ax, pairs: Sequence[dict]):
    """Induction score of each candidate induction head, clean and with its candidate previous-token
    head ablated. ``pairs``: dicts with ``previous_token``, ``induction`` (heads), ``clean``,
    ``ablated`` and ``verified`` (as in the checklist report)."""
    if not pairs:
        raise ValueError("no candidate pairs to draw")
    x = np.arange(len(pairs))
    clean = [p["clean"] for p in pairs]
    ablated = [p["ablated"] for p in pairs]
    ax.bar(x - 0.2, clean, width=0.4, color="tab:blue", label="clean")
    ax.bar(x + 0.2, ablated, width=0.4, color="tab:orange", label="previous-token head ablated")
    names = [f"{_head_name(p['previous_token'])} → {_head_name(p['induction'])}" + (" ✓" if p["verified"] else "")
             for p in pairs]
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("induction score")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_pair_interactions(ax, pair, sum_of_singles, margin: float = 0.0, highlight: Sequence[int] = ()):
    """Removing a pair (y) against the sum of removing each head alone (x), one point per pair.

    Above the diagonal, single ablations *underestimate* the pair (the heads back each other up);
    the dotted line is ``(1 + margin) x`` the sum. ``highlight``: indices of pairs to mark.
    """
    y, x = _np(pair).ravel(), _np(sum_of_singles).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError("pair and sum_of_singles must be equally long and non-empty")
    ax.scatter(x, y, s=10, color="0.5", alpha=0.7, label="pair")
    if len(highlight):
        idx = list(highlight)
        ax.scatter(x[idx], y[idx], s=30, color="tab:red", label="largest interactions")
    low, high = min(x.min(), y.min(), 0.0), max(x.max(), y.max(), 1e-12)
    ax.plot([low, high], [low, high], color="0.3", lw=1, ls="--", label="pair = sum of singles")
    if margin:
        ax.plot([0, high], [0, (1 + margin) * high], color="0.6", lw=1, ls=":",
                label=f"pair = {1 + margin:g} x sum")
    ax.set_xlabel("effect(a) + effect(b)")
    ax.set_ylabel("effect(a + b)")
    ax.legend(fontsize=7, frameon=False)
    return ax


def plot_score_vs_effect(ax, score, effect, xlabel: str, size=None, highlight: dict | None = None):
    """A per-head score (x) against the ablation effect (y), both ``(n_layers, n_heads)``.

    ``size`` (same shape, optional): marker area proportional to it (e.g. the write norm).
    ``highlight`` maps ``(layer, head)`` to a legend label; the first four heads of each label are named.
    """
    x, y = _np(score), _np(effect)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"score and effect must both be (n_layers, n_heads), got {x.shape} and {y.shape}")
    if size is None:
        area = np.full(x.shape, 16.0)
    else:
        s = _np(size)
        if s.shape != x.shape:
            raise ValueError(f"size must be {x.shape}, got {s.shape}")
        area = 8 + 80 * s / max(float(np.nanmax(s)), 1e-12)
    ax.scatter(x.ravel(), y.ravel(), s=area.ravel(), color="0.55", alpha=0.7,
               label="head" + ("" if size is None else " (area: write norm)"))
    for label, colour in zip(sorted(set((highlight or {}).values())), ("tab:green", "tab:purple", "tab:red")):
        heads = [h for h, lab in highlight.items() if lab == label]
        ax.scatter([x[h] for h in heads], [y[h] for h in heads], s=[area[h] for h in heads], color=colour,
                   label=label)
        for h in heads[:4]:  # name a few; more would overlap
            ax.annotate(_head_name(h), (x[h], y[h]), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("mean |ablation effect|")
    ax.legend(fontsize=7, frameon=False)
    return ax


KEEP_COLOURS = {"worst case": "#d62728", "circuit": "#1f77b4", "backup": "#ff7f0e", "backed up": "#ff7f0e",
                "orphan": "#2ca02c"}


def plot_keep_map(ax, n_layers: int, n_heads: int, keep: dict):
    """A layers x heads grid of the heads a plan must keep, coloured by their first reason.

    ``keep`` maps ``(layer, head)`` to a list of reasons, each starting with one of
    :data:`KEEP_COLOURS`' keys (``"worst case ..."``, ``"circuit: ..."``); other heads stay white.
    """
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    image = np.ones((n_layers, n_heads, 3))
    used = {}
    for (l, h), reasons in keep.items():
        if not (0 <= l < n_layers and 0 <= h < n_heads):
            raise ValueError(f"head {l}.{h} is outside a {n_layers} x {n_heads} grid")
        kind = next((k for k in KEEP_COLOURS if reasons and reasons[0].startswith(k)), None)
        colour = KEEP_COLOURS.get(kind, "#7f7f7f")
        used[kind or "other"] = colour
        image[l, h] = to_rgb(colour)
        ax.text(h, l, str(len(reasons)), ha="center", va="center", fontsize=7, color="white")
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks([x - 0.5 for x in range(1, n_heads)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, n_layers)], minor=True)
    ax.grid(which="minor", color="0.85", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.legend(handles=[Patch(facecolor=c, label=k) for k, c in used.items()], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="first reason (number: reasons)",
              title_fontsize=8)
    return ax
