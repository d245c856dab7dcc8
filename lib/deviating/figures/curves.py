"""Curves: training curves of several configurations and seeds, the induction phase change, and
several series against one x axis."""

from __future__ import annotations

from headlab.viz.figures import as_array, new_axes


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


def plot_series(ax, x, series: dict, xlabel: str, ylabel: str, title: str | None = None,
                style: str = "-", **kwargs):
    """Several series against one x axis (``style="o"`` for a scatter), with a legend when
    there is more than one. ``series``: label -> values of the length of ``x``."""
    x = as_array(x)
    for label, values in series.items():
        v = as_array(values)
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
