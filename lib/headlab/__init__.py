"""headlab: the library behind *Deviating Attention*.

How the heads of a transformer divide the work: attention kernels, one per-head
interface to real and home-grown models, the measurements, and the widgets.

Importing this package has no side effects: no seeding, no downloads, no
matplotlib settings, no prints.
"""

from .loading import load
from .model import HeadModel

__version__ = "0.1.0"
__all__ = ["load", "HeadModel", "__version__"]
