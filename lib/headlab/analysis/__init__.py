"""Measurements on heads, all through the head interface (:mod:`headlab.heads`).

How a head is removed is an :class:`~headlab.heads.ablation.Ablation`, what is measured a
:class:`~headlab.metrics.Metric`; every function below that ablates takes them as ``ablation=``
and ``metric=``.

* :mod:`~headlab.analysis.sweep` -- many ablations in few forward passes;
* :mod:`~headlab.analysis.importance`, :mod:`~headlab.analysis.effects` -- how unevenly the work is divided:
  ablation effects per input, gradients, pairs and backups; several metrics from one pass;
* :mod:`~headlab.analysis.detect` -- what a head's attention looks like (scores, labels, relations);
* :mod:`~headlab.analysis.atlas` -- every head scored and labelled;
* :mod:`~headlab.analysis.circuits` -- how one head's output becomes another's input;
* :mod:`~headlab.analysis.prune` -- remove heads in an order, and watch the mean and the tail;
* :mod:`~headlab.analysis.patching`, :mod:`~headlab.analysis.lens` -- patching, direct logit attribution, the lens;
* :mod:`~headlab.analysis.attribution`, :mod:`~headlab.analysis.edges`, :mod:`~headlab.analysis.discovery` --
  attribution patching of nodes and edges, and circuits found from it with their faithfulness.

The one definition of each role a head plays is in :mod:`headlab.roles`; the checklist a reader
runs on a claim about heads in :mod:`headlab.report`.
"""
