"""Writing a checklist report: its figures (PNG), its Markdown, and the folder that holds them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from headlab.heads.head import format_head, parse_head
from headlab.report.thresholds import TOP_K, UNDERESTIMATE_MARGIN
from headlab.viz.atlas import plot_atlas
from headlab.viz.circuits import plot_circuit_drops
from headlab.viz.effects import plot_keep_map, plot_mean_vs_worst, plot_pair_interactions, plot_score_vs_effect
from headlab.viz.grids import plot_head_grid

__all__ = ["draw_figures", "render_markdown", "write_report", "format_value", "circuit_rows", "markdown_table",
           "best_head"]


def _tuple(head) -> tuple[int, int]:
    return tuple(parse_head(head))


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def draw_figures(report: dict, out: str | Path, dpi: int = 110) -> dict[str, str]:
    """Draw the report's figures from its JSON alone into ``out``; returns {name: file name}."""

    out = Path(out)
    L, H = report["n_layers"], report["n_heads"]
    grid_w, grid_h = min(1.6 + 0.55 * H, 6.0), 1.0 + 0.42 * L  # inches of one layers x heads grid
    numbers = H <= 8  # write the value in each cell only while the cells are wide enough to read it
    files: dict[str, str] = {}

    def save(fig, name: str) -> None:
        import matplotlib.pyplot as plt

        fig.savefig(out / f"{name}.png", dpi=dpi)
        plt.close(fig)  # a figure made through pyplot (the atlas's) would otherwise show in a notebook
        files[name] = f"{name}.png"

    a = report["ablation"]
    fig = _figure(grid_w + 4.4, max(2 * grid_h, 4.0))
    spec = fig.add_gridspec(2, 2, width_ratios=[grid_w, 4.4])
    mean, worst = np.array(a["mean"], dtype=float), np.array(a["worst"], dtype=float)
    vmax = float(np.nanmax(worst))
    plot_head_grid(fig.add_subplot(spec[0, 0]), mean, title="mean effect over texts", fmt="{:.3f}", vmin=0,
                   vmax=vmax, annotate=numbers)
    plot_head_grid(fig.add_subplot(spec[1, 0]), worst, title="worst case (largest effect on one text)", fmt="{:.3f}",
                   vmin=0, vmax=vmax, annotate=numbers)
    tail = {_tuple(r["head"]): "hidden in the tail" for r in a["hidden_in_the_tail"]}
    plot_mean_vs_worst(fig.add_subplot(spec[:, 1]), mean, worst, highlight=tail)
    save(fig, "effects")

    c = report["circuits"]
    drops = circuit_rows(c)
    fig = _figure(grid_w + 0.8, 3 * (grid_h + 0.5) + (3.2 if drops else 0.0))
    spec = fig.add_gridspec(4 if drops else 3, 1, height_ratios=[grid_h + 0.5] * 3 + ([3.2] if drops else []))
    for row, (key, title) in enumerate((("previous_token_lift", "previous-token lift (own text, selection half)"),
                                        ("induction_lift", "induction lift, random tokens repeated (held out)"),
                                        ("induction_own_lift", "induction lift, the model's own text (held out)"))):
        grid = np.array([[np.nan if x is None else x for x in r] for r in c[key]], dtype=float)
        plot_head_grid(fig.add_subplot(spec[row, 0]), grid, title=title, vmin=0, vmax=1, annotate=numbers)
    if drops:
        ax = fig.add_subplot(spec[3, 0])
        plot_circuit_drops(ax, drops)
        ax.set_title("each induction head's strongest pair, held out, on the\ntext where it was found "
                     "(✓ verified)", fontsize=9)
    save(fig, "circuits")

    r = report["redundancy"]
    fig = _figure(5.0, 4.0)
    ax = fig.add_subplot()
    order = sorted(range(len(r["pairs"])), key=lambda i: -r["pairs"][i]["interaction"])[:TOP_K]
    plot_pair_interactions(ax, [p["pair"] for p in r["pairs"]], [p["sum_of_singles"] for p in r["pairs"]],
                           margin=UNDERESTIMATE_MARGIN, highlight=order)
    ax.set_title(f"{r['n_pairs']} pairs ({r['scope']} scope): removing both vs the sum of singles", fontsize=9)
    save(fig, "redundancy")

    p = report["patterns_vs_writes"]
    marks = {_tuple(o["head"]): "orphan that matters" for o in p["orphans_that_matter"]}
    marks.update({_tuple(o["head"]): "sharp but idle" for o in p["sharp_but_idle"]})
    fig = _figure(10.0, 4.0)
    left, right = fig.subplots(1, 2)
    plot_score_vs_effect(left, p["entropy"], p["abs_effect"], "normalised attention entropy (1 = uniform)",
                         size=p["write_norm"], highlight=marks)
    left.set_xlim(0, 1.02)
    plot_score_vs_effect(right, p["write_norm"], p["abs_effect"], "mean norm of the head's write (cache.result)",
                         highlight=marks)
    save(fig, "patterns")

    atlas = {"model": report["model"], "n_layers": L, "n_heads": H, "n_texts": report["inputs"]["n_texts"],
             "effect": {"kind": "ablation"}, "heads": [], "label_counts": {}}
    for l in range(L):
        for h in range(H):
            label = p["labels"][l][h]
            atlas["heads"].append({"head": [l, h], "label": label, "strength": p["strength"][l][h]})
            atlas["label_counts"][label] = atlas["label_counts"].get(label, 0) + 1
    save(plot_atlas(atlas), "labels")

    k = report["keep"]
    fig = _figure(grid_w + 2.6, max(grid_h + 0.3, 2.4))
    ax = fig.add_subplot()
    plot_keep_map(ax, L, H, {_tuple(e["head"]): e["reasons"] for e in k["heads"]})
    ax.set_title(f"{k['n_keep']} heads to keep", fontsize=9)
    save(fig, "keep")
    return files


