"""Measurements against a size: cost against sequence length or width, the singular values of
weight matrices, and the width/depth/d_head sweep of chapter 7."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from headlab.viz.figures import as_array


def plot_scaling(ax, x, series, xlabel: str, ylabel: str, title: str | None = None, loglog: bool = True,
                 reference: tuple[float, str] | None = None, xticks: Sequence | None = None):
    """Measured values against a size (``x``), one line with markers per series.

    ``series`` maps a label to values aligned with ``x``. With ``loglog`` both axes are
    logarithmic; ``reference=(slope, label)`` adds a dashed line of that log-log slope
    through the first point of the first series (e.g. ``(2, "n²")``).
    """
    x = np.asarray(x, dtype=float)
    for label, values in series.items():
        y = as_array(values)
        if y.shape != x.shape:
            raise ValueError(f"{label!r}: {y.shape[0] if y.ndim else 0} values for {x.shape[0]} sizes")
        ax.plot(x, y, marker="o", ms=4, lw=1.5, label=label)
    if reference is not None:
        slope, label = reference
        y0 = as_array(next(iter(series.values())))[0]
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
        s = as_array(s)
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
