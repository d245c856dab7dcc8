"""The indirect-object model (:class:`~deviating.data.ioi.windows.IoiWindows`): a small GPT of
English whose tokenizer keeps first names whole, trained on Brown Corpus windows mixed with
generated passages that use names, indirect-object sentences among them.

* ``ioi-gpt`` (training seeds 1-2: ``ioi-gpt-s1``, ``-s2``): ``brown-gpt``'s shape (4 layers of 4
  heads of ``d_head`` 32, MLPs of 512, LayerNorm, learned positions) on windows of 64 tokens, half
  of them from generated passages (half of whose sentences are indirect-object sentences), the
  other half Brown windows with ``brown-gpt``'s repeat curriculum. Batch 32, lr 5e-3 with 200
  warm-up steps and cosine decay, weight decay 0.01, evaluated every 250 steps.

Windows of 64 tokens rather than ``brown-gpt``'s 128 halve the cost of a step (0.3 s on one
thread); the Brown validation loss is therefore measured on windows of 64 tokens, which gives
the model less context than ``brown-gpt``'s 128. Train with ``python -m deviating train NAME
--threads 1``; the measured cost and accuracy of each shipped seed are in its provenance.
"""

from __future__ import annotations

from deviating.data.ioi.windows import IoiWindows
from deviating.training.recipe import Recipe
from deviating.training.recipes.brown import brown_recipe

__all__ = ["IOI_GPT", "ioi_task", "IOI"]

# brown-gpt's depth and head count at half its width: 4 layers of 4 heads of d_head 16, MLPs of 256
IOI_GPT = {"d_model": 64, "n_layers": 4, "n_heads": 4, "d_mlp": 256}


def ioi_task() -> IoiWindows:
    """The task every ``ioi-gpt`` seed trains on (a fresh, unprepared instance)."""
    return IoiWindows(vocab_size=1024, n_ctx=64, repeat_fraction=1.0, min_span=8, max_span=24,
                      generated_fraction=0.6, ioi_fraction=0.6)


_TASK = ioi_task()  # shared by the seeds: the corpus and tokenizer are prepared once, on first use

IOI: dict[str, Recipe] = {r.name: r for r in [
    brown_recipe("ioi-gpt" + (f"-s{s}" if s else ""),
                 "small GPT (4 layers of 4 heads of 16, MLPs, LayerNorm) whose tokenizer keeps first names whole, on "
                 "Brown Corpus windows mixed half and half with generated passages of names (half of their "
                 "sentences indirect-object sentences)" + (f", training seed {s}" if s else ""),
                 _TASK, config=IOI_GPT, steps=2500, lr=5e-3, eval_every=250, eval_size=128, seed=s)
    for s in range(3)]}
