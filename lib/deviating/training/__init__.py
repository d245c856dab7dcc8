"""Training the book's models reproducibly, all on one loop.

* :mod:`~deviating.training.loop` -- the one training loop (:func:`~deviating.training.loop.run_loop`)
  and a recipe's GPT trained on it (:func:`~deviating.training.loop.train`);
* :mod:`~deviating.training.recipe` and :mod:`~deviating.training.recipes` -- what a run is made of, and
  the one registry of recipes (:data:`~deviating.training.recipes.RECIPES`), one module per family;
* :mod:`~deviating.training.runs` -- a run saved as a checkpoint, and ``python -m deviating train NAME``;
* :mod:`~deviating.training.distill` -- attention-transfer distillation (the loop's extra loss term);
* :mod:`~deviating.training.sae` -- sparse autoencoders (the loop's per-step hooks).
"""