def circuit_rows(circuits: dict) -> list[dict]:
    """The pairs of a report's ``circuits`` section worth drawing, one row each for
    :func:`plot_circuit_drops`: every verified pair, and for an induction head
    with none, the pair whose previous-token head cuts its score most; each read on the model's own
    text when the induction head's attention half holds there, else on the random repeats."""
    rows, seen = [], set()
    for p in circuits["pairs"]:  # largest share of the score lost first
        head = tuple(p["induction"])
        if not (p["verified"] or head not in seen):
            continue
        seen.add(head)
        key = "own" if "own text" in p["found_on"] else "random"
        rows.append({"previous_token": p["previous_token"], "induction": p["induction"], "clean": p[key]["clean"],
                     "ablated": p[key]["ablated"], "verified": p["verified"]})
    return rows


def _cut(x) -> str:
    """``"0.490 -> 0.210 (57% [52%, 61%])"`` for one kind of a circuit pair, or ``"-"`` when not measured."""
    if x is None:
        return "-"
    d = x["relative_drop"]
    return (f"{format_value(x['clean'], '.3f')} -> {format_value(x['ablated'], '.3f')} "
            f"({format_value(d['value'], '.0%')} [{format_value(d['low'], '.0%')}, {format_value(d['high'], '.0%')}])")


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list]) -> list[str]:
    if not rows:
        return ["*(none)*", ""]
    lines = ["| " + " | ".join(_cell(x) for x in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in rows]
    return lines + [""]


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (``|`` in a cell escaped, line breaks joined), e.g. for ``display(Markdown(...))``."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, like the header {header!r}; got rows of "
                         f"{sorted({len(row) for row in rows})} cells")
    return "\n".join(_table(header, rows)).rstrip()


def best_head(grid, spec: str = ".2f") -> str:
    """``"l.h: value"`` for the largest entry of a ``(layer, head)`` grid (numpy or torch)."""
    values = np.asarray(grid, dtype=float)
    if values.ndim != 2 or not values.size:
        raise ValueError(f"best_head needs a non-empty (layer, head) grid, got shape {values.shape}")
    layer, head = np.unravel_index(int(np.nanargmax(values)), values.shape)
    return f"{layer}.{head}: {format(values[layer, head], spec)}"


