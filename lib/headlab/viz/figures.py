"""The book's figures: one module, so every chapter draws a pattern the same way.

Functions take a matplotlib ``Axes`` (or create a figure) and return what they
drew; nothing here changes global matplotlib settings.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from headlab.heads.head import format_head, parse_head


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


def _layer_head_axes(ax, n_layers: int, n_heads: int, line: str, linewidth: float) -> None:
    """Label a layers x heads image (head on x, layer on y) and draw lines between its cells."""
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks([x - 0.5 for x in range(1, n_heads)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, n_layers)], minor=True)
    ax.grid(which="minor", color=line, linewidth=linewidth)
    ax.tick_params(which="minor", length=0)


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
    _layer_head_axes(ax, n_layers, n_heads, line="0.85", linewidth=1)
    ax.legend(handles=[Patch(facecolor=c, label=k) for k, c in used.items()], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="first reason (number: reasons)",
              title_fontsize=8)
    return ax


# ------------------------------------------------------- training curves, inputs, circuits


def plot_phase_change(curves: dict, live: dict | None = None, phase_change: dict | None = None,
                      chance: float | None = None, size: tuple[float, float] = (4.2, 3.0)):
    """Training curves of several models side by side: the loss on repeated tokens and the best
    head's induction score, against the training step.

    ``curves``: model name -> evaluation rows (``loss_curve.json``: dicts with ``step``,
    ``loss_repeat``, ``induction_best``). ``live``: the same for short runs, drawn as dots
    over the lines. ``phase_change``: model name -> step of its phase change (or None), drawn
    as a vertical line. ``chance``: a reference loss (``ln n_tokens``), drawn dashed.
    Returns the figure.
    """
    fig, axes = new_axes(2, size=size)
    panels = [("loss_repeat", "loss on repeated tokens (nats)"), ("induction_best", "best induction score")]
    for ax, (key, label) in zip(axes[0], panels):
        for i, (name, rows) in enumerate(curves.items()):
            colour = f"C{i}"
            ax.plot([r["step"] for r in rows], [r[key] for r in rows], color=colour, lw=2, label=name)
            if live and name in live:
                ax.plot([r["step"] for r in live[name]], [r[key] for r in live[name]], "o", ms=4,
                        color=colour, mec="black", mew=0.5, label=f"{name}, live short run")
            step = (phase_change or {}).get(name)
            if step is not None:
                ax.axvline(step, color=colour, lw=0.8, ls=":")
        if key == "loss_repeat" and chance is not None:
            ax.axhline(chance, color="0.5", lw=1, ls="--", label="uniform guess")
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
    axes[0, 1].set_ylim(0, 1)
    axes[0, 0].legend(fontsize=7, frameon=False)
    return fig


def plot_per_input(ax, samples: dict, xlabel: str, title: str | None = None, seed: int = 0):
    """One row per label: every input's value as a dot (jittered vertically) over a box plot of
    the distribution. ``samples``: label -> 1-d values (NaN values are left out)."""
    rng = np.random.default_rng(seed)
    labels = list(samples)
    values = [_np(samples[k]).ravel() for k in labels]
    values = [v[np.isfinite(v)] for v in values]
    ax.boxplot(values, vert=False, widths=0.6, showfliers=False, medianprops={"color": "black"})
    for i, v in enumerate(values, start=1):
        ax.plot(v, i + rng.uniform(-0.22, 0.22, size=len(v)), "o", ms=2.5, alpha=0.45, color=f"C{i - 1}")
    ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_composition(scores: dict, baseline: dict | None = None, earlier_layer: int = 0, later_layer: int = 1,
                     size: tuple[float, float] = (2.9, 2.6)):
    """Composition scores between the heads of two layers, one panel per kind (Q, K, V).

    ``scores``: kind -> ``(n_heads, n_heads)``, entry ``[e, l]`` for head ``later_layer.l``
    reading head ``earlier_layer.e``. ``baseline``: kind -> the random-weights score, shown
    in the title; cells are coloured on one shared scale. Returns the figure.
    """
    fig, axes = new_axes(len(scores), size=size)
    vmax = max(float(_np(s).max()) for s in scores.values())
    for ax, (kind, s) in zip(axes[0], scores.items()):
        plot_head_grid(ax, s, cmap="magma", vmin=0.0, vmax=vmax, colorbar=False, fmt="{:.2f}")
        ax.set_xlabel(f"head of layer {later_layer} (reads)")
        ax.set_ylabel(f"head of layer {earlier_layer} (writes)")
        ax.set_xticks(range(_np(s).shape[1]), [f"{later_layer}.{h}" for h in range(_np(s).shape[1])])
        ax.set_yticks(range(_np(s).shape[0]), [f"{earlier_layer}.{h}" for h in range(_np(s).shape[0])])
        base = f"\nrandom weights: {baseline[kind]:.2f}" if baseline and kind in baseline else ""
        ax.set_title(f"{kind}-composition{base}", fontsize=9)
    return fig


def plot_series(ax, x, series: dict, xlabel: str, ylabel: str, title: str | None = None,
                style: str = "-", **kwargs):
    """Several series against one x axis (``style="o"`` for a scatter), with a legend when
    there is more than one. ``series``: label -> values of the length of ``x``."""
    x = _np(x)
    for label, values in series.items():
        v = _np(values)
        if v.shape != x.shape:
            raise ValueError(f"series {label!r} has shape {v.shape}, x has {x.shape}")
        ax.plot(x, v, style, label=label, **kwargs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    if len(series) > 1:
        ax.legend(fontsize=7, frameon=False)
    return ax


# ------------------------------------------------------------------- the head atlas

LABEL_COLOURS = {
    "previous_token": "#1f77b4", "next_token": "#17becf", "first_token": "#9467bd",
    "separator": "#8c564b", "punctuation": "#e377c2", "duplicate_token": "#bcbd22",
    "induction": "#d62728", "rare_token": "#ff7f0e", "local": "#6baed6", "orphan": "#2ca02c",
    "diffuse": "#b0b0b0", "inactive": "#d9d9d9", "unlabelled": "#d9d9d9",
}
_SHORT = {"previous_token": "prev", "next_token": "next", "first_token": "first", "separator": "sep",
          "punctuation": "punct", "duplicate_token": "dup", "induction": "ind", "rare_token": "rare",
          "local": "local", "orphan": "orphan", "diffuse": "diffuse", "inactive": "inact", "unlabelled": "?"}


def plot_atlas(atlas: dict, ax=None):
    """A layers x heads grid: colour = label, intensity = strength; returns the figure.

    Each cell shows the label's short name and its strength. Draws into ``ax`` when given,
    else into a new figure (like every function here, so that notebooks show it).
    """
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    n_layers, n_heads = atlas["n_layers"], atlas["n_heads"]
    if ax is None:
        fig, axes = new_axes(size=(max(5.0, 1.0 + 0.56 * n_heads), 1.9 + 0.5 * n_layers))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    image = torch.ones(n_layers, n_heads, 3)
    for entry in atlas["heads"]:
        colour = torch.tensor(to_rgb(LABEL_COLOURS[entry["label"]]))
        strength = entry["strength"] or 0.0
        alpha = 0.25 + 0.75 * min(max(strength, 0.0), 1.0)
        layer, head = parse_head(entry["head"])
        image[layer, head] = (1 - alpha) + alpha * colour
        dark = float((image[layer, head] * torch.tensor([0.3, 0.6, 0.1])).sum()) < 0.5
        ax.text(head, layer, f"{_SHORT[entry['label']]}\n{strength:.2f}", ha="center",
                va="center", fontsize=7, color="white" if dark else "black")
    ax.imshow(image.numpy(), aspect="auto", interpolation="nearest")
    _layer_head_axes(ax, n_layers, n_heads, line="white", linewidth=1.5)
    present = [lab for lab in LABEL_COLOURS if lab in atlas.get("label_counts", {})]
    ax.legend(handles=[Patch(facecolor=LABEL_COLOURS[lab], label=f"{lab} ({atlas['label_counts'][lab]})")
                       for lab in present],
              loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=7, frameon=False,
              ncol=4, title="label (number of heads)", title_fontsize=7)
    effect = atlas.get("effect", {}).get("kind", "none")
    ax.set_title(f"{atlas['model']}: head atlas on {atlas['n_texts']} texts\n"
                 f"(colour = label, intensity = strength; effect: {effect})", fontsize=8)
    return fig


def plot_lift_vs_effect(ax, atlas: dict, annotate: Sequence[str] = ("orphan",)):
    """Every head of an atlas as a dot: its best family lift (how strongly its pattern matches
    any named family, 0 = like uniform attention) against its effect; colour = label.
    Heads whose label is in ``annotate`` are named ``L.H``."""
    seen = set()
    for entry in atlas["heads"]:
        lifts = [v for v in entry["lift"].values() if v is not None]
        x, y, label = max(lifts) if lifts else 0.0, entry["effect"], entry["label"]
        if y is None:
            raise ValueError("this atlas has no effects (computed with effect='none')")
        ax.plot(x, y, "o", ms=5, color=LABEL_COLOURS[label], mec="black", mew=0.3,
                label=None if label in seen else label)
        seen.add(label)
        if label in annotate:
            ax.annotate(format_head(entry["head"]), (x, y), fontsize=6, xytext=(3, 2),
                        textcoords="offset points")
    ax.axvline(atlas["thresholds"]["lift"], color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("best family lift over uniform attention")
    ax.set_ylabel(f"effect ({atlas['effect'].get('metric', atlas['effect']['kind'])})")
    ax.legend(fontsize=7, frameon=False, ncol=2)
    return ax


def plot_grouped_bars(ax, groups: Sequence[str], series: dict, ylabel: str, title: str | None = None,
                      ylim: tuple[float, float] | None = (0.0, 1.0)):
    """Bars for several series side by side in each group (e.g. one group per construction).
    ``series``: label -> one value per group (NaN draws no bar)."""
    n = len(series)
    width = 0.8 / max(n, 1)
    x = np.arange(len(groups))
    for i, (label, values) in enumerate(series.items()):
        v = _np(values)
        if v.shape != (len(groups),):
            raise ValueError(f"series {label!r} has {v.shape} values for {len(groups)} groups")
        ax.bar(x + (i - (n - 1) / 2) * width, v, width, label=label)
    ax.set_xticks(x, list(groups), rotation=20, fontsize=8)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False, ncol=n, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return ax


def plot_atlases(atlases: Sequence[dict], size: tuple[float, float] = (3.4, 2.4)):
    """Several atlases side by side (e.g. one model trained from several seeds), each titled
    with its model's name, and one colour key for all of them below; returns the figure."""
    from matplotlib.patches import Patch

    if not atlases:
        raise ValueError("no atlases to draw")
    fig, axes = new_axes(len(atlases), 1, size=size)
    present = set()
    for ax, atlas in zip(axes.flat, atlases):
        plot_atlas(atlas, ax=ax)
        ax.get_legend().remove()
        ax.set_title(atlas["model"], fontsize=9)
        present.update(atlas.get("label_counts", {}))
    labels = [lab for lab in LABEL_COLOURS if lab in present]
    fig.legend(handles=[Patch(facecolor=LABEL_COLOURS[lab], label=lab) for lab in labels],
               loc="outside lower center", ncol=min(len(labels), 6), fontsize=7, frameon=False)
    return fig


