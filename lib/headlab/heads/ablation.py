"""How a head is removed: the :class:`Ablation` value, passed as one argument.

Every measurement that removes heads (:func:`headlab.analysis.sweep.sweep`, the importance and
pruning functions, the circuit checks, :meth:`HeadModel.ablate`) takes *how* to remove them as one
value instead of three loose parameters::

    Ablation()                                   # zero ablation: the head's output becomes 0
    Ablation("mean", reference=texts)            # its mean over every real token of ``texts``
    Ablation("resample", reference=texts, seed=1)  # its output at the same position of a random text

The value is checked when it is made, so a mistake is reported where it was written rather than
deep inside a sweep. :func:`upgrade_arguments` turns the loose keyword arguments of headlab 0.1
(``mode=``, ``reference=``, ``seed=``, ``kind=``, ``loss_mask=``) into these values, with a
``DeprecationWarning`` that shows the new call.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["ABLATION_MODES", "Ablation", "upgrade_arguments"]

ABLATION_MODES = ("zero", "mean", "resample")

# the 0.1 keyword arguments each value replaces
_ABLATION_KEYWORDS = ("mode", "reference", "seed")
_METRIC_KEYWORDS = ("kind", "loss_mask")
_REMOVAL = "headlab 0.3"


@dataclass(frozen=True, eq=False)
class Ablation:
    """How to remove a head: what its output ``z`` is replaced by before ``W_O``.

    Attributes:
        mode: ``"zero"`` (by 0), ``"mean"`` (by its mean over every real token of
            ``reference``) or ``"resample"`` (at each position, by its output at the same
            position of a ``reference`` input drawn at random among those long enough).
        reference: texts or a batch (anything :meth:`HeadModel.tokenize` reads) for ``"mean"``
            and ``"resample"``; ``None`` for ``"zero"``.
        seed: the draw of ``"resample"``.

    Raises:
        ValueError: an unknown mode, a reference given to zero ablation, or no reference for
            mean or resample ablation.
    """

    mode: str = "zero"
    reference: Any = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ABLATION_MODES:
            raise ValueError(f"unknown ablation mode {self.mode!r}: choose from {', '.join(ABLATION_MODES)}")
        if self.mode == "zero" and self.reference is not None:
            raise ValueError("zero ablation takes no reference; use Ablation('mean', reference=...) or "
                             "Ablation('resample', reference=...) to replace a head by its output on other texts")
        if self.mode != "zero" and self.reference is None:
            raise ValueError(f"{self.mode} ablation needs reference=<texts or a batch> to take the {self.mode} "
                             f"from: write Ablation({self.mode!r}, reference=texts)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"seed must be an int, got {self.seed!r}")

    @classmethod
    def of(cls, value: "Ablation | str | None") -> "Ablation":
        """``value`` as an :class:`Ablation`: itself, ``Ablation(mode)`` for a mode name, or zero
        ablation for ``None``."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(value)
        raise TypeError(f"ablation must be an Ablation (or a mode name), got {type(value).__name__}: "
                        "write ablation=Ablation('mean', reference=texts)")

    def replacements(self, hm, layers: Sequence[int], base_batch: int | None = None) -> dict | None:
        """What replaces an ablated head's ``z`` in each of ``layers`` (see :meth:`HeadModel.replacements`)."""
        return hm.replacements(self.mode, self.reference, layers, seed=self.seed, base_batch=base_batch)

    def __repr__(self) -> str:
        parts = [repr(self.mode)]
        if self.reference is not None:
            parts.append("reference=...")
        if self.seed:
            parts.append(f"seed={self.seed}")
        return f"Ablation({', '.join(parts)})"


def _shown(value: Any) -> str:
    """A keyword value as the warning shows it: literals as written, anything else as ``...``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    return getattr(value, "__name__", "...")


def upgrade_arguments(function: str, legacy: dict[str, Any], *, ablation: Any = None, metric: Any = None,
                      takes: Sequence[str] = ("ablation", "metric")) -> tuple[Ablation | None, Any]:
    """The ``(ablation, metric)`` values of a call that may still use headlab 0.1's keyword arguments.

    ``legacy`` holds the keyword arguments ``function`` received beyond its own parameters. The 0.1
    names (``mode``, ``reference``, ``seed`` for the ablation; ``kind``, ``loss_mask`` for the
    metric) are turned into an :class:`Ablation` and a :class:`~headlab.metrics.Metric`, with a
    ``DeprecationWarning`` that shows the new call; they go in headlab 0.3.

    Args:
        function: the name of the function being called, for the messages.
        legacy: its extra keyword arguments.
        ablation: the ``ablation=`` it was given (``None``: zero ablation).
        metric: the ``metric=`` it was given (``None``: the model's default metric).
        takes: which of ``"ablation"`` and ``"metric"`` the function accepts.

    Returns:
        ``(Ablation or None, Metric or None)``: ``None`` for a value the function does not take.

    Raises:
        TypeError: an unknown keyword argument, or both a value and the 0.1 arguments it replaces.
    """
    from headlab.metrics import Metric

    allowed = [k for kind, keys in (("ablation", _ABLATION_KEYWORDS), ("metric", _METRIC_KEYWORDS))
               if kind in takes for k in keys]
    unknown = sorted(set(legacy) - set(allowed))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    old_ablation = {k: legacy[k] for k in _ABLATION_KEYWORDS if k in legacy}
    old_metric = {k: legacy[k] for k in _METRIC_KEYWORDS if k in legacy}
    if old_ablation and ablation is not None:
        raise TypeError(f"{function}(): give either ablation= or {'/'.join(old_ablation)}=, not both")
    if old_metric and metric is not None:
        raise TypeError(f"{function}(): give either metric= or {'/'.join(old_metric)}=, not both")
    if old_ablation:
        ablation = Ablation(old_ablation.get("mode", "zero"), old_ablation.get("reference"),
                            old_ablation.get("seed", 0))
    if old_metric:
        metric = Metric(old_metric.get("kind"), loss_mask=old_metric.get("loss_mask"))
    if legacy:
        new = []
        if old_ablation:
            args = [repr(ablation.mode)] + [f"{k}={_shown(old_ablation[k])}" for k in ("reference", "seed")
                                            if k in old_ablation]
            new.append(f"ablation=Ablation({', '.join(args)})")
        if old_metric:
            args = [_shown(old_metric["kind"])] if "kind" in old_metric else []
            args += [f"loss_mask={_shown(old_metric['loss_mask'])}"] if "loss_mask" in old_metric else []
            new.append(f"metric=Metric({', '.join(args)})")
        old = ", ".join(f"{k}=" for k in legacy)
        imports = [f"`from {module} import {name}`" for module, name, used in (
            ("headlab.heads.ablation", "Ablation", old_ablation), ("headlab.metrics", "Metric", old_metric)) if used]
        warnings.warn(f"{function}({old}...) is deprecated and goes in {_REMOVAL}: write "
                      f"{function}(..., {', '.join(new)}) with {' and '.join(imports)}",
                      DeprecationWarning, stacklevel=3)
    out_ablation = Ablation.of(ablation) if "ablation" in takes else None
    out_metric = Metric.of(metric) if "metric" in takes else None
    return out_ablation, out_metric