def format_value(x, spec: str = ".4f") -> str:
    """A number of the report as text: ``format(x, spec)``, or ``"n/a"`` for a value the report
    left undefined (``None``, e.g. a ratio over no pair)."""
    return "n/a" if x is None else format(x, spec)


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def render_markdown(report: dict) -> str:
    """The report as Markdown: the checklist table, then one section per check, tables, the figures it embeds."""
    a, c, r = report["ablation"], report["circuits"], report["redundancy"]
    p, k, t, figs = report["patterns_vs_writes"], report["keep"], report["thresholds"], report["figures"]
    sel, modes, dist = report["selection"], report["modes"], report["distillation"]
    peak = max(x for row in a["mean"] for x in row)
    out = [f"# Checklist report: {report['model']}", "",
           f"{report['model']}: {report['kind']}, {report['n_layers']} layers x {report['n_heads']} heads. "
           f"Inputs: {report['inputs']['source']} ({report['inputs']['n_texts']} texts). Effect of a head: "
           f"{report['metric']['definition']} ({report['metric']['mode']} ablation; positive = the head helps). "
           f"Computed in {report['seconds']['total']:.0f} s.", "", "## The checklist", ""]
    out += _table(["check", "measured", "what it found"],
                  [[x["what"], "yes" if x["measured"] else "no", x["finding"]] for x in report["checklist"]])

    def figure(name: str, caption: str) -> None:
        if name in figs:
            out.extend([f"![{caption}]({figs[name]})", ""])

    out += ["## 1. Baselines: ablation deltas with intervals", "",
            f"Mean (with its 95% bootstrap interval over texts), worst case and {a['q']:g} quantile of each head's "
            f"effect. {a['above_zero']} heads lie measurably above no effect, {a['below_zero']} below. Largest mean "
            f"effect: {peak:.4g}. Rank correlation of mean and worst case: "
            f"{format_value(a['spearman_mean_worst'], '.3f')}.", ""]
    rows = [[i + 1, format_head(m["head"]), format_value(m["mean"]), format_head(w["head"]), format_value(w["worst"]),
             format_head(q["head"]), format_value(q["quantile"])]
            for i, (m, w, q) in enumerate(zip(a["top_by_mean"], a["top_by_worst"], a["top_by_quantile"]))]
    out += _table(["rank", "by mean", "mean", "by worst case", "worst", f"by q{round(a['q'] * 100)}", "quantile"], rows)
    figure("effects", "Mean and worst-case ablation effect of every head")

    out += ["## 2. Selected on one half, measured on the other", ""]
    if sel["measured"]:
        out += [f"The top {sel['top_k']} heads by mean, chosen on {sel['n_select']} texts and measured on the other "
                f"{sel['n_measure']} (split seed {sel['seed']}). Mean shrinkage: "
                f"{format_value(sel['mean_shrinkage'], '.4g')}; the halves agree on {sel['top_k_agreement']} of "
                f"{sel['top_k']}; rank correlation between halves {format_value(sel['spearman_halves'], '.3f')}.", ""]
        out += _table(["head", "in sample", "held out", "95% interval"],
                      [[format_head(x["head"]), format_value(x["in_sample"]), format_value(x["held_out"]),
                        f"[{format_value(x['held_out_low'])}, {format_value(x['held_out_high'])}]"] for x in sel["top"]])
    else:
        out += [f"Not measured: {sel['why']}.", ""]

    pos = report["position"]
    out += ["## 3. Conditioned on the input and the position", "",
            f"**Hidden in the tail** (mean < {t['TAIL_MEAN_BELOW']:g} x the largest mean, worst case > "
            f"{t['TAIL_WORST_ABOVE']:g} x the largest mean): {len(a['hidden_in_the_tail'])} heads.", ""]
    out += _table(["head", "mean", "worst", "the text that makes it critical"],
                  [[format_head(h["head"]), format_value(h["mean"]), format_value(h["worst"]), _short(h["text"])]
                   for h in a["hidden_in_the_tail"]])
    if pos["measured"]:
        out += [f"Early against late positions: rank correlation {format_value(pos['spearman_early_late'], '.3f')}.", ""]
        out += _table(["head", "effect, early half", "effect, late half"],
                      [[format_head(x["head"]), format_value(x["early"]), format_value(x["late"])]
                       for x in pos["largest_gaps"]])
    else:
        out += [f"Position: not measured ({pos['why']}).", ""]

    roles = report["roles"]
    ind = roles["induction"]["thresholds"]
    both = {k: ", ".join(format_head(h) for h in c["induction_heads"][k]) or "none" for k in ("random tokens", "own text")}
    copying = (f"Induction heads, both halves (copying: the token read is among the write's {ind['copy_k']} largest "
               f"logits for at least {ind['copy_share']:.0%} of the tokens): random tokens {both['random tokens']}; own "
               f"text {both['own text']}." if c["copying_tested"] else
               "The copying half cannot be tested on this model (no unembedding): a head listed above only attends "
               "like an induction head, and nothing more is claimed.")
    out += ["## 4. Circuits, with the detector run on the model's own text", "",
            f"Random tokens: {c['inputs']['random tokens']}. Own text: {c['inputs']['own text']}. Induction heads by "
            f"`{roles['induction']['function']}` on each kind (attention half: held-out lift over uniform attention "
            f">= {ind['lift']:g}; at most {t['MAX_CANDIDATES']} candidates). Previous-token heads by "
            f"`{roles['previous_token']['function']}` (lift threshold "
            f"{format_value(c['previous_token_threshold']['threshold'], '.3g')}; the heads tested as feeders beat the "
            f"decoy null). A pair is verified when removing the previous-token head "
            f"(`{roles['induction']['dependence']}`, zero ablation, held-out half) cuts the induction head's score, on "
            f"a kind of text where it was found, by at least {t['CIRCUIT_MIN_RELATIVE_DROP']:.0%} (lower end of the "
            f"95% interval).", "",
            "Attention half: " + (", ".join(
                f"{format_head(x['head'])} (found on {' and '.join(x['found_on'])})"
                for x in c["induction_candidates"]) or "none") + ". Found on one kind only: "
            + (", ".join(f"{format_head(x['head'])} ({x['found_on']})" for x in c["found_on_one_kind_only"]) or "none")
            + ". " + copying, ""]
    out += _table(["previous-token head", "induction head", "random: clean -> ablated (cut)",
                   "own text: clean -> ablated (cut)", "verified"],
                  [[format_head(x["previous_token"]), format_head(x["induction"]), _cut(x["random"]), _cut(x["own"]),
                    "yes" if x["verified"] else "no"] for x in c["pairs"]])
    figure("circuits", "Previous-token and induction lifts on both kinds of text, and the ablation check")

    seeds, tasks = report["seeds"], report["tasks"]
    out += ["## 5. Seeds", ""]
    if seeds["measured"]:
        out += _table(["replica", "rank correlation by head", f"top {seeds['top_k']} shared", "largest mean"],
                      [[x["model"], format_value(x["spearman_by_head"], ".3f"), x["top_k_shared"],
                        format_value(x["largest_mean"])] for x in seeds["replicas"]])
    else:
        out += [f"Not measured: {seeds['why']}.", ""]
    out += ["## 6. Per-task margins", ""]
    if tasks["measured"]:
        out += _table(["task", "head with the largest share", "share"],
                      [[task, format_head(b["head"]), format_value(b["share"], ".2f")] for task, b in tasks["best"].items()])
        out += _table(["task specialist", "task", "share", "mean effect"],
                      [[format_head(x["head"]), x["task"], format_value(x["share"], ".2f"), format_value(x["mean_effect"])]
                       for x in tasks["specialists"]])
    else:
        out += [f"Not measured: {tasks['why']}.", ""]
    out += ["## 7. Ablation mode and metric", "",
            f"The top {len(modes['heads'])} heads re-measured; second metric: {modes['second_metric']}.", ""]
    out += _table(["head", "zero"] + list(modes["conditions"]),
                  [[format_head(h), format_value(modes["zero"][i])]
                   + [format_value(v["effects"][i]) for v in modes["conditions"].values()]
                   for i, h in enumerate(modes["heads"])])
    out += ["Rank correlation with zero ablation: " + "; ".join(
        f"{name} {format_value(v['spearman_with_zero'], '.3f')}" for name, v in modes["conditions"].items()) + ".", ""]

    out += ["## Pairs: group ablations and redundancy", "",
            f"{r['n_pairs']} pairs ({'every pair within a layer' if r['scope'] == 'layer' else 'every pair among the heads with the largest worst case'}); "
            f"{r['counted']} have a pair effect above {t['PAIR_MIN_EFFECT']:g} x the largest single mean and are counted. "
            f"Single ablations underestimate the pair in {format_value(r['fraction_underestimated'], '.0%')} of them, "
            f"by more than {t['UNDERESTIMATE_MARGIN']:.0%} in {format_value(r['fraction_clearly_underestimated'], '.0%')}; "
            f"median ratio pair / sum of singles: {format_value(r['median_ratio'], '.3f')}.", ""]
    out += _table(["pair", "effect of the pair", "sum of singles", "interaction"],
                  [[" + ".join(format_head(h) for h in x["heads"]), format_value(x["pair"]),
                    format_value(x["sum_of_singles"]), format_value(x["interaction"], "+.4f")]
                   for x in r["top_interactions"]])
    out += [f"**Backup heads** (effect once the partner is removed > {t['BACKUP_FACTOR']:g} x its own, and > "
            f"{t['BACKUP_MIN_EFFECT']:g} x the largest single mean): {len(r['backups'])}.", ""]
    out += _table(["removed", "backup", "backup's effect alone", "once the other is removed"],
                  [[format_head(x["removed"]), format_head(x["backup"]), format_value(x["alone"]),
                    format_value(x["given_removed"])] for x in r["backups"]])
    figure("redundancy", "Pair ablations against the sum of single ablations")

    out += ["## Patterns against writes", "",
            f"Rank correlation with the mean |effect|: attention entropy {format_value(p['spearman_entropy_effect'], '.3f')}, "
            f"write norm {format_value(p['spearman_write_norm_effect'], '.3f')}.", "",
            f"**Orphans that matter**, by `{report['roles']['orphan']['function']}`: no family of the catalogue reaches "
            f"the lift {format_value(p['name_threshold'], '.3g')} (the decoy-calibrated threshold) on the selection "
            f"texts, the selection effect is at least {report['roles']['orphan']['thresholds']['effect']:g} x the mean "
            f"head's, and on the measurement texts the lead over the mean head has a 95% interval above 0. "
            + ("Not measured: the rule needs at least 4 texts (two a side)." if p["orphan_candidates"] is None else
               f"{len(p['orphan_candidates'])} candidates, {len(p['orphans_that_matter'])} orphans:"), ""]

    def head_rows(rows):
        return [[format_head(x["head"]), format_value(x["entropy"], ".3f"), format_value(x["write_norm"], ".3f"),
                 format_value(x["abs_effect"])] for x in rows]

    out += _table(["candidate", "selection effect / mean head", "measured effect", "lead over the mean head", "rank",
                   "orphan"],
                  [[format_head(x["head"]), format_value(x["select_ratio"], ".2f"),
                    f"{format_value(x['effect']['value'])} [{format_value(x['effect']['low'])}, "
                    f"{format_value(x['effect']['high'])}]",
                    f"{format_value(x['lead']['value'], '+.4f')} [{format_value(x['lead']['low'], '+.4f')}, "
                    f"{format_value(x['lead']['high'], '+.4f')}]", f"{x['rank']} [{x['rank_low']}, {x['rank_high']}]",
                    "yes" if x["is_orphan"] else "no"] for x in p["orphan_candidates"] or []])
    out += [f"**Sharp but idle** (entropy <= {t['SHARP_ENTROPY']:g}, mean |effect| < {t['IDLE_EFFECT']:g} x the "
            "average head): a crisp pattern is no proof of importance.", ""]
    out += _table(["head", "entropy", "write norm", "mean abs effect"], head_rows(p["sharp_but_idle"]))
    figure("patterns", "Attention entropy and write norm against the ablation effect")
    figure("labels", "Pattern labels of every head (the atlas rule, with ablation effects)")

    out += ["## What a pruning or distillation plan must keep", "",
            f"{k['n_keep']} heads: large worst case, circuit members, backups and the heads they back up, and "
            "orphans that matter.", ""]
    out += _table(["head", "mean", "worst", "reasons"],
                  [[format_head(x["head"]), format_value(x["mean"]), format_value(x["worst"]), "; ".join(x["reasons"])]
                   for x in k["heads"]])
    dropped = ", ".join(format_head(h) for h in k["mean_ranking_would_drop"]) or "none"
    out += [f"A plan that keeps the {k['n_keep']} heads with the largest mean effect would drop: {dropped}.", ""]
    figure("keep", "The heads to keep, coloured by their first reason")
    out += ["## Distillation: the cost of the mean pattern", ""]
    if dist["measured"]:
        out += _table(["layer", "cost of its mean pattern", "95% interval"],
                      [[x["layer"], format_value(x["cost"]), f"[{format_value(x['low'])}, {format_value(x['high'])}]"]
                       for x in dist["layers"]])
        out += [dist["advice"], ""]
    else:
        out += [f"Not measured: {dist['why']}.", ""]

    out += ["## Thresholds", ""] + _table(["name", "value"], [[name, value] for name, value in t.items()])
    return "\n".join(out)


def write_report(report: dict, out: str | Path, figures: bool = True) -> Path:
    """Write ``report.json``, the figures and ``report.md`` into the folder ``out`` (created if needed)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for the report")
    out.mkdir(parents=True, exist_ok=True)
    if figures:
        report["figures"] = draw_figures(report, out)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report) + "\n", encoding="utf-8")
    return out / "report.md"
