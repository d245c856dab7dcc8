"""headlab: how the heads of a transformer divide the work, measured on your own model.

One per-head interface to the book's models and to Hugging Face models (GPT-2, BERT/MiniLM,
GPT-NeoX, Llama-style grouped-query attention, ...), and the measurements a researcher runs
through it. A first hour needs only this namespace::

    from headlab import load, Ablation, Metric, LogitMetric, sweep, activation_patch

    hm = load("gpt2")                                   # or "minilm", "brown-gpt", a local path
    effects = sweep(hm, texts, metric=Metric("loss"))   # every head ablated, per text
    grid = activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("logit_diff", pairs)))

Everything else lives in its sub-package, by meaning: :mod:`headlab.heads` (the interface),
:mod:`headlab.metrics`, :mod:`headlab.analysis` (sweeps, importance, patching, attribution
patching and circuit discovery, the lens, circuits, the atlas, pruning), :mod:`headlab.report` (the
checklist), :mod:`headlab.roles` (the one definition of each role a head
plays), :mod:`headlab.stats`, :mod:`headlab.kernels`, :mod:`headlab.viz`.

Importing this package has no side effects: no seeding, no downloads, no matplotlib settings,
no prints, no registered torch ops.
"""

from headlab.analysis.atlas import compute_atlas
from headlab.analysis.attribution import attribution_patch
from headlab.analysis.discovery import faithfulness, find_circuit
from headlab.analysis.edges import edge_attribution
from headlab.analysis.importance import Importance, gradient_importance, head_importance, pair_effects
from headlab.analysis.lens import direct_logit_attribution, logit_lens
from headlab.analysis.patching import activation_patch, path_patch
from headlab.analysis.sweep import SweepResult, sweep
from headlab.devices import resolve_device
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head, format_head, parse_head
from headlab.heads.loading import load
from headlab.heads.model import HeadModel
from headlab.metrics import ItemMetric, LogitMetric, Metric

__version__ = "0.3.0"
__all__ = [
    # the interface
    "load", "HeadModel", "Head", "parse_head", "format_head", "Ablation", "resolve_device",
    # what is measured
    "Metric", "LogitMetric", "ItemMetric",
    # the measurements of a first hour
    "sweep", "SweepResult", "head_importance", "gradient_importance", "pair_effects", "Importance",
    "activation_patch", "path_patch", "direct_logit_attribution", "logit_lens", "compute_atlas",
    # attribution patching and circuit discovery
    "attribution_patch", "edge_attribution", "find_circuit", "faithfulness",
    "__version__",
]
