"""A layer's heads beside the features of a sparse autoencoder (chapter 8). Each function draws on
the axes it is given and returns them."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import as_array


def plot_top_units(ax, explained: dict, n_heads: int):
    """Explained variance of a layer's write against the units kept per token, heads vs SAE
    features (the dict of :func:`deviating.analysis.sae.compare.write_explained_by_top`)."""
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
    ax.hist(as_array(baseline), bins=bins, color="0.7", label="random directions")
    ax.hist(as_array(matches), bins=bins, color="tab:orange", alpha=0.85, label="SAE seed 0 vs seed 1")
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
        ax.barh(y - 0.4 + (i + 0.5) * height, as_array(values), height=height, color=colors[i % 4], label=label)
    ax.set_yticks(y, list(names), fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0.5, color="0.5", lw=0.8, ls=":")
    ax.set_xlim(0.4, 1.0)
    ax.set_xlabel("AUROC of the best single unit for the label")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=1, frameon=False)
    return ax


def plot_head_features(ax, rows: Sequence[dict], class_names: Sequence[str], legend: bool = True):
    """Per head, the SAE features that belong to it and are about one class, stacked and coloured
    by that class (rows of :func:`deviating.analysis.sae.compare.polysemantic_heads`). The features
    about no single class are not drawn (they would dwarf the others): the number above each bar is
    how many features belong to the head in all. The legend (``legend=True``) goes to
    the right of the axes, outside the bars."""
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10")
    heads = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, name in enumerate(class_names):
        counts = np.array([r["classes"].get(name, 0) for r in rows], dtype=float)
        # every class is drawn (with zero height where absent), so the legend lists them all
        ax.bar(heads, counts, bottom=bottom, color=colors(i % 10), edgecolor="white", linewidth=0.5, label=name)
        bottom += counts
    top = max(float(bottom.max()), 1.0)
    for h, r in zip(heads, rows):
        ax.text(h, bottom[h] + 0.03 * top, str(r["features"]), ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(ax.get_ylim()[1], top * 1.2))  # axes shared with another panel keep the larger
    ax.set_xticks(heads, [str(r["head"]) for r in rows])
    ax.set_xlabel("head")
    ax.set_ylabel("features about one class")
    if legend:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return ax
