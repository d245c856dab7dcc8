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


# ---------------------------------------------------------------------------- chapters 1 and 2


def plot_runs(ax, runs, ylabel: str, xlabel: str = "training step", title: str | None = None,
              chance: float | None = None, ylim: tuple[float, float] | None = None):
    """Training curves of several configurations, each over several seeds.

    ``runs`` maps a label to a list of curves, one per seed, each ``(steps, values)``. All
    seeds of a label share its colour; the label appears once in the legend. ``chance``
    draws a dotted horizontal reference line (e.g. a ceiling or chance level).
    """
    import matplotlib.pyplot as plt

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, curves) in enumerate(runs.items()):
        if not curves:
            raise ValueError(f"no curves for {label!r}")
        for k, (steps, values) in enumerate(curves):
            if len(steps) != len(values):
                raise ValueError(f"{label!r}: {len(steps)} steps but {len(values)} values")
            ax.plot(steps, values, color=colors[i % len(colors)], lw=1.5, alpha=0.85,
                    label=label if k == 0 else None)
    if chance is not None:
        ax.axhline(chance, color="0.4", lw=1, ls=":")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_scaling(ax, x, series, xlabel: str, ylabel: str, title: str | None = None, loglog: bool = True,
                 reference: tuple[float, str] | None = None, xticks: Sequence | None = None):
    """Measured values against a size (``x``), one line with markers per series.

    ``series`` maps a label to values aligned with ``x``. With ``loglog`` both axes are
    logarithmic; ``reference=(slope, label)`` adds a dashed line of that log-log slope
    through the first point of the first series (e.g. ``(2, "n²")``).
    """
    x = np.asarray(x, dtype=float)
    for label, values in series.items():
        y = _np(values)
        if y.shape != x.shape:
            raise ValueError(f"{label!r}: {y.shape[0] if y.ndim else 0} values for {x.shape[0]} sizes")
        ax.plot(x, y, marker="o", ms=4, lw=1.5, label=label)
    if reference is not None:
        slope, label = reference
        y0 = _np(next(iter(series.values())))[0]
        ax.plot(x, y0 * (x / x[0]) ** slope, color="0.5", ls="--", lw=1, label=label)
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
    if xticks is not None:
        ax.set_xticks(list(xticks), [str(t) for t in xticks])
        ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_singular_values(ax, values, cutoff: int | None = None, title: str | None = None):
    """Singular values (descending) of one or more matrices on a log scale; ``values`` maps a
    label to a 1-d array. ``cutoff`` marks an index (e.g. ``d_head``) with a vertical line."""
    for label, s in values.items():
        s = _np(s)
        if s.ndim != 1:
            raise ValueError(f"{label!r}: singular values must be 1-d, got shape {s.shape}")
        ax.semilogy(np.arange(1, len(s) + 1), np.maximum(s, 1e-30), lw=1.5, label=label)
    if cutoff is not None:
        ax.axvline(cutoff + 0.5, color="0.4", ls=":", lw=1)
    ax.set_xlabel("index of the singular value")
    ax.set_ylabel("singular value")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_patterns_by_head_count(patterns, tokens: Sequence[str], layer: int, max_cols: int = 4,
                                size: float = 2.4):
    """The patterns ``(head, q_pos, k_pos)`` of every head of several models on one text.

    ``patterns`` maps a head count to that model's pattern array for ``layer``. Models are
    drawn in increasing head count, each on as many rows of ``max_cols`` panels as it
    needs; every panel is labelled with the text's tokens. Returns the figure.
    """
    import matplotlib.pyplot as plt

    if not patterns:
        raise ValueError("no patterns to draw")
    counts = sorted(patterns)
    rows_of = {h: -(-h // max_cols) for h in counts}
    n_rows, n_cols = sum(rows_of.values()), min(max_cols, max(counts))
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(size * n_cols, size * n_rows), squeeze=False,
                             constrained_layout=True)
    row = 0
    for n_heads in counts:
        p = _np(patterns[n_heads])
        if p.ndim != 3 or p.shape[0] != n_heads:
            raise ValueError(f"the {n_heads}-head model's patterns must be (head={n_heads}, q_pos, k_pos), "
                             f"got shape {p.shape}")
        block = axes[row:row + rows_of[n_heads]].flat
        for head, ax in enumerate(block):
            if head >= n_heads:
                ax.axis("off")
                continue
            plot_pattern(ax, p[head], tokens, title=f"{n_heads} head{'s' if n_heads > 1 else ''}: head {layer}.{head}")
        row += rows_of[n_heads]
    return fig


def plot_labelled_points(ax, points, labels: Sequence[str], title: str | None = None):
    """2-d points ``(n, 2)`` (e.g. a rank-2 head's value of each token), each with its label."""
    p = _np(points)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"points must be (n, 2), got shape {p.shape}")
    if len(labels) != len(p):
        raise ValueError(f"{len(labels)} labels for {len(p)} points")
    ax.scatter(p[:, 0], p[:, 1], s=12)
    for label, (x, y) in zip(labels, p):
        ax.annotate(str(label), (x, y), fontsize=7, xytext=(2, 2), textcoords="offset points")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_aspect("equal", adjustable="datalim")
    if title:
        ax.set_title(title, fontsize=9)
    return ax
