"""deviating.experiments.ioi_tail on a small random GPT over a tokenizer that keeps names whole: each
importance is the effect of removing one head, measured directly; the pruning curve removes the heads
in the order given; bad counts are refused by name."""

from __future__ import annotations

import pytest
import torch

from deviating.analysis.ioi import logit_diffs, prompt_batch
from deviating.data.ioi.names import name_tokenizer
from deviating.data.ioi.prompts import make_prompts
from deviating.experiments.ioi_tail import prune_by_text, seed_record, task_importance, text_importance, text_order
from headlab.heads.ablation import Ablation
from headlab.heads.model import HeadModel
from headlab.metrics.functions import next_token_loss
from headlab.models.gpt import GPT, GPTConfig

NAMES = ["Mary", "John", "Alice", "Peter", "Susan", "George", "Kate", "Henry"]
TEXTS = ["When the man went to the store, he gave a book to his friend. The river was quiet."] * 30


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    tok = name_tokenizer(TEXTS, NAMES, vocab_size=300)
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=tok.get_vocab_size(), n_ctx=64, d_model=32, n_layers=2, n_heads=2, d_mlp=64))
    hm = HeadModel(model.eval(), name="a random GPT")
    prompts = make_prompts(tok, NAMES, range(6), 10, seed=0)
    windows = torch.randint(1, tok.get_vocab_size(), (6, 20), generator=torch.Generator().manual_seed(1))
    return hm, prompts, windows


def test_task_importance_is_the_logit_difference_lost_per_head(setup):
    hm, prompts, _ = setup
    got = task_importance(hm, prompts, "zero")
    clean = logit_diffs(hm, prompts)
    for head in [(0, 1), (1, 0)]:
        assert torch.allclose(got[head], clean - logit_diffs(hm, prompts, [head]), atol=1e-4)
    mean = task_importance(hm, prompts, "mean")  # mean ablation: the head's mean output over the prompts
    batch = prompt_batch(prompts)
    ablated = logit_diffs(hm, prompts, [(1, 1)], Ablation("mean", reference=batch))
    assert torch.allclose(mean[1, 1], clean - ablated, atol=1e-4)


def test_text_importance_is_the_loss_rise_per_head_and_order_is_least_first(setup):
    hm, _, windows = setup
    got = text_importance(hm, windows, "zero")
    batch = {"input_ids": windows, "attention_mask": torch.ones_like(windows)}
    with torch.no_grad(), hm.ablate([(0, 0)]):
        ablated = next_token_loss(hm.forward(batch), windows, reduction="mean")
    with torch.no_grad():
        base = next_token_loss(hm.forward(batch), windows, reduction="mean")
    assert float(got[0, 0].mean()) == pytest.approx(float(ablated - base), abs=1e-4)
    order = text_order(got)
    means = [float(got[h].mean()) for h in order]
    assert means == sorted(means) and sorted(order) == [(l, h) for l in range(2) for h in range(2)]
    with pytest.raises(ValueError, match="windows must be"):
        text_importance(hm, windows[0], "zero")
    with pytest.raises(ValueError, match="'median'"):
        text_importance(hm, windows, "median")


def test_pruning_removes_the_heads_in_order_and_refuses_bad_counts(setup):
    hm, prompts, windows = setup
    order = [(1, 1), (0, 0), (1, 0), (0, 1)]
    rows = prune_by_text(hm, prompts, windows, order, [0, 2, 4], "zero")
    assert [r["removed"] for r in rows] == [0, 2, 4] and rows[1]["heads"] == [[1, 1], [0, 0]]
    clean = logit_diffs(hm, prompts)
    assert rows[0]["task_logit_diff"] == pytest.approx(float(clean.mean()), abs=1e-4)
    two = logit_diffs(hm, prompts, [(1, 1), (0, 0)])
    assert rows[1]["task_accuracy"] == pytest.approx(float((two > 0).float().mean()), abs=1e-5)
    with pytest.raises(ValueError, match=r"\[5\]"):
        prune_by_text(hm, prompts, windows, order, [0, 5])


def test_a_seed_record_holds_both_importances_and_the_curve(setup):
    hm, prompts, windows = setup
    rec = seed_record(hm, prompts, windows, "zero", counts=[0, 1])
    assert len(rec["task"]) == 2 and len(rec["task_per_prompt"][0][0]) == len(prompts)
    assert len(rec["text_per_window"][1][1]) == len(windows) and len(rec["pruning"]) == 2
    assert rec["pruning"][1]["heads"] == [rec["text_order"][0]]


def test_the_shipped_result_has_the_schema_a_run_writes(setup):
    import json
    from importlib.resources import files

    hm, prompts, windows = setup
    shipped = json.loads((files("deviating") / "results" / "ioi_tail.json").read_text())
    assert {"command", "ablation", "n_prompts", "n_windows", "models", "cpu_seconds", "wall_seconds"} <= set(shipped)
    assert shipped["command"].startswith("python -m deviating.experiments.ioi_tail")
    rec = seed_record(hm, prompts, windows, "mean", counts=[0, 1])
    for name, stored in shipped["models"].items():
        assert set(stored) == set(rec), name
        assert set(stored["pruning"][0]) == set(rec["pruning"][0]), name
        n_heads = len(stored["text_order"])
        assert [r["removed"] for r in stored["pruning"]] == list(range(n_heads + 1)), name
        assert stored["pruning"][-1]["heads"] == stored["text_order"], name  # the last row removes every head


def test_the_figure_draws_one_line_per_model_in_each_panel_and_refuses_bad_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deviating.figures.comparisons import plot_text_and_task

    curve = [{"removed": k, "text_loss": 4.0 + 0.1 * k, "task_accuracy": 1.0 - 0.2 * k} for k in range(3)]
    fig, axes = plt.subplots(1, 2)
    plot_text_and_task(axes, {"a": {"pruning": curve}, "b": {"pruning": curve}}, tol=0.05)
    text_lines, task_lines = axes[0].get_lines(), axes[1].get_lines()
    for line in text_lines[:2]:  # the rise above the intact model's loss
        assert [round(y, 9) for y in line.get_ydata()] == [0.0, 0.1, 0.2]
    assert list(task_lines[0].get_ydata()) == [1.0, 0.8, 0.6]
    assert len(text_lines) == 3 and len(task_lines) == 3  # two models and the tolerance / chance line
    with pytest.raises(ValueError, match="two axes"):
        plot_text_and_task([axes[0]], {"a": {"pruning": curve}})
    with pytest.raises(ValueError, match="no model"):
        plot_text_and_task(axes, {})
    plt.close(fig)
