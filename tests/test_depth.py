"""Chapter 5's depth comparison and pair interaction on known answers."""

from __future__ import annotations

import math

import pytest
import torch

from deviating.analysis.depth import pair_interaction, seen_token_guess, top_previous_token_heads
from deviating.exercises.fixtures import repeated_batch
from deviating.planted import FIRST_TOKEN_HEAD, PREVIOUS_TOKEN_HEAD, planted_model


def test_seen_token_guess_known_answer():
    tokens = torch.tensor([[0, 5, 6, 5, 7]])  # <bos> 5 6 5 7
    predictable = torch.tensor([[False, False, True, True, False]])
    # at t = 2 the distinct tokens of 1..2 are {5, 6}; at t = 3, {5, 6}: ln 2 both times
    assert float(seen_token_guess(tokens, predictable)[0]) == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="at least one predictable"):
        seen_token_guess(tokens, torch.zeros_like(predictable))


def test_pair_interaction_of_a_head_that_writes_nothing_is_zero():
    hm = planted_model(d_vocab=16, n_ctx=21)
    tokens = torch.as_tensor(repeated_batch([(10, 10), (12, 8)], seed=2))
    predictable = torch.zeros_like(tokens, dtype=torch.bool)
    predictable[:, 11:-1] = True
    assert top_previous_token_heads(hm, tokens, k=1) == [PREVIOUS_TOKEN_HEAD]
    got = pair_interaction(hm, tokens, predictable, PREVIOUS_TOKEN_HEAD, FIRST_TOKEN_HEAD)
    for metric in ("loss", "divergence"):
        e = got[metric]
        torch.testing.assert_close(e["b"], torch.zeros_like(e["b"]), atol=1e-9, rtol=0)  # 0.1 writes nothing
        torch.testing.assert_close(e["interaction"], torch.zeros_like(e["b"]), atol=1e-6, rtol=0)
        assert bool((e["a"] > 0.01).all())  # without 0.0 the induction head is blind: a clear cost
