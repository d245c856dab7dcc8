"""Models of the Brown Corpus (:class:`~deviating.data.brown_windows.BrownWindows`): does a 2-layer
model form induction heads on real English within 30 CPU-minutes on one thread, and a small GPT?

* ``brown-attn-2l`` (training seeds 1-4: ``brown-attn-2l-s1`` .. ``-s4``): the reduced recipe that
  does (about 15 CPU-minutes). It trains on a
  **changed data distribution**: every training window (``repeat_fraction`` 1.0) carries one
  span of 16 to 48 tokens of its own text written again further on; the rest of the window is
  natural text. The evaluation is on untouched validation text, and on repeated random tokens.
* ``brown-attn-2l-plain``: the same model, optimiser and budget on natural text only (the control).

* ``brown-gpt`` (training seeds 1-2: ``brown-gpt-s1``, ``-s2``): a small GPT, 4 layers of 4 heads
  of ``d_head`` 32 with MLPs of 512, on the same windows (every one with a repeat), 3000 steps of
  batch 32 at lr 5e-3, evaluated every 200 steps. About 26 CPU-minutes a seed on one thread, so
  it is also its own reduced recipe (at most 30 CPU-minutes).

The attention-only models: BPE vocabulary 1024, windows of 128 tokens inside one text, 2 layers of 2 heads of
``d_head`` 64 (``d_model`` 128, LayerNorm, learned positions), batch 32, lr 8e-3 with 200
warm-up steps and cosine decay, weight decay 0.01, 4000 steps.

Measured with ``scripts/brown_induction_probe.py`` (one thread; natural text alone, or half the
windows with a repeat, gave no induction in 1300-1600 steps; with every window repeated the
loss on the second copy of repeated validation text fell from 3.9 to 0.6 nats between steps
1500 and 2200, the first copy staying at 4.0; the control, ``brown-attn-2l-plain``, ended with
3.77 and 3.76 nats on the two copies and no induction head). Train with
``python -m deviating train NAME --threads 1``. Shipped: ``brown-attn-2l`` and ``-s1`` to ``-s4``
(phase change at steps 1900, 1300, 1300, 1500 and 1100; the second copy of repeated validation text at
0.24, 0.23, 0.24, 0.22 and 0.21 nats against 3.85-3.87 for the first; 15-21 minutes each on one
shared thread). ``brown-gpt``, ``-s1`` and ``-s2``: validation loss 3.58, 3.57 and 3.56 nats (unigram 6.02,
bigram 4.31), phase change at steps 1400, 1400 and 1600, the second copy at 0.28, 0.26 and 0.25
nats against 3.62, 3.64 and 3.60 for the first; 1577, 1586 and 1596 CPU-seconds.
"""

from __future__ import annotations

from deviating.data.brown_windows import BrownWindows
from headlab.models.gpt import GPTConfig
from deviating.training.recipe import Recipe

__all__ = ["BROWN_MODEL", "BROWN_GPT", "brown_recipe", "BROWN"]

# d_model 128, 2 heads of 64 per layer, no MLP, LayerNorm, learned positions (the book's GPT).
BROWN_MODEL = {"d_model": 128, "n_layers": 2, "n_heads": 2, "d_mlp": 0}


# The small GPT: 4 layers of 4 heads of 32, MLPs of 512, LayerNorm, learned positions.
BROWN_GPT = {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_mlp": 512}


def brown_recipe(name: str, description: str, task: BrownWindows, **overrides) -> Recipe:
    """An attention-only GPT (:data:`BROWN_MODEL`, ``config`` overrides) on ``task``: 4000 steps of
    batch 32, lr 8e-3, 200 warm-up steps, cosine decay, weight decay 0.01, evaluated every 100 steps
    on 128 validation windows; other ``overrides`` are :class:`~deviating.training.recipe.Recipe` fields."""
    config = GPTConfig(d_vocab=task.d_vocab, n_ctx=task.n_ctx, **{**BROWN_MODEL, **overrides.pop("config", {})})
    fields = {"steps": 4000, "batch_size": 32, "lr": 8e-3, "warmup": 200, "weight_decay": 0.01,
              "eval_every": 100, "eval_size": 128, **overrides}
    return Recipe(name, description, config, task, **fields)


BROWN: dict[str, Recipe] = {r.name: r for r in [
    *[brown_recipe("brown-attn-2l" + (f"-s{s}" if s else ""),
                   "2-layer attention-only model on Brown Corpus windows (BPE 1024, ctx 128), every one with a "
                   "span of 16-48 tokens of its own text repeated (a changed data distribution)"
                   + (f", training seed {s}" if s else ""),
                   BrownWindows(vocab_size=1024, n_ctx=128, repeat_fraction=1.0, min_span=16, max_span=48), seed=s)
      for s in range(5)],
    *[brown_recipe("brown-gpt" + (f"-s{s}" if s else ""),
                   "small GPT (4 layers of 4 heads, MLPs, LayerNorm) on the same Brown Corpus windows, every "
                   "one with a span of 16-48 tokens of its own text repeated" + (f", training seed {s}" if s else ""),
                   BrownWindows(vocab_size=1024, n_ctx=128, repeat_fraction=1.0, min_span=16, max_span=48),
                   config=BROWN_GPT, steps=3000, lr=5e-3, eval_every=200, seed=s)
      for s in range(3)],
    brown_recipe("brown-attn-2l-plain", "the same model and budget on natural Brown Corpus text only "
                 "(the control)",
                 BrownWindows(vocab_size=1024, n_ctx=128, repeat_fraction=0.0)),
]}
