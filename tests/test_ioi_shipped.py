"""The shipped indirect-object models (``ioi-gpt``, ``-s1``, ``-s2``): each reproduces, from its own
checkpoint and nothing else, the per-split accuracies its provenance records, and meets the target
on held-out names and templates (issue 36: ``logit(IO) - logit(S) > 0`` on at least 90% of prompts)."""

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
    assert recorded["ioi_accuracy"] >= 0.9
    recipe = RECIPES[name]  # made by the registered recipe, as `deviating train NAME` makes it again
    assert org.provenance["config"] == recipe.config.to_dict() and org.provenance["seed"] == recipe.seed
    assert org.provenance["steps"] == recipe.steps and f"train {name} " in org.provenance["command"]
    assert org.provenance["cpu_seconds"] <= 45 * 60  # the budget: 45 CPU-minutes a seed on one thread
    assert org.provenance["recipe"]["tie_embeddings"] is True
    assert torch.equal(org.model.unembed.weight, org.model.embed.weight)
