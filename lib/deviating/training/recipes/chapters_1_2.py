"""The small models of chapters 1 and 2, shipped in ``lib/headlab/checkpoints/``.

* ``two-relations-{1,2}h[-ln]-s{0..4}`` (chapter 1): one attention layer (``d_model`` 32, no MLP)
  with 1 or 2 heads, with or without LayerNorm, on :class:`~deviating.data.two_relations.TwoRelations`;
* ``two-relations-2h-dh{1,2,4,8}-s{0..4}`` (chapter 2): the two-head model with narrower heads;
* ``heads-{1,2,4,8}`` (chapter 2's adjustable-heads widget; seeds 1 to 4 as ``heads-N-s1`` ... ``-s4``): 2-layer GPTs with 1 to 8 heads on
  :class:`~deviating.data.windows.LanguageWindows`.

Each is trained with ``python -m deviating train NAME --threads 1 --out lib/headlab/checkpoints/NAME``.
"""

from __future__ import annotations

from typing import Any

from deviating.data.two_relations import TwoRelations
from deviating.data.windows import LanguageWindows
from headlab.models.gpt import GPTConfig
from deviating.training.recipe import Recipe

__all__ = ["CHAPTERS_1_2"]

_RELATIONS = TwoRelations(n_letters=32, n_triples=8)


def _two_relations(name: str, description: str, seed: int, **config: Any) -> Recipe:
    config = GPTConfig(d_vocab=_RELATIONS.d_vocab, n_ctx=_RELATIONS.n_ctx, d_model=32, n_layers=1, d_mlp=0, **config)
    return Recipe(name, description, config, _RELATIONS, steps=3000, batch_size=64, lr=3e-3, warmup=50,
                  eval_every=100, eval_size=512, seed=seed)


def _recipes() -> list[Recipe]:
    recipes = []
    for seed in range(5):
        for ln in (False, True):
            for n_heads in (1, 2):
                recipes.append(_two_relations(
                    f"two-relations-{n_heads}h{'-ln' if ln else ''}-s{seed}",
                    f"chapter 1: one attention layer, {n_heads} head(s) of d_head {32 // n_heads}, "
                    f"{'with' if ln else 'without'} LayerNorm, on two relations at once; seed {seed}",
                    seed, n_heads=n_heads, layer_norm=ln))
        for d_head in (1, 2, 4, 8):  # chapter 2: the two-head model with narrower heads (16 is above)
            recipes.append(_two_relations(
                f"two-relations-2h-dh{d_head}-s{seed}",
                f"chapter 2: one attention layer, 2 heads of d_head {d_head} (d_model 32), without "
                f"LayerNorm, on two relations at once; seed {seed}",
                seed, n_heads=2, d_head=d_head, layer_norm=False))
    language = LanguageWindows(n_ctx=32)
    for seed in range(5):  # seed 0 is the widget's model, "heads-N"; seeds 1 to 4 measure the spread
        for n_heads in (1, 2, 4, 8):
            config = GPTConfig(d_vocab=language.d_vocab, n_ctx=language.n_ctx, d_model=64, n_layers=2,
                               n_heads=n_heads, d_mlp=128)
            recipes.append(Recipe(
                f"heads-{n_heads}" + (f"-s{seed}" if seed else ""),
                f"chapter 2: a 2-layer GPT on the synthetic language with {n_heads} head(s) "
                f"of d_head {64 // n_heads} per layer (the adjustable-heads widget)" + (f"; seed {seed}" if seed else ""),
                config, language, steps=4000, batch_size=32, lr=3e-3, warmup=200, eval_every=250, eval_size=256,
                seed=seed))
    return recipes


CHAPTERS_1_2: dict[str, Recipe] = {r.name: r for r in _recipes()}
