"""Analyses that one chapter of the book uses, built on :mod:`headlab.analysis`."""
