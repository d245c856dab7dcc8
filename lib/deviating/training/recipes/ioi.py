"""The indirect-object model (:class:`~deviating.data.ioi.windows.IoiWindows`): a small GPT of
English whose tokenizer keeps first names whole, trained on Brown Corpus windows mixed with
generated passages that use names, indirect-object sentences among them.

The target (issue 36) is ``logit(IO) - logit(S) > 0`` on at least 90% of prompts of held-out names
and templates. Every run is scored on four splits of prompts (``ioi_accuracy`` and its suffixes,
:data:`~deviating.data.ioi.windows.EVAL_SPLITS`; 0.5 is chance).

**The recipe registered below (run 6)** changes the data and the model in three ways at once:

* templates composed from parts (6,864 training templates, 320 held-out ones that share no
  lead-in, activity or giving clause with a training one), so no fixed token distance finds S2
  or the answer slot (:mod:`~deviating.data.ioi.sentences`);
* 201 names (every candidate that Brown tags as a proper noun at least once; 161 for training,
  40 held out), and passages whose other sentences re-use a cast of three names drawn from *all*
  names, so that copying a name from an earlier mention is trained for held-out names too
  (they still never occur in an indirect-object sentence of the training text);
* tied input and output embeddings (``tie_embeddings``), so a name's output direction is its
  input direction and a copy learnt on some names applies to all.

Run 6 is being measured; until its numbers are recorded here, no checkpoint is shipped.

**Runs 1-5 (the earlier data: twelve fixed templates, 156 names, held-out names absent from all
generated text; untied embeddings).** Measured on one shared thread (``ioi_accuracy`` on 256
held-out prompts):

* ``brown-gpt``'s shape (4 layers of 4 heads of 32, MLPs of 512), windows of 64 tokens, half
  generated (half of those sentences indirect-object ones): 0.51 at step 250 (0.3 CPU-s a step);
* 4 layers of 4 heads of 16, MLPs of 256 (:data:`IOI_GPT`, 0.16 CPU-s a step), 60% generated
  windows, 60% indirect-object sentences, lr 5e-3: between 0.50 and 0.58 at every evaluation up to
  step 1500 (mean logit difference up to 0.52);
* the same with 80% / 80% and lr 1e-2: between 0.45 and 0.55 up to step 1400;
* a 2-layer attention-only model (4 heads of 16) on generated indirect-object text only, lr 1e-2:
  at chance at step 800, and below chance (0.29-0.38) on prompts of the training templates,
  also inside passages: it copies the name mentioned twice;
* :data:`IOI_GPT` with 80% / 80% and lr 5e-3 over 4,000 steps (about 29 wall-minutes on a shared
  thread): on prompts of the *training* names and templates the task forms between steps 2,300
  and 3,000 (accuracy 0.52 -> 0.93, mean logit difference -0.06 -> 6.8; 0.93 and 8.7 at step
  4,000), but on held-out names and templates it stays at chance (0.52, -0.12). Split at step
  4,000 on 256 prompts each: training names and templates 0.96 (logit difference 9.1); training
  names, held-out templates 0.43 (-0.09); held-out names, training templates 0.52 (0.46); both
  held out 0.52 (0.09). The Brown validation loss (windows of 64 tokens) was 4.18.

A variant that also used the held-out names in the generated *non*-indirect-object sentences
(3,000 steps, otherwise the same) learnt the training split as fast (0.93, logit difference 8.2)
and barely moved the rest: training names with held-out templates 0.46, held-out names with
training templates 0.57, both held out 0.45. So those runs learnt a solution tied to the twelve
training templates and to the names met in indirect-object sentences, not a general "the name
mentioned once" mechanism; run 6 takes away the three things suspected of allowing such a solution.
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
                      generated_fraction=0.8, ioi_fraction=0.5, cast_size=3, total_vocab=2048)


_TASK = ioi_task()  # shared by the seeds: the corpus and tokenizer are prepared once, on first use

IOI: dict[str, Recipe] = {r.name: r for r in [
    brown_recipe("ioi-gpt" + (f"-s{s}" if s else ""),
                 "small GPT (4 layers of 4 heads of 16, MLPs, LayerNorm, tied embeddings) whose tokenizer keeps "
                 "first names whole, on Brown Corpus windows (20%) and generated passages of names (80%; half of "
                 "their sentences indirect-object sentences of templates composed from parts, the other half "
                 "other sentences in which a cast of three names recurs)" + (f", training seed {s}" if s else ""),
                 _TASK, config=IOI_GPT, steps=4000, lr=5e-3, warmup=100, eval_every=250, eval_size=128, seed=s,
                 tie_embeddings=True)
    for s in range(3)]}
