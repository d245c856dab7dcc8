"""``glue`` for the chapters: MyST-NB's in the book, a printed value everywhere else.

The chapters hand values to their prose with MyST-NB's ``glue`` (the site's ``{glue:text}`` roles
read them). MyST-NB comes with the ``book`` extra only; Colab's install cell installs
``headlab[minilm]``, which does not have it. A chapter imports ``glue`` from here, so that its
setup cell runs in both places:

- where ``myst_nb`` imports (the book's build), this is MyST-NB's ``glue``, unchanged;
- elsewhere, the value is shown as the cell's output: ``display`` when IPython is there, else
  ``print``; a value glued with ``display=False`` is printed as one line ``name = value`` (the
  Colab edition's prose quotes the book's stored value; this line shows the reader's own).

``myst_nb`` is looked up at each call, not at import time, so importing this module never needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["glue"]


def _myst_glue():
    """MyST-NB's ``glue``, or None where ``myst_nb`` is not installed."""
    try:
        return importlib.import_module("myst_nb").glue
    except ImportError:
        return None


def glue(name: str, variable: Any, display: bool = True) -> None:
    """Glue ``variable`` under ``name`` for the book's prose, or show it outside the book.

    Same signature as ``myst_nb.glue``. ``name`` must be a non-empty string (the key the prose
    names). Outside the book nothing is stored: a value with ``display=True`` is displayed as the
    cell's output, one with ``display=False`` printed as ``name = value``.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"glue: the name must be a non-empty string (the key the prose reads), got {name!r}")
    if not isinstance(display, bool):
        raise TypeError(f"glue: display must be True or False, got {display!r}")
    myst = _myst_glue()
    if myst is not None:
        myst(name, variable, display=display)
        return
    if not display:
        print(f"{name} = {variable}")
        return
    try:
        from IPython.display import display as show
    except ImportError:
        print(variable)
        return
    show(variable)