# ------------------------------------------------------------------- chapter 6: pruning curves

_ORDER_STYLES = {"mean": ("#1f77b4", "-"), "worst": ("#d62728", "-"), "iterative": ("#2ca02c", "--"),
                 "random": ("0.5", ":")}


def plot_pruning_curves(axes, counts, curves: dict, metrics: Sequence[str], tolerance: dict | None = None):
    """One panel per metric: its value against the number of heads removed, one line per pruning order.

    ``curves``: order name -> {metric: values at ``counts``}. Orders whose name starts with
    ``"random"`` are drawn as their mean with a band from their minimum to their maximum.
    ``tolerance``: metric -> the largest degradation that still passes; drawn as a dashed line at
    the unpruned value plus (or minus, for accuracies) the tolerance, with ``higher_is_better``
    read from the sign: ``{metric: (tol, higher_is_better)}``.
    """
    x = _np(counts)
    axes = list(np.asarray(axes).flat)
    if len(axes) < len(metrics):
        raise ValueError(f"{len(metrics)} metrics need as many axes, got {len(axes)}")
    randoms = {k: v for k, v in curves.items() if k.startswith("random")}
    for ax, metric in zip(axes, metrics):
        for name, values in curves.items():
            if name in randoms:
                continue
            key = next((k for k in _ORDER_STYLES if k in name), "mean")
            colour, style = _ORDER_STYLES["iterative" if "iterative" in name else key]
            ax.plot(x, _np(values[metric]), style, color=colour, label=name, lw=1.4)
        if randoms:
            r = np.stack([_np(v[metric]) for v in randoms.values()])
            ax.plot(x, r.mean(0), ":", color="0.4", label=f"random ({len(r)} orders: mean, range)")
            ax.fill_between(x, r.min(0), r.max(0), color="0.8", alpha=0.6, lw=0)
        if tolerance and metric in tolerance:
            tol, higher = tolerance[metric]
            first = _np(next(iter(curves.values()))[metric])[0]
            ax.axhline(first - tol if higher else first + tol, color="0.3", ls="--", lw=0.8)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("heads removed", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(metrics):]:
        ax.axis("off")
    return axes
