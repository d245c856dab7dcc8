"""Weight averaging at the end of a run (``Recipe.average_share``): which steps enter the mean,
that the saved model is exactly their mean while training itself is unchanged, how it is recorded,
and the errors for bad settings."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
import torch

from deviating.training.loop import Objective, train
from deviating.training.recipes import RECIPES
from deviating.training.runs import add_commands, save_run

TINY = "tiny-attn-2l"


def test_the_averaged_steps_end_at_the_last_step_and_stay_within_the_share():
    r = dataclasses.replace(RECIPES["ioi-gpt"], average_share=0.25, average_every=100)
    steps = r.averaged_steps(12000)
    assert steps == list(range(9100, 12001, 100))  # 30 snapshots, the first after 9,000
    small = dataclasses.replace(RECIPES[TINY], average_share=0.5, average_every=2)
    assert small.averaged_steps(10) == [6, 8, 10]
    assert small.averaged_steps(9) == [5, 7, 9]  # counted back from the last step
    assert RECIPES[TINY].averaged_steps(10) == []


@pytest.mark.parametrize("bad", [1.0, -0.1, True, "0.25", float("nan")])
def test_a_bad_share_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match="average_share") as err:
        dataclasses.replace(RECIPES[TINY], average_share=bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", [0, -5, 2.0, True])
def test_a_bad_interval_is_refused_with_its_value(bad):
    with pytest.raises(ValueError, match=f"average_every must be an int >= 1, got {bad!r}"):
        dataclasses.replace(RECIPES[TINY], average_share=0.5, average_every=bad)


def _averaged_run():
    torch.set_num_threads(1)
    recipe = dataclasses.replace(RECIPES[TINY], average_share=0.5, average_every=2, tie_embeddings=True)
    seen = []

    def objective(model):
        def loss(batch):  # called at the start of each step: the weights after the step before
            seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            return model.loss(batch)
        return Objective(loss)

    return recipe, train(recipe, steps=10, progress=False, objective=objective, eval_every=5), seen


def test_the_model_is_the_mean_of_the_chosen_steps_and_training_is_unchanged():
    recipe, run, seen = _averaged_run()
    final = run.unaveraged.state_dict()
    # seen[s] holds the weights after step s (seen[0] the initial ones); step 10's are the final ones
    for name, value in run.model.state_dict().items():
        expected = (seen[6][name].double() + seen[8][name].double() + final[name].double()) / 3
        assert torch.allclose(value.double(), expected, atol=1e-7), name
    assert not torch.equal(run.model.blocks[0].attn.W_Q.weight, run.unaveraged.blocks[0].attn.W_Q.weight)
    assert torch.equal(run.model.unembed.weight, run.model.embed.weight)  # tied stays tied
    # the weights after the last step are those of the same run without averaging
    plain = train(dataclasses.replace(recipe, average_share=0.0), steps=10, progress=False, eval_every=5)
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, final[name]), name
    assert run.info["unaveraged_metrics"] == plain.metrics
    assert run.info["averaged_steps"] == {"first": 6, "last": 10, "count": 3}
    assert run.metrics == recipe.task.evaluate(run.model, recipe.task.eval_data(recipe.eval_size))


def test_the_provenance_says_which_weights_a_checkpoint_holds(tmp_path):
    recipe, run, _ = _averaged_run()
    prov = save_run(run, recipe, tmp_path / "avg", "test")
    assert prov["weights"].startswith("the uniform average")
    assert prov["recipe"]["average_share"] == 0.5 and prov["recipe"]["average_every"] == 2
    assert prov["unaveraged_metrics"] == run.info["unaveraged_metrics"]
    assert (tmp_path / "avg" / "loss_curve.png").stat().st_size > 0  # drawn with the averaged marker
    plain_run = train(RECIPES[TINY], steps=3, progress=False, eval_every=3)
    plain = save_run(plain_run, RECIPES[TINY], tmp_path / "plain", "test")
    assert "weights" not in plain and "average_share" not in plain["recipe"]
    assert "unaveraged_metrics" not in plain and plain_run.unaveraged is None


def test_the_train_command_refuses_to_save_unaveraged_weights_of_a_recipe_that_does_not_average(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    args = parser.parse_args(["train", TINY, "--out", str(tmp_path / "x"), "--unaveraged-out", str(tmp_path / "y")])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "--unaveraged-out" in err and "average_share 0" in err
    assert not (tmp_path / "x").exists()
