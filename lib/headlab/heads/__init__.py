"""The head interface: one way to see, ablate and differentiate the heads of any supported model.

* :mod:`~headlab.heads.model` -- :class:`HeadModel`: the geometry, the forward pass and the
  per-head weights (``W_Q``, ``W_K``, ``W_V``, ``W_O``);
* :mod:`~headlab.heads.capture` -- :class:`ActivationCache` and the reading contexts
  (``capture``, ``run_with_cache``, ``patch_pattern``);
* :mod:`~headlab.heads.gate` -- what an intervention writes into the head outputs ``z`` before
  ``W_O`` (the gate, function patches, resample draws) and the contexts built on it
  (``ablate``, ``gated``, ``patch_z``, ``head_gradients``);
* :mod:`~headlab.heads.dispatch` -- the hooks every context installs through (every forward
  checked, nothing stored on the model, one state per thread);
* :mod:`~headlab.heads.replay` -- the sweep's edits of a forward pass: the clean record replayed
  below the first ablated layer, and the tiling from its gate on (nothing outside ``heads/``
  registers a hook or replaces a ``forward``);
* :mod:`~headlab.heads.onnx` -- the book's GPT exported with its gate, for the browser's widgets;
* ``headlab.heads.inputs`` -- what every method accepts, checked where it comes in;
* :mod:`~headlab.heads.adapters` -- where each model family keeps its heads;
* :mod:`~headlab.heads.head` -- :class:`Head`, how a head is written;
* :mod:`~headlab.heads.loading` -- :func:`load`: every model of the book by name.
"""

from headlab.heads.adapters import ARCHITECTURES, Architecture, UnsupportedModelError, architecture_of
from headlab.heads.capture import ActivationCache
from headlab.heads.gate import ABLATION_MODES, AblationNotApplied
from headlab.heads.head import Head, format_head, format_heads, parse_head
from headlab.heads.loading import ModelUnavailable, load
from headlab.heads.model import HeadModel

__all__ = [
    "HeadModel", "ActivationCache", "AblationNotApplied", "Head", "format_head", "format_heads", "parse_head",
    "ABLATION_MODES", "load", "ModelUnavailable", "Architecture", "ARCHITECTURES", "architecture_of",
    "UnsupportedModelError",
]
