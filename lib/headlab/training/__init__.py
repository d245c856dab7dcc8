"""Training the book's models reproducibly: the loop (:mod:`~headlab.training.loop`), distillation
(:mod:`~headlab.training.distill`) and the recipes of every shipped checkpoint."""
