"""The indirect-object model (:class:`~deviating.data.ioi.windows.IoiWindows`): a small GPT of
English whose tokenizer keeps first names whole, trained on Brown Corpus windows mixed with
generated passages that use names, indirect-object sentences among them.

**Status: no recipe here reaches the target yet** at every seed. Run 14, the recipe registered
below, meets it at seeds 0 and 2 and falls short at seed 1 (0.917, 0.802 and 0.906 on 1,024 fresh
prompts of held-out names and templates). Run 12, shipped before it, met it at seed 0 only (0.957,
0.756 and 0.871); run 9 stood at 0.74 and 0.59. Held-out templates with training names are solved
at every seed (0.98 to 1.00): what is left is new names in new frames at once. Runs 15 and 16
(below, not shipped) met it at two seeds and at one: from run 12 to run 16, 7 of 15 seeds met it,
and the weakest seed moved from run to run.

The target (issue 36) is ``logit(IO) - logit(S) > 0`` on at least 90% of prompts of held-out names
and templates. Every run is scored on four splits of prompts (``ioi_accuracy`` and its suffixes,
:data:`~deviating.data.ioi.windows.EVAL_SPLITS`; 0.5 is chance).

**Run 6** changed the data and the model in three ways at once:

* templates composed from parts (:mod:`~deviating.data.ioi.sentences`; then 12 lead-ins, 11
  activities and 12 giving clauses for training, 4 of each held out: 6,864 training and 320
  held-out templates, sharing no part), so no fixed token distance finds S2 or the answer slot;
* 201 names (every candidate that Brown tags as a proper noun at least once; 161 for training,
  40 held out), and passages whose other sentences re-use a cast of three names drawn from *all*
  names, so that copying a name from an earlier mention is trained for held-out names too
  (they still never occur in an indirect-object sentence of the training text);
* tied input and output embeddings (``tie_embeddings``), so a name's output direction is its
  input direction and a copy learnt on some names applies to all.

Seeds 0 and 1, 4,000 steps each (709 and 711 CPU-seconds on one shared thread), 256 prompts a
split; accuracy (mean logit difference):

=====================================  ==============  ==============
split                                  seed 0          seed 1
=====================================  ==============  ==============
training names and templates           0.902 (6.52)    0.902 (10.89)
held-out names, training templates     0.742 (1.52)    0.902 (6.38)
training names, held-out templates     0.551 (0.12)    0.586 (0.68)
held-out names and templates           0.453 (-0.13)   0.559 (0.22)
=====================================  ==============  ==============

The task formed late, between steps 2,000 and 2,250 in seed 1 (training split 0.49 -> 0.86) and
2,500 and 3,000 in seed 0 (0.50 -> 0.87); the Brown
validation loss was 4.35 and 4.34 nats (``brown-gpt``, twice as wide and on Brown only, scores
3.56 on the same 64-token windows). So the names generalise (seed 1 as well on held-out names as
on training ones), the templates do not. Scoring seed 1 (seed 0) on templates of training parts
with *one* held-out part, training names, 128 prompts each: a held-out lead-in "Once"/"As"/"On
Sunday" 1.00/1.00/1.00 (0.83/0.99/0.56); a held-out activity 0.80-0.96 (0.64-0.95); a held-out
giving clause 0.62-0.84 (0.57-0.95, "showed a ... to" the worst in both); and the held-out lead-in
without a word before the first name 0.51 (0.50). That last one is a flaw of run 6's data, not of
the model: a name opening the text is the token ``"Mary"``, not ``" Mary"``, so the model cannot
see that S1 and S2 are the same name, nor copy the IO as the answer token. It also capped the
training split at 0.90 (two training lead-ins had it). Both seeds' third sibling (seed 2) was
stopped at step 750 to free the CPU; an untied control of run 6 was stopped at step 750, at
chance like the tied runs at that step.

**Run 8**: run 6 with every lead-in putting a word before the first
name, and twice the training parts (24 lead-ins, 22 activities, 24 giving clauses: 57,024
training templates); the held-out parts are run 6's, except that the bare lead-in became "At
noon ... . Later," (320 held-out templates). Seeds 0 and 1, 4,000 steps (676 and 683
CPU-seconds), 256 prompts a split:

=====================================  ==============  ==============
split                                  seed 0          seed 1
=====================================  ==============  ==============
training names and templates           0.984 (6.66)    0.984 (11.48)
held-out names, training templates     0.785 (1.62)    0.906 (5.06)
training names, held-out templates     0.703 (1.82)    0.641 (1.84)
held-out names and templates           0.516 (0.17)    0.449 (0.10)
=====================================  ==============  ==============

The training split formed at step 3,500 (seed 0) and 2,500 (seed 1); Brown validation loss 4.35
and 4.36. The fixed lead-ins lift the training split from 0.90 to 0.98; twice the parts moves
the held-out templates only a little (0.55 / 0.59 -> 0.70 / 0.64). One held-out part at a time
(training names, 128 prompts; seed 0 / seed 1): most single parts are solved (0.84-0.98), but
each seed fails on a few of them, and not the same ones (seed 0: "Once" 0.67, "threw the" 0.73,
"At noon" 0.79;
seed 1: "threw the" 0.51, "brought the" 0.57, "left the" 0.66). With all three parts unseen the
accuracy is 0.70 / 0.64, and with held-out names as well 0.54 / 0.53: the failures compound.
Seed 2 was stopped at step 1,250 for lack of CPU time before the session's end.

**What blocked the target after run 8**, as measured: a name-general copy is learnt (held-out names with
training templates reach 0.90 in one seed of each run), but the circuit is still keyed to the
contexts it was trained on, so unseen verbs and lead-ins, and above all their combination with
unseen names, stay far below 0.9. A seed cost about 11 CPU-minutes of the 45 allowed, and the task
formed only 500-1,500 steps before the end of the learning-rate schedule: run 9 trains longer.
``tests/test_ioi_shipped.py`` checks any checkpoint that is shipped.

**Run 9: run 8's data and model for 12,000 steps** (three times as
long; the learning-rate schedule stretches to fit). Seeds 0 and 1 (2,202 and 2,237 CPU-seconds on
one thread of the shared machine, within the 45-minute budget), scored afterwards on 1,024 fresh
prompts a split (``python -m deviating.experiments.ioi_eval RUN --prompts 1024 --brown``; 95%
Wilson intervals):

=====================================  ======================  ======================
split                                  seed 0                  seed 1
=====================================  ======================  ======================
training names and templates           0.997 [0.991, 0.999]    0.999 [0.994, 1.000]
held-out names, training templates     0.979 [0.969, 0.987]    0.995 [0.989, 0.998]
training names, held-out templates     0.827 [0.803, 0.849]    0.671 [0.642, 0.699]
held-out names and templates           0.738 [0.711, 0.764]    0.591 [0.560, 0.621]
=====================================  ======================  ======================

Mean logit difference on held-out names and templates 2.86 and 0.67 (13.8 on the training split).
Brown validation loss on 64-token windows 4.22 and 4.14 (``brown-gpt`` 3.57 on windows of the same
texts). Longer training is what moved the held-out templates (seed 0: 0.52 at step 4,000, about
0.74 from step 7,000 on, with swings of 0.1 between evaluations of 256 prompts); names generalise
fully in both seeds. **The target is still not met**: the circuit generalises to new names but only
in part to new sentence frames, and how far differs from seed to seed. Run 10 (branch ``h-ioi-verbs``, not merged) gave
the training text half as many parts again (36 lead-ins, 34 activities, 55 giving clauses): seed 0
reached 0.88 on held-out templates with training names but 0.92 on held-out names and 0.62 on
both, no better than run 9. Not tried yet: held-out templates as unseen *combinations* of
training parts (a weaker test), or a deeper model.

**Run 12 (shipped until run 14): run 9 with half of the indirect-object sentences in Brown
frames** (``frame_share=0.5``, :func:`~deviating.data.ioi.sentences.brown_frame_sentence`): the
same shape, two names then the giver then "to", but every word around the names drawn from the
Brown training texts (the 300 most frequent past-tense verbs and singular nouns, 20 prepositions,
12 subordinating conjunctions, never a word of a held-out part): "Because Maria and Lois created
into the process, Lois gained her list to Maria." Most frames are not sensible English; they vary
the context of the names far more than the part lists of run 10 did. Same model, 12,000 steps,
seeds 0, 1 and 2 (1,661, 1,675 and 1,624 CPU-seconds on one thread each, three runs sharing two
cores), scored afterwards on 1,024 fresh prompts a split (``python -m deviating.experiments.ioi_eval RUN
--prompts 1024 --brown``; 95% Wilson intervals):

=====================================  ======================  ======================  ======================
split                                  seed 0                  seed 1                  seed 2
=====================================  ======================  ======================  ======================
training names and templates           1.000 [0.996, 1.000]    1.000 [0.996, 1.000]    0.997 [0.991, 0.999]
held-out names, training templates     0.979 [0.968, 0.986]    0.972 [0.960, 0.980]    0.897 [0.877, 0.915]
training names, held-out templates     0.993 [0.986, 0.997]    0.999 [0.994, 1.000]    0.996 [0.990, 0.998]
held-out names and templates           0.957 [0.943, 0.968]    0.756 [0.729, 0.781]    0.871 [0.849, 0.890]
=====================================  ======================  ======================  ======================

Mean logit difference on held-out names and templates 8.82, 2.84 and 5.90. Brown validation loss
on 64-token windows 4.11, 4.09 and 4.11 (``brown-gpt`` 3.57; run 9 4.22 and 4.14). Held-out
templates with training names are solved at every seed (run 9: 0.83 and 0.67), so the frames did
what they were for; **the target is met at seed 0 only**. Held-out names are the weaker half now
(0.90 to 0.98), and new names in new frames compound the two. Between steps 4,750 and 9,500
seed 1 moved between 0.82 and 0.98 on its 256 evaluation prompts and ended at 0.75; seed 2
between 0.80 and 0.94, ending at 0.84. Run 13 puts the held-out names into the frames too.

**Run 13 (not shipped): run 12 with half of the other sentences in Brown frames as well**
(``other_frame_share=0.5``, :func:`~deviating.data.ioi.sentences.brown_frame_other_sentence`): the
cast's names, held-out ones included, now meet the frames' words, in sentences that repeat a name
but never give anything to anyone by name ("After the war Lois and Maria referred at the
president. Lois refused a corner into the course."). Seeds 0, 1 and 2 (2,083, 2,106 and 1,941
CPU-seconds on one thread each, three runs sharing two cores). On held-out names and templates:

==========================================  ======================  ======================  ======================
held-out names and templates                seed 0                  seed 1                  seed 2
==========================================  ======================  ======================  ======================
the run's own 256 prompts, last evaluation  0.902                   0.914                   0.926
1,024 fresh prompts (95% Wilson interval)   0.838 [0.814, 0.859]    0.875 [0.853, 0.894]    0.937 [0.920, 0.950]
==========================================  ======================  ======================  ======================

On the fresh prompts, held-out names alone 0.950, 0.939 and 0.957, held-out templates alone 0.957,
0.993 and 0.997; Brown loss 4.12, 4.08 and 4.10. The seeds are more even than run 12's (lowest
0.84 against 0.76), and over the last 1,500 steps the 256-prompt evaluations stood between 0.85
and 0.95, but on fresh prompts **the target is met at seed 2 only**. The 256 prompts of a
run's own evaluation are too few to decide a target this close, so the book now judges it on
1,024 fresh prompts a split (``meets_target`` in :mod:`deviating.experiments.ioi_circuit`'s
record, and ``tests/test_ioi_shipped.py``). The circuits (``python -m deviating.experiments.ioi_circuit`` on these checkpoints)
are richer than run 12's: seed 0 has two name movers (3.1, 3.2), S-inhibition 2.0 and induction
1.1; seed 2 two name movers (2.1, 2.3), S-inhibition 1.2 and a duplicate-token head 3.0; seed 1,
again, no head that meets the name-mover definition. The checkpoints were not shipped: they
met the target at one seed, as run 12's did. Run 14 averages the weights of the
last steps by a rule fixed in advance, to damp the swings of 0.05 to 0.1 between evaluations that
every run shows.

**Run 14, the recipe registered below: run 13 with the weights averaged** (``average_share=0.25``,
``average_every=100``): the saved model is the uniform mean of the weights after steps 9,100, 9,200,
..., 12,000 (30 snapshots), a rule written down before training (Izmailov et al. 2018); the
training itself is run 13's. Seeds 0, 1 and 2 (2,245, 2,177 and 2,286 CPU-seconds on one thread
each, three runs sharing two cores of a slower machine), scored on 1,024 fresh prompts a split
with their weights averaged and, from the same runs (``train --unaveraged-out``), after the last step:

=====================================  ======================  ======================  ======================
held-out names and templates           seed 0                  seed 1                  seed 2
=====================================  ======================  ======================  ======================
after the last step                    0.884 [0.863, 0.902]    0.774 [0.748, 0.799]    0.881 [0.860, 0.899]
averaged (shipped)                     0.917 [0.898, 0.932]    0.802 [0.776, 0.825]    0.906 [0.887, 0.923]
=====================================  ======================  ======================  ======================

Averaging adds 2.5 to 3.3 points at every seed (mean logit difference 5.05 -> 5.95, 3.08 -> 3.64,
5.40 -> 6.04) and costs nothing; held-out names alone 0.949, 0.859 and 0.941, held-out templates
alone 0.982, 0.989 and 0.999; Brown loss 4.10, 4.08 and 4.09 (``brown-gpt`` 3.57). **The target is
met at seeds 0 and 2.** The plan written before training was to ship run 14 only if all three seeds met
it; it is shipped at two because it beats run 12 on every count (seeds that meet it, the lowest
and the mean accuracy), a choice made on these accuracies before the circuits and the ledger's
rows were measured again. The unaveraged weights are not run 13's, although the code and the data
are (the first 200 batches of a seed hash alike under both versions of the code): the runs were
made on another machine, whose rounding sends training elsewhere, and the scores moved by up to
0.10 at one seed (seed 1: 0.875 in run 13, 0.774 here; seed 2: 0.937 and 0.881).
So a seed's score near 0.9 is in part the luck of the run, and a recipe must clear the target by a
margin to meet it at every seed. The circuits (``python -m deviating.experiments.ioi_circuit``) now
have a name mover and an S-inhibition head at every seed: seed 0 name movers 3.1 and 3.2,
S-inhibition 2.0, induction 1.1; seed 1 name mover 2.3, S-inhibition 1.1, induction 3.2; seed 2
name movers 2.1 and 2.3, S-inhibition 1.2, duplicate token 3.0.

**Run 15 (not shipped): run 14 with held-out names met as often as training names**
(``cast_heldout_share=0.55``, :func:`~deviating.data.ioi.sentences.passage`). In run 14's pool a
held-out name occurs 136 times per 2,000 passages and a training name 431 times, because only
training names are in indirect-object sentences; drawing each member of a passage's cast as a
held-out name with probability 0.55 makes the two equally frequent (372 and 372). Held-out names
are still never in an indirect-object sentence; nothing else changed. The rule, committed before
training (branch ``run15``): replace run 14 if the averaged weights reach 0.9 at all three seeds, or
at two with the lowest seed above run 14's 0.802. Seeds 0, 1 and 2 (2,210, 2,298 and 2,278
CPU-seconds on one thread each, three runs sharing two cores), 1,024 fresh prompts a split:

=====================================  ======================  ======================  ======================
held-out names and templates           seed 0                  seed 1                  seed 2
=====================================  ======================  ======================  ======================
after the last step                    0.887 [0.866, 0.905]    0.937 [0.920, 0.950]    0.681 [0.651, 0.708]
averaged                               0.904 [0.885, 0.921]    0.957 [0.943, 0.968]    0.658 [0.629, 0.687]
held-out names alone (averaged)        0.939                   0.943                   0.714
=====================================  ======================  ======================  ======================

Mean logit difference (averaged) 3.79, 4.92 and 1.33; held-out templates alone 0.993, 0.996 and
0.981; Brown loss 4.10, 4.07 and 4.09. Two seeds meet the target, but seed 2 fails on held-out
names (0.63 to 0.77 on its own evaluations from step 5,000 to the end), so **by the rule run 14
stays shipped**. Seed 1, the weak seed of runs 12 and 14, is the strongest here (0.957). Over
runs 12 to 15, 6 of 12 seeds meet the target, and the weakest seed of each run was seed 1, 0, 1
and 2 (0.756, 0.838, 0.802 and 0.658): what a seed learns about unseen names is in large part the
luck of the run. More exposure to held-out names did not make it reliable; one reading
(not tested) is that a name met often but never as a recipient is learnt as a name that is not
given to. Next to try: more training names (the held-out names are a fifth of 201; a list of
first names from outside Brown would give hundreds more), so that no name-specific shortcut pays.

**Run 16 (not shipped): run 14 with 200 more training names** (``extra_names=200``,
:data:`~deviating.data.ioi.names.EXTRA_NAMES`: frequent first names of the 1990 US census lists
that never occur in Brown, so they appear in generated passages only; the tokenizer grows to
2,816 ids). The 40 held-out names, the templates and the evaluation do not change. The rule,
committed before training (branch ``run16-probe``): replace run 14 if the averaged weights reach
0.9 on 1,024 fresh prompts of held-out names and templates at all three seeds, or at two with the
lowest seed above run 14's 0.802; in either case only if each seed's Brown loss is within 0.05 of
run 14's (4.10, 4.08 and 4.09) and its training takes at most 2,700 CPU-seconds. (A probe of the
same code, read at step 6,000 by an earlier rule, had called it not promising: 0.820, 0.869 and
0.882 over steps 4,000-6,000; the full runs were made to measure it, not to rescue it.) Seeds 0,
1 and 2 (2,954, 2,939 and 2,922 CPU-seconds on one thread each, three runs sharing two cores),
1,024 fresh prompts a split:

=====================================  ======================  ======================  ======================
held-out names and templates           seed 0                  seed 1                  seed 2
=====================================  ======================  ======================  ======================
after the last step                    0.794 [0.768, 0.818]    0.898 [0.878, 0.915]    0.908 [0.889, 0.924]
averaged                               0.824 [0.800, 0.846]    0.899 [0.879, 0.916]    0.905 [0.886, 0.922]
held-out names alone (averaged)        0.950                   0.965                   0.965
=====================================  ======================  ======================  ======================

Mean logit difference (averaged) 3.98, 3.47 and 5.53; held-out templates alone 0.981, 0.988 and
0.999; Brown loss 4.13, 4.09 and 4.08. One seed meets the target and each run went over the CPU
budget (the same machine trained run 15 in 2,210 to 2,298 CPU-seconds: the larger vocabulary cost
about 1.3 times as much per step, where 1.15 was measured on a quiet core), so **by the rule run
14 stays shipped**. What the extra names did: held-out names alone are now 0.95 to 0.97 at every
seed, the most even of any run (run 14: 0.949, 0.859 and 0.941; run 15: 0.939, 0.943 and 0.714),
and held-out templates alone stay at 0.98 to 1.00. What is left is the two at once: a new name in
a new frame, 0.82 to 0.91. Over runs 12 to 16, 7 of 15 seeds meet the target. Where those errors
sit (``python -m deviating.experiments.ioi_eval FOLDER --breakdown``, the same 1,024 prompts):
at seeds 0 and 1 in one held-out lead-in, "At noon ... . Later," (0.69 and 0.70; the other three
lead-ins 0.81 to 0.97), and at every seed in the activity "left the ..." (0.77, 0.81, 0.81); seed
0 also in the ABBA order (0.71 against 0.94 for BABA). Run 14's seed 1, by contrast, is at 0.77
to 0.84 in every group: its failure was the names, run 16's is a few parts of the frames.

An exploratory run of seed 0 (the same data, drawn by a script outside the library; its training
log is identical step for step to the registered recipe's) stood at 0.87 on held-out names and
templates by step 4,000, where run 9's seed 0 was at about 0.5. So the part lists had taught a
circuit keyed to their words; the frames remove that, and what remains of the gap is the names.

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
                      generated_fraction=0.8, ioi_fraction=0.5, cast_size=3, total_vocab=2048, frame_share=0.5,
                      other_frame_share=0.5)


_TASK = ioi_task()  # shared by the seeds: the corpus and tokenizer are prepared once, on first use

IOI: dict[str, Recipe] = {r.name: r for r in [
    brown_recipe("ioi-gpt" + (f"-s{s}" if s else ""),
                 "small GPT (4 layers of 4 heads of 16, MLPs, LayerNorm, tied embeddings) whose tokenizer keeps "
                 "first names whole, on Brown Corpus windows (20%) and generated passages of names (80%; half of "
                 "their sentences indirect-object sentences of templates composed from parts, the other half "
                 "other sentences in which a cast of three names recurs)" + (f", training seed {s}" if s else ""),
                 _TASK, config=IOI_GPT, steps=12000, lr=5e-3, warmup=100, eval_every=250, eval_size=128, seed=s,
                 tie_embeddings=True, average_share=0.25, average_every=100)
    for s in range(3)]}
