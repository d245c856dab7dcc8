"""Sparse autoencoders on a layer's head outputs (:mod:`~headlab.analysis.sae.model`) and the two
bases compared (:mod:`~headlab.analysis.sae.compare`)."""
