"""Attention-only models on the Brown Corpus (:class:`~deviating.data.brown_windows.BrownWindows`):
does a 2-layer model form induction heads on real English within 30 CPU-minutes on one thread?

* ``brown-attn-2l``: the reduced recipe that does. It trains on a **changed data distribution**:
  half of the training windows (``repeat_fraction`` 0.5) carry one span of 16 to 48 tokens of
  their own text written again further on. The evaluation is on untouched validation text, and on repeated
  random tokens.
* ``brown-attn-2l-plain``: the same model, optimiser and budget on natural text only (the control).

Each is trained with ``python -m deviating train NAME --threads 1 --out /work/brown-ckpt/NAME``
(checkpoints are not shipped). ``scripts/brown_induction_probe.py`` prints the evidence table
from the saved runs and holds the measured alternatives.
"""

from __future__ import annotations

from deviating.data.brown_windows import BrownWindows
from headlab.models.gpt import GPTConfig
from deviating.training.recipe import Recipe

__all__ = ["BROWN_MODEL", "brown_recipe", "BROWN"]

# d_model 128, 4 heads of 32, no MLP, LayerNorm, learned positions (the book's GPT).
BROWN_MODEL = {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_mlp": 0}


def brown_recipe(name: str, description: str, task: BrownWindows, **overrides) -> Recipe:
    """An attention-only GPT (:data:`BROWN_MODEL`, ``config`` overrides) on ``task``: batch 32,
    lr 5e-3, 200 warm-up steps, cosine decay, weight decay 0.01, evaluated every 100 steps on
    128 validation windows; other ``overrides`` are :class:`~deviating.training.recipe.Recipe` fields."""
    config = GPTConfig(d_vocab=task.d_vocab, n_ctx=task.n_ctx, **{**BROWN_MODEL, **overrides.pop("config", {})})
    fields = {"steps": 3000, "batch_size": 32, "lr": 5e-3, "warmup": 200, "weight_decay": 0.01,
              "eval_every": 100, "eval_size": 128, **overrides}
    return Recipe(name, description, config, task, **fields)


BROWN: dict[str, Recipe] = {r.name: r for r in [
    brown_recipe("brown-attn-2l", "2-layer attention-only model on Brown Corpus windows (BPE 1024, ctx 128), "
                 "half of them with a span of 16-48 tokens of their own text repeated (a changed data distribution)",
                 BrownWindows(vocab_size=1024, n_ctx=128, repeat_fraction=0.5, min_span=16, max_span=48)),
    brown_recipe("brown-attn-2l-plain", "the same model and budget on natural Brown Corpus text only "
                 "(the control)",
                 BrownWindows(vocab_size=1024, n_ctx=128, repeat_fraction=0.0)),
]}
