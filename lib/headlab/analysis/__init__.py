"""Measurements on heads, all through the head interface (:mod:`headlab.heads`).

How a head is removed is an :class:`~headlab.heads.ablation.Ablation`, what is measured a
:class:`~headlab.metrics.Metric`; every function below that ablates takes them as ``ablation=``
and ``metric=``.

* :mod:`~headlab.analysis.sweep` -- many ablations in few forward passes;
* :mod:`~deviating.analysis.task_shares` -- which share of each task of the synthetic language a head carries;
* :mod:`~headlab.analysis.detect` -- what a head's attention looks like (scores, labels, relations);
* :mod:`~headlab.analysis.atlas` -- every head scored and labelled;
* :mod:`~headlab.analysis.circuits` -- how one head's output becomes another's input;
* :mod:`~deviating.analysis.prune`, :mod:`~deviating.analysis.adversarial` -- what breaks;
* :mod:`~deviating.analysis.inspection` -- whether an inspector of the attention sees a hijacked head;
* :mod:`~deviating.analysis.averaging` -- a layer's heads averaged into one mechanism;
* :mod:`~deviating.analysis.specialists` -- per head, how well it does the jobs the book names;
* :mod:`~deviating.analysis.sae` -- sparse autoencoders beside the head basis.
"""
