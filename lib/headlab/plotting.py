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


# ------------------------------------------------------------------ chapter 7: heads beside SAE features


def plot_top_units(ax, explained: dict, n_heads: int):
    """Explained variance of a layer's write against the units kept per token, heads vs SAE
    features (the dict of :func:`headlab.sae_analysis.write_explained_by_top`)."""
    m = list(explained["m"])
    ax.plot(m, explained["features"], "o-", color="tab:orange", label="SAE features (largest first)")
    heads = [(x, y) for x, y in zip(m, explained["heads"]) if x <= n_heads]
    ax.plot(*zip(*heads), "s-", color="tab:blue", label="heads (largest write first)")
    ax.axvline(n_heads, color="0.6", lw=0.8, ls=":")
    ax.set_xlabel("units kept per token")
    ax.set_ylabel("explained variance of the layer's write")
    ax.set_ylim(min(0.0, *explained["features"], *explained["heads"]), 1.02)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def plot_feature_matches(ax, matches: Sequence, baseline: Sequence, thresholds: Sequence[float] = (0.7, 0.9)):
    """Histogram of each feature's best cosine with the features of an SAE trained with another
    seed, beside the same for random directions."""
    bins = np.linspace(0, 1, 41)
    ax.hist(_np(baseline), bins=bins, color="0.7", label="random directions")
    ax.hist(_np(matches), bins=bins, color="tab:orange", alpha=0.85, label="SAE seed 0 vs seed 1")
    for t in thresholds:
        ax.axvline(t, color="k", lw=0.8, ls="--")
    ax.set_xlabel("best cosine with a feature of the other SAE")
    ax.set_ylabel("features")
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_alignment(ax, names: Sequence[str], series: dict):
    """Horizontal bars: per ground-truth label, the AUROC of the best single unit of each
    basis (``series``: ``{basis name: one value per label}``)."""
    y = np.arange(len(names))
    height = 0.8 / len(series)
    colors = ["tab:orange", "tab:green", "tab:blue", "tab:red"]
    for i, (label, values) in enumerate(series.items()):
        ax.barh(y - 0.4 + (i + 0.5) * height, _np(values), height=height, color=colors[i % 4], label=label)
    ax.set_yticks(y, list(names), fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0.5, color="0.5", lw=0.8, ls=":")
    ax.set_xlim(0.4, 1.0)
    ax.set_xlabel("AUROC of the best single unit for the label")
    ax.legend(fontsize=7, loc="lower right")
    return ax


def plot_head_features(ax, rows: Sequence[dict], class_names: Sequence[str]):
    """Per head, the SAE features that belong to it, stacked by the class they are about
    (rows of :func:`headlab.sae_analysis.polysemantic_heads`); hatched: about no single class."""
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10")
    heads = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, name in enumerate(class_names):
        counts = np.array([r["classes"].get(name, 0) for r in rows], dtype=float)
        if counts.any():
            ax.bar(heads, counts, bottom=bottom, color=colors(i % 10), label=name)
            bottom += counts
    rest = np.array([r["features"] - r["labelled"] for r in rows], dtype=float)
    ax.bar(heads, rest, bottom=bottom, color="white", edgecolor="0.5", hatch="//", label="no single class")
    ax.set_xticks(heads, [str(r["head"]) for r in rows])
    ax.set_xlabel("head")
    ax.set_ylabel("SAE features that live in the head")
    ax.legend(fontsize=7, ncols=2, loc="upper right")
    return ax


def plot_width_depth(axes, runs: Sequence[dict]):
    """Three panels from the width/depth sweep's runs: validation loss against d_head (2 layers,
    d_model fixed), accuracies against d_head, and validation loss against depth at equal
    tokens and at equal FLOPs. One dot per seed, the line through the seed means."""
    ax_loss, ax_acc, ax_depth = axes
    width = sorted((r for r in runs if r["n_layers"] == 2 and not r["name"].endswith("-flops")),
                   key=lambda r: r["d_head"])

    def mean_by(rows, key, value):
        groups: dict = {}
        for r in rows:
            groups.setdefault(key(r), []).append(value(r))
        xs = sorted(groups)
        return xs, [float(np.mean(groups[x])) for x in xs]

    def dots_and_line(ax, rows, key, value, **style):
        ax.plot([key(r) for r in rows], [value(r) for r in rows], ".", color=style.get("color"), alpha=0.5)
        ax.plot(*mean_by(rows, key, value), "-", marker=style.pop("marker", "o"), **style)

    dots_and_line(ax_loss, width, lambda r: r["d_head"], lambda r: r["metrics"]["val_loss"], color="tab:blue")
    for metric, color in (("agreement_acc", "tab:green"), ("pronoun_acc", "tab:red"), ("copy_acc", "tab:purple")):
        dots_and_line(ax_acc, width, lambda r: r["d_head"], lambda r, m=metric: r["metrics"][m], color=color,
                      label=metric.replace("_acc", ""))
    for ax in (ax_loss, ax_acc):
        ax.set_xscale("log", base=2)
        ticks = sorted({r["d_head"] for r in width})
        ax.set_xticks(ticks, [f"{d}\n({64 // d}h)" for d in ticks], fontsize=7)
        ax.set_xlabel("d_head (number of heads), d_model = 64")
    ax_loss.set_ylabel("validation loss (nats)")
    ax_acc.set_ylabel("accuracy")
    ax_acc.legend(fontsize=8)
    same_tokens = [r for r in runs if r["n_heads"] == 4 and not r["name"].endswith("-flops")]
    same_flops = [r for r in runs if r["n_heads"] == 4 and (r["name"].endswith("-flops") or r["n_layers"] == 2)]
    dots_and_line(ax_depth, same_tokens, lambda r: r["n_layers"], lambda r: r["metrics"]["val_loss"],
                  color="tab:blue", label="equal tokens")
    dots_and_line(ax_depth, same_flops, lambda r: r["n_layers"], lambda r: r["metrics"]["val_loss"],
                  color="tab:orange", marker="s", label="equal training FLOPs")
    ax_depth.set_xticks([1, 2, 4])
    ax_depth.set_xlabel("layers (4 heads of d_head 16)")
    ax_depth.set_ylabel("validation loss (nats)")
    ax_depth.legend(fontsize=8)
    return axes
