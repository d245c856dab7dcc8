"""The experiments whose stored results the chapters read (``lib/headlab/results/``), as functions
with their sizes as parameters; ``scripts/`` holds their thin command lines.

* :mod:`~headlab.experiments.what_breaks` (with :mod:`~headlab.experiments.adversarial` and
  :mod:`~headlab.experiments.minilm_pruning`): chapter 7's pruning, averaging and hijacking;
* :mod:`~headlab.experiments.students`: chapter 7's distillation students;
* :mod:`~headlab.experiments.width_depth`: chapter 8's width/depth/d_head sweep;
* :mod:`~headlab.experiments.saes`: chapter 8's sparse autoencoders.
"""
