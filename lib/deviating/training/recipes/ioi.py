"""The indirect-object model (:class:`~deviating.data.ioi.windows.IoiWindows`): a small GPT of
English whose tokenizer keeps first names whole, trained on Brown Corpus windows mixed with
generated passages that use names, indirect-object sentences among them.

**Status: no recipe here reaches the target yet, and no checkpoint is shipped.** The target
(issue 36) is ``logit(IO) - logit(S) > 0`` on at least 90% of prompts of held-out names and
templates. Measured on one shared thread (``ioi_accuracy`` on 256 held-out prompts; 0.5 is chance):

* ``brown-gpt``'s shape (4 layers of 4 heads of 32, MLPs of 512), windows of 64 tokens, half
  generated (half of those sentences indirect-object ones): 0.51 at step 250 (0.3 CPU-s a step);
* 4 layers of 4 heads of 16, MLPs of 256 (:data:`IOI_GPT`, 0.16 CPU-s a step), 60% generated
  windows, 60% indirect-object sentences, lr 5e-3: between 0.50 and 0.58 at every evaluation up to
  step 1500 (mean logit difference up to 0.52);
* the same with 80% / 80% and lr 1e-2: between 0.45 and 0.55 up to step 1400;
* a 2-layer attention-only model (4 heads of 16) on generated indirect-object text only, lr 1e-2:
  at chance at step 800, and below chance (0.29-0.38) on prompts of the training templates,
  also inside passages: it copies the name mentioned twice.

Every run learnt the templates (training loss near 1 nat a token on generated text) and to
predict *a* name of the sentence, but not which one: the duplicate-token step did not form
within 1,500 steps (no induction head either: best induction score 0.02, chance level). The next
attempt needs far more steps (a GPU, or hours on one thread) or a curriculum that forms
duplicate-token heads first. The recipes below are the last measured configuration, registered
so that the next attempt starts from it.
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
                      generated_fraction=0.8, ioi_fraction=0.8)


_TASK = ioi_task()  # shared by the seeds: the corpus and tokenizer are prepared once, on first use

IOI: dict[str, Recipe] = {r.name: r for r in [
    brown_recipe("ioi-gpt" + (f"-s{s}" if s else ""),
                 "small GPT (4 layers of 4 heads of 16, MLPs, LayerNorm) whose tokenizer keeps first names whole, on "
                 "Brown Corpus windows (20%) and generated passages of names (80%; 80% of their sentences "
                 "indirect-object sentences)" + (f", training seed {s}" if s else ""),
                 _TASK, config=IOI_GPT, steps=4000, lr=5e-3, warmup=100, eval_every=250, eval_size=128, seed=s)
    for s in range(3)]}
