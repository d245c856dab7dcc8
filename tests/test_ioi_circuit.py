"""Chapter 5b's stored result (deviating.experiments.ioi_circuit): a tiny run on the shipped seed-0
checkpoint writes the shipped file's schema, its numbers obey what they promise, and bad input is
refused with its reason. Skips where the ioi-gpt checkpoint is not installed."""

from __future__ import annotations

import pytest
import torch

from deviating.analysis.ioi_roles import ROLES
from deviating.experiments.ioi_circuit import IOI_MODELS, OUT, load_results, main, run
from test_experiments import differences, schema, without_timings


def _installed(name: str) -> bool:
    from importlib.resources import files

    return (files("headlab") / "checkpoints" / name / "model.safetensors").is_file()


FRESH_HELDOUT = 0.85  # what the tiny run's fresh scoring is made to report (the real one: 0.917)


@pytest.fixture(scope="module")
def tiny():
    """A tiny run whose fresh scoring of held-out names and templates reads 0.85 (below the target),
    while the checkpoint's own training log says 0.918 (above it)."""
    import deviating.experiments.ioi_circuit as module

    if not _installed("ioi-gpt"):
        pytest.skip("the ioi-gpt checkpoint is not installed")
    torch.set_num_threads(1)
    real = module.ioi_scores

    def lower(*args, **kwargs):
        scores = real(*args, **kwargs)
        scores["heldout"]["accuracy"] = FRESH_HELDOUT
        return scores

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "ioi_scores", lower)
        return run(["ioi-gpt", "no-such-model"], n=16)


def test_the_fresh_prompts_decide_the_target_not_the_training_log(tiny):
    rec = tiny["models"]["ioi-gpt"]
    assert rec["accuracy"]["ioi_accuracy"] >= 0.9 and rec["fresh"]["heldout"]["accuracy"] == FRESH_HELDOUT
    assert rec["meets_target"] is False
    assert all(v["n"] == 1024 and v["low"] <= v["high"] for v in rec["fresh"].values())


def test_a_tiny_run_writes_the_shipped_schema(tiny):
    shipped = load_results()
    assert tiny["missing"] == ["no-such-model"] and list(tiny["models"]) == ["ioi-gpt"]
    top = {k: v for k, v in without_timings(tiny).items() if k != "models"}
    assert differences(schema(top), schema({k: v for k, v in without_timings(shipped).items() if k != "models"})) == []
    for name, rec in shipped["models"].items():
        assert name in IOI_MODELS
        assert differences(_shape(tiny["models"]["ioi-gpt"]), _shape(rec)) == []


def _shape(record):
    """A record's schema with its dicts keyed by head ("3.1": ...) reduced to one value each, since
    which heads appear there depends on the model."""
    record = dict(without_timings(record))
    record["evidence"] = [next(iter(record["evidence"].values()))]
    if record["backup"] is not None:
        backup = dict(record["backup"])
        backup["change"] = [next(iter(backup["change"].values()))]
        record["backup"] = backup
    return schema(record)


def test_every_head_has_one_role_or_none_and_the_circuit_is_made_of_heads(tiny):
    rec = tiny["models"]["ioi-gpt"]
    named = [h for r in ROLES for h in rec["roles"][r]] + rec["no_role"]
    assert sorted(named) == sorted(rec["evidence"]) and len(set(named)) == len(named)
    assert set(rec["circuit"]) <= set(rec["evidence"])
    core = {h for r in ROLES[:4] for h in rec["roles"][r]}
    assert core <= set(rec["circuit"])


def test_faithfulness_is_the_ratio_of_its_means_and_its_interval_holds_it(tiny):
    rec = tiny["models"]["ioi-gpt"]
    for kind, f in rec["faithfulness"].items():
        assert f["model"] == pytest.approx(rec["D"], rel=1e-5)
        assert f["faithfulness"] == pytest.approx(f["circuit"] / f["model"], rel=1e-5)
        lo, hi = f["interval"]
        assert lo <= f["faithfulness"] + 1e-9 and f["faithfulness"] <= hi + 1e-9, kind


def test_the_backup_intervals_hold_their_values(tiny):
    b = tiny["models"]["ioi-gpt"]["backup"]
    if b is None:
        pytest.skip("no name mover in the tiny run")
    for e in (b["drop"], b["expected_drop"], *b["change"].values()):
        assert e["low"] <= e["value"] + 1e-9 and e["value"] <= e["high"] + 1e-9


def test_the_command_line_refuses_too_few_prompts(capsys):
    with pytest.raises(SystemExit):
        main(["--prompts", "2", "--out", "/dev/null"])
    assert "--prompts 2 is too few" in capsys.readouterr().err


def test_a_missing_results_file_names_its_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="ioi_circuit --prompts"):
        load_results(tmp_path / "none.json")
    assert OUT.name == "ioi_circuit.json"


# ------------------------------------------------------------------ the chapter's figures (deviating.figures.ioi)


def test_the_signed_grid_writes_every_value_readably():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deviating.figures.ioi import plot_signed_grid

    fig, ax = plt.subplots()
    plot_signed_grid(ax, torch.tensor([[0.0, -1.0], [0.5, 0.9]]))
    texts = {t.get_text(): t.get_color() for t in ax.texts}
    assert texts == {"0.00": "black", "-1.00": "white", "0.50": "black", "0.90": "white"}
    with pytest.raises(ValueError, match="limit must be positive"):
        plot_signed_grid(ax, torch.zeros(2, 2), limit=-1)
    with pytest.raises(ValueError, match="expected \\(n_layers, n_heads\\)"):
        plot_signed_grid(ax, torch.zeros(3))
    plt.close(fig)


def test_the_position_and_attention_figures_refuse_what_they_cannot_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deviating.figures.ioi import END_EDGES, plot_attention_from_end, plot_position_effects

    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="one column per named position"):
        plot_position_effects(ax, torch.zeros(2, 2, 3), ("IO", "S1"))
    att = {e: torch.full((2, 2), 0.25) for e in END_EDGES}
    with pytest.raises(ValueError, match="heads is empty"):
        plot_attention_from_end(ax, att, [])
    with pytest.raises(ValueError, match="lacks"):
        plot_attention_from_end(ax, {"END->IO": att["END->IO"]}, [(0, 0)])
    plot_attention_from_end(ax, att, [(0, 1), (1, 0)])
    assert len(ax.patches) == 2 * len(END_EDGES)  # one bar per head and edge
    plt.close(fig)
