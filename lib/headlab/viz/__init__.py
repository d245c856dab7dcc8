"""The book's figures and widgets, one module per kind of figure.

``figures`` (what every figure shares: ``new_axes``, ``as_array``), ``patterns``, ``grids``,
``curves``, ``scaling``, ``comparisons``, ``importance``, ``circuits``, ``atlas``, ``sae``, and
``widgets`` (ipywidgets). Nothing here changes global matplotlib settings.
"""
