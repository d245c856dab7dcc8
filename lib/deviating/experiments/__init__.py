"""The experiments whose stored results the chapters read (``lib/deviating/results/``), as functions
with their sizes as parameters; ``scripts/`` holds their thin command lines.

* :mod:`~deviating.experiments.what_breaks` (with :mod:`~deviating.experiments.adversarial` and
  :mod:`~deviating.experiments.minilm_pruning`): chapter 7's pruning, averaging and hijacking;
* :mod:`~deviating.experiments.students`: chapter 7's distillation students;
* :mod:`~deviating.experiments.width_depth`: chapter 8's width/depth/d_head sweep;
* :mod:`~deviating.experiments.saes`: chapter 8's sparse autoencoders.
"""
