"""The library's figures and widgets, one module per kind of figure: what a researcher draws of
their own model's heads.

``figures`` (what every figure shares: ``new_axes``, ``as_array``), ``patterns`` (attention
patterns), ``grids`` (a value per head), ``atlas`` (labels and lifts), ``effects`` (mean against
worst case, pairs, what to keep: the checklist report's figures), ``circuits`` (composition,
and a pair's ablation), ``live`` (anywidget widgets that also run on a static site) and
``widgets`` (what the live-ablation widget computes). The book's own figures (training curves, scaling, comparisons,
pruning curves, SAEs) are ``deviating.figures``. Nothing here changes global matplotlib settings.
"""
