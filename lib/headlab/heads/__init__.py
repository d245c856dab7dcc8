"""The head interface: one way to see, ablate and differentiate the heads of any supported model.

* :mod:`~headlab.heads.model` -- :class:`HeadModel`, the geometry, the forward pass and the
  per-head weights, with the capture/ablate/patch contexts;
* :mod:`~headlab.heads.gate` -- what an intervention writes into the head outputs ``z`` before
  ``W_O`` (the gate, function patches, resample draws);
* :mod:`~headlab.heads.adapters` -- where each model family keeps its heads;
* :mod:`~headlab.heads.loading` -- :func:`load`: every model of the book by name.
"""

from headlab.heads.adapters import ARCHITECTURES, Architecture, UnsupportedModelError, architecture_of
from headlab.heads.loading import ModelUnavailable, load
from headlab.heads.head import Head, format_head, format_heads, parse_head
from headlab.heads.model import ABLATION_MODES, AblationNotApplied, ActivationCache, HeadModel

__all__ = [
    "HeadModel", "ActivationCache", "AblationNotApplied", "Head", "format_head", "format_heads", "parse_head", "ABLATION_MODES", "load",
    "ModelUnavailable", "Architecture", "ARCHITECTURES", "architecture_of", "UnsupportedModelError",
]
