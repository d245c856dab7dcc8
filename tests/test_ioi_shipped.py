"""The shipped indirect-object models (``ioi-gpt``, ``-s1``, ``-s2``): each reproduces, from its own
checkpoint and nothing else, the per-split accuracies its provenance records, was made by its
registered recipe within the budget, and the recipe says truthfully whether the shipped seeds meet
the target on held-out names and templates (issue 36: ``logit(IO) - logit(S) > 0`` on at least 90%
of prompts): a model below it may be shipped only while the recipe's status says no recipe reaches it."""

from __future__ import annotations

import pytest
import torch

from deviating.data.ioi.prompts import logit_diff, make_prompts
from deviating.data.ioi.windows import EVAL_SPLITS, IOI_EVAL_SEED, IoiSplit
from deviating.training.recipes import RECIPES
from headlab.models.checkpoints import CHECKPOINT_DIR, load_checkpoint

SHIPPED = sorted(p.name for p in CHECKPOINT_DIR.glob("ioi-gpt*") if (p / "provenance.json").is_file())


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_model_reproduces_its_recorded_split_accuracies(name):
    torch.set_num_threads(1)
    org = load_checkpoint(CHECKPOINT_DIR / name)
    split = IoiSplit.from_provenance(org.provenance)
    recorded = org.provenance["final_metrics"]
    n = 2 * org.provenance["data"]["eval_size"]
    names = {"train": split.train_names, "heldout": split.heldout_names}
    templates = {"train": split.train_templates, "heldout": split.heldout_templates}
    for i, (key, (who, which)) in enumerate(EVAL_SPLITS.items()):
        prompts = make_prompts(org.tokenizer, names[who], templates[which], n, IOI_EVAL_SEED + i)
        with torch.no_grad():
            diff = logit_diff(org.model.eval()(prompts.tokens), prompts)
        suffix = "" if key == "heldout" else "_" + key
        assert float((diff > 0).float().mean()) == pytest.approx(recorded[f"ioi_accuracy{suffix}"], abs=1e-6), key
        assert float(diff.mean()) == pytest.approx(recorded[f"ioi_logit_diff{suffix}"], abs=1e-3), key
    recipe = RECIPES[name]  # made by the registered recipe, as `deviating train NAME` makes it again
    assert org.provenance["config"] == recipe.config.to_dict() and org.provenance["seed"] == recipe.seed
    assert org.provenance["steps"] == recipe.steps and f"train {name} " in org.provenance["command"]
    assert org.provenance["cpu_seconds"] <= 45 * 60  # the budget: 45 CPU-minutes a seed on one thread
    assert org.provenance["recipe"]["tie_embeddings"] is True
    data, task = org.provenance["data"], recipe.task  # the training text the recipe describes, not an older one
    for field in ("kind", "version", "generated_fraction", "ioi_fraction", "n_passages", "sentences_per_passage",
                  "cast_size", "frame_share", "other_frame_share", "total_vocab", "n_ctx", "vocab_size",
                  "extra_names", "cast_heldout_share"):
        absent = {"other_frame_share": 0.0, "extra_names": 0}  # not recorded when off (before run 13: 0)
        recorded = data.get(field, absent.get(field))
        assert recorded == getattr(task, field), (field, recorded, getattr(task, field))
    assert torch.equal(org.model.unembed.weight, org.model.embed.weight)


TARGET = 0.9  # issue 36: held-out names and templates


@pytest.mark.skipif(not SHIPPED, reason="no ioi-gpt checkpoint is shipped")
def test_the_recipe_states_whether_the_shipped_seeds_meet_the_target_on_fresh_prompts():
    """The target is judged on 1,024 fresh prompts of held-out names and templates, not on the 256
    of the training log (run 13 read 0.90 there and 0.84 on fresh ones). The stored result that
    chapter 5b reads (ioi_circuit.json) holds the same fresh scores, and its verdicts follow them."""
    import deviating.training.recipes.ioi as recipe_module
    from deviating.experiments.ioi_circuit import FRESH_PROMPTS, TARGET as CIRCUIT_TARGET, load_results
    from deviating.experiments.ioi_eval import ioi_scores

    assert CIRCUIT_TARGET == TARGET and FRESH_PROMPTS == 1024
    torch.set_num_threads(1)
    stored = load_results()["models"]
    assert sorted(stored) == SHIPPED
    fresh = {}
    for name in SHIPPED:
        org = load_checkpoint(CHECKPOINT_DIR / name)
        with torch.no_grad():
            scores = ioi_scores(org.model.eval(), org.tokenizer, IoiSplit.from_provenance(org.provenance),
                                FRESH_PROMPTS)
        for split, score in scores.items():  # the stored scores are these checkpoints' own
            assert stored[name]["fresh"][split]["accuracy"] == pytest.approx(score["accuracy"], abs=1e-9)
            assert stored[name]["fresh"][split]["logit_diff"] == pytest.approx(score["logit_diff"], abs=1e-3)
        fresh[name] = scores["heldout"]["accuracy"]
        assert stored[name]["meets_target"] == (fresh[name] >= TARGET), name
    says_short = "no recipe here reaches the target yet" in recipe_module.__doc__
    assert says_short == any(a < TARGET for a in fresh.values()), fresh
