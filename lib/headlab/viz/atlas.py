"""The head atlas: every head's label and strength on the layers x heads grid, several atlases side
by side, and each head's family lift against its effect."""

from __future__ import annotations

from typing import Sequence

import torch

from headlab.analysis.detect.registry import broad_families, families, score_colours, scores
from headlab.heads.head import format_head, parse_head
from headlab.viz.figures import layer_head_axes, new_axes


#: Colours of the labels that are not score families (each family's colour is its registry entry's).
OTHER_COLOURS = {"orphan": "#2ca02c", "diffuse": "#b0b0b0", "inactive": "#d9d9d9", "unlabelled": "#d9d9d9"}


def label_colours() -> dict[str, str]:
    """Label -> colour: every family of :mod:`headlab.analysis.detect.registry` (registered ones
    included), then the other labels."""
    colours = score_colours()
    return {**{name: colours[name] for name in families() + broad_families()}, **OTHER_COLOURS}


#: The colours of the built-in labels (:func:`label_colours` adds registered families).
LABEL_COLOURS = label_colours()


_SHORT = {"orphan": "orphan", "diffuse": "diffuse", "inactive": "inact", "unlabelled": "?"}  # labels of no score


def short_label(label: str) -> str:
    """The label as the grid prints it in a cell: a score's ``short`` in the registry (else its first
    five letters); the labels that are no score, from ``_SHORT``."""
    if label in _SHORT:
        return _SHORT[label]
    entry = next((s for s in scores() if s.name == label), None)
    return entry.short if entry is not None and entry.short else label[:5]


def plot_atlas(atlas: dict, ax=None, printed=None):
    """A layers x heads grid: one colour per label, the label's short name in each cell; returns
    the figure.

    ``printed``: optional labels that replace the atlas's own, e.g. the
    ``headlab.analysis.detect.calibration.StableLabels`` of a calibrated rule; a head whose
    label is unstable (``printed.printed(head) == "unstable"``) is drawn grey and hatched, with the
    label it gets on all texts in brackets. Colour is the label only: the grid does not encode how
    strong a label is (the atlas's numbers do). Draws into ``ax`` when given, else into a new figure.
    """
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch, Rectangle

    n_layers, n_heads = atlas["n_layers"], atlas["n_heads"]
    colours = label_colours()
    if ax is None:
        fig, axes = new_axes(size=(max(5.0, 1.0 + 0.56 * n_heads), 1.9 + 0.5 * n_layers))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    image = torch.ones(n_layers, n_heads, 3)
    counts: dict[str, int] = {}
    for entry in atlas["heads"]:
        layer, head = parse_head(entry["head"])
        label = entry["label"] if printed is None else printed.printed((layer, head))
        counts[label] = counts.get(label, 0) + 1
        if label == "unstable":
            full = printed.labels[layer][head]
            image[layer, head] = torch.tensor(to_rgb("#f0f0f0"))
            ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, hatch="///",
                                   edgecolor="0.6", linewidth=0))
            ax.text(head, layer, f"({short_label(full)})", ha="center", va="center", fontsize=7, color="0.25")
            continue
        image[layer, head] = torch.tensor(to_rgb(colours[label]))
        dark = float((image[layer, head] * torch.tensor([0.3, 0.6, 0.1])).sum()) < 0.5
        ax.text(head, layer, short_label(label), ha="center", va="center", fontsize=7,
                color="white" if dark else "black")
    ax.imshow(image.numpy(), aspect="auto", interpolation="nearest")
    layer_head_axes(ax, n_layers, n_heads, line="white", linewidth=1.5)
    present = [lab for lab in colours if lab in counts]
    handles = [Patch(facecolor=colours[lab], label=f"{lab} ({counts[lab]})") for lab in present]
    if "unstable" in counts:
        handles.append(Patch(facecolor="#f0f0f0", hatch="///", edgecolor="0.6",
                             label=f"unstable ({counts['unstable']})"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=7, frameon=False,
              ncol=4, title="label (number of heads)", title_fontsize=7)
    effect = atlas.get("effect", {}).get("kind", "none")
    rule = "atlas's labels" if printed is None else "labels that survive resampling"
    ax.set_title(f"{atlas['model']}: head atlas on {atlas['n_texts']} texts\n({rule}; effect: {effect})",
                 fontsize=8)
    return fig


def plot_lift_vs_effect(ax, atlas: dict, annotate: Sequence[str] = ("orphan",), threshold: float | None = None,
                        annotate_heads: Sequence | None = None):
    """Every head of an atlas as a dot: its best family lift (how strongly its pattern matches
    any named family, 0 = like uniform attention) against its effect; colour = label.

    Heads whose label is in ``annotate``, or that are listed in ``annotate_heads`` (which then
    replaces ``annotate``), are named ``L.H``. The dotted line is ``threshold`` (default: the
    atlas's lift threshold)."""
    seen, colours = set(), label_colours()
    wanted = None if annotate_heads is None else {tuple(parse_head(h)) for h in annotate_heads}
    for entry in atlas["heads"]:
        lifts = [v for v in entry["lift"].values() if v is not None]
        x, y, label = max(lifts) if lifts else 0.0, entry["effect"], entry["label"]
        if y is None:
            raise ValueError("this atlas has no effects (computed with effect='none')")
        ax.plot(x, y, "o", ms=5, color=colours[label], mec="black", mew=0.3,
                label=None if label in seen else label)
        seen.add(label)
        named = label in annotate if wanted is None else tuple(parse_head(entry["head"])) in wanted
        if named:
            ax.annotate(format_head(entry["head"]), (x, y), fontsize=7, xytext=(3, 2),
                        textcoords="offset points")
    line = atlas["thresholds"]["lift"] if threshold is None else threshold
    ax.axvline(line, color="0.4", lw=0.9, ls=":")
    ax.set_xlabel("best family lift over uniform attention")
    ax.set_ylabel(f"effect ({atlas['effect'].get('metric', atlas['effect']['kind'])})")
    ax.legend(fontsize=7, frameon=False, ncol=2, title="atlas label", title_fontsize=7)
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
    colours = label_colours()
    labels = [lab for lab in colours if lab in present]
    fig.legend(handles=[Patch(facecolor=colours[lab], label=lab) for lab in labels],
               loc="outside lower center", ncol=min(len(labels), 6), fontsize=7, frameon=False)
    return fig
