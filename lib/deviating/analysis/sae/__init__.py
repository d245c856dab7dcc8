"""Sparse autoencoders on a layer's head outputs (:mod:`~deviating.analysis.sae.model`) and the two
bases compared (:mod:`~deviating.analysis.sae.compare`)."""
