"""The book's own figures (training curves, scaling, comparisons, importance, SAEs), built on
:mod:`headlab.viz.figures`. Nothing here changes global matplotlib settings."""
