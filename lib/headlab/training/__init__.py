"""Training the book's models reproducibly, all on one loop.

* :mod:`~headlab.training.loop` -- the one training loop (:func:`~headlab.training.loop.run_loop`)
  and a recipe's GPT trained on it (:func:`~headlab.training.loop.train`);
* :mod:`~headlab.training.recipe` and :mod:`~headlab.training.recipes` -- what a run is made of, and
  the one registry of recipes (:data:`~headlab.training.recipes.RECIPES`), one module per family;
* :mod:`~headlab.training.runs` -- a run saved as a checkpoint, and ``python -m headlab train NAME``;
* :mod:`~headlab.training.distill` -- attention-transfer distillation (the loop's extra loss term);
* :mod:`~headlab.training.sae` -- sparse autoencoders (the loop's per-step hooks).
"""
