"""headlab: the library behind *Deviating Attention*.

How the heads of a transformer divide the work: attention kernels, one per-head
interface to real and home-grown models, the measurements, and the widgets.

Importing this package has no side effects: no seeding, no downloads, no
matplotlib settings, no prints.
"""

from headlab.devices import resolve_device
from headlab.heads.loading import load
from headlab.heads.model import HeadModel

__version__ = "0.2.0"
__all__ = ["load", "HeadModel", "resolve_device", "__version__"]
