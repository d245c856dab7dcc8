"""Figures of chapter 7: a layer's heads beside the features of a sparse autoencoder, and the
width/depth/d_head sweep. Each function draws on the axes it is given and returns them."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import _np


def plot_top_units(ax, explained: dict, n_heads: int):
    """Explained variance of a layer's write against the units kept per token, heads vs SAE
    features (the dict of :func:`headlab.analysis.sae.compare.write_explained_by_top`)."""
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
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=1, frameon=False)
    return ax


def plot_head_features(ax, rows: Sequence[dict], class_names: Sequence[str], legend: bool = True):
    """Per head, the SAE features that belong to it, stacked by the class they are about
    (rows of :func:`headlab.analysis.sae.compare.polysemantic_heads`); hatched: about no single class.
    The legend (``legend=True``) goes to the right of the axes, outside the bars."""
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
    if legend:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
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
