"""Tied input and output embeddings, the training option the indirect-object recipe uses: one shared
matrix while training, saved as an ordinary GPT with two equal copies; off by default, and then the
recipe's record is what it was before the option existed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from deviating.training.loop import Objective, train
from deviating.training.recipes import RECIPES

TINY = "tiny-attn-2l"


def test_tied_embeddings_share_one_matrix_while_training_and_are_saved_as_equal_copies():
    torch.set_num_threads(1)
    tied = dataclasses.replace(RECIPES[TINY], tie_embeddings=True)
    shared = []

    def objective(model):
        def loss(batch):
            shared.append(model.unembed.weight is model.embed.weight)
            return model.loss(batch)
        return Objective(loss)

    run = train(tied, steps=5, progress=False, objective=objective, eval_every=5)
    assert shared and all(shared)
    model = run.model
    assert model.unembed.weight is not model.embed.weight
    assert torch.equal(model.unembed.weight, model.embed.weight)
    assert model.num_params() == sum(p.numel() for p in model.parameters())
    plain = train(RECIPES[TINY], steps=5, progress=False, eval_every=5).model
    assert not torch.equal(plain.unembed.weight, plain.embed.weight)


def test_the_option_is_recorded_only_when_on():
    plain = RECIPES[TINY]
    assert "tie_embeddings" not in plain.to_dict()
    assert dataclasses.replace(plain, tie_embeddings=True).to_dict()["tie_embeddings"] is True
    with pytest.raises(TypeError):
        dataclasses.replace(plain, tie_embedding=True)  # a misspelt option is refused, not ignored
