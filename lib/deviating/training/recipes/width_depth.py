"""The width/depth/d_head family of chapter 8: small GPTs at a fixed ``d_model = 64``.

Every ``wd-*`` recipe trains a GPT on the organisms' variant of the synthetic language
(:data:`deviating.training.recipes.organisms.LANGUAGE_OPTIONS`, windows of 64 tokens, ``d_mlp = 256``) with 1 to 32
heads (``d_head = 64 / n_heads``) and 1 to 4 layers. For a given seed every recipe sees the
same token stream (the data generator is seeded by the seed).
:func:`deviating.experiments.width_depth.run_sweep` (``scripts/width_depth.py``) trains the family and
writes ``lib/deviating/results/width_depth.json``.

* width at equal compute: ``wd-2l-{1,2,4,8,16,32}h``, 2 layers, the same steps, tokens and
  FLOPs (the Q, K, V, O matrices are ``d_model x n_heads * d_head = 64 x 64`` however they
  are split into heads);
* depth at equal tokens: ``wd-{1,2,4}l-4h``, the same :data:`WIDTH_DEPTH_STEPS` steps;
* depth at equal FLOPs: ``wd-{1,4}l-4h-flops``, trained for the steps that cost the training
  FLOPs of ``wd-2l-4h`` (:func:`forward_flops_per_token`).
"""

from __future__ import annotations

import dataclasses

from deviating.data.windows import SyntheticLanguage
from headlab.models.gpt import GPTConfig
from deviating.training.recipe import Recipe
from deviating.training.recipes.organisms import LANGUAGE_OPTIONS

__all__ = ["forward_flops_per_token", "WIDTH_DEPTH_STEPS", "WIDTH_DEPTH"]


def forward_flops_per_token(config: GPTConfig) -> float:
    """Forward-pass FLOPs per token of a :class:`GPT`, 2 per multiply-add: the Q, K, V, O and MLP
    matrices of every layer, ``QK^T`` and ``pattern @ V`` at the mean causal context
    ``(n_ctx + 1) / 2``, and the unembedding (embeddings, LayerNorms, softmax and biases left out).
    It does not depend on how ``n_heads * d_head`` is split into heads; training costs ~3x this."""
    inner = config.n_heads * config.d_head
    per_layer = 2 * (4 * config.d_model * inner + 2 * config.d_model * config.d_mlp)
    per_layer += 2 * 2 * inner * (config.n_ctx + 1) / 2
    return config.n_layers * per_layer + 2 * config.d_model * config.d_vocab


WIDTH_DEPTH_STEPS = 700  # x 32 windows x 64 tokens = 1.43M training tokens
_TASK = SyntheticLanguage(n_ctx=64, language_config=dict(LANGUAGE_OPTIONS))


def _recipe(n_layers: int, n_heads: int, equal_flops: bool = False) -> Recipe:
    """``wd-{n_layers}l-{n_heads}h``: WIDTH_DEPTH_STEPS steps. With ``equal_flops``
    (``...-flops``), the steps are scaled so that training costs the FLOPs of the 2-layer
    model of the same width (:func:`forward_flops_per_token`)."""
    config = GPTConfig(d_vocab=_TASK.d_vocab, n_ctx=_TASK.n_ctx, d_model=64, n_layers=n_layers,
                       n_heads=n_heads, d_mlp=256)
    steps, name = WIDTH_DEPTH_STEPS, f"wd-{n_layers}l-{n_heads}h"
    if equal_flops:
        reference = forward_flops_per_token(dataclasses.replace(config, n_layers=2))
        steps, name = round(steps * reference / forward_flops_per_token(config)), name + "-flops"
    return Recipe(name, f"width/depth sweep: {n_layers} layers x {n_heads} heads of d_head {config.d_head} "
                  f"at d_model 64, {steps} steps", config, _TASK, steps=steps, batch_size=32, lr=2e-3,
                  warmup=100, eval_every=350, eval_size=512)


WIDTH_DEPTH: dict[str, Recipe] = {r.name: r for r in [
    *[_recipe(2, h) for h in (1, 2, 4, 8, 16, 32)],
    *[_recipe(n_layers, 4) for n_layers in (1, 4)],
    *[_recipe(n_layers, 4, equal_flops=True) for n_layers in (1, 4)],
]}
