"""How a head is removed: the :class:`Ablation` value, passed as one argument.

Every measurement that removes heads (:func:`headlab.analysis.sweep.sweep`, the importance and
pruning functions, the circuit checks, :meth:`HeadModel.ablate`) takes *how* to remove them as one
value instead of three loose parameters::

    Ablation()                                   # zero ablation: the head's output becomes 0
    Ablation("mean", reference=texts)            # its mean over every real token of ``texts``
    Ablation("resample", reference=texts, seed=1)  # its output at the same position of a random text

The value is checked when it is made, so a mistake is reported where it was written rather than
deep inside a sweep. (headlab 0.1's loose keyword arguments ``mode=``, ``reference=``, ``seed=``
were removed in 0.2.0; see CHANGELOG.md.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["ABLATION_MODES", "Ablation"]

ABLATION_MODES = ("zero", "mean", "resample")


@dataclass(frozen=True, eq=False)
class Ablation:
    """How to remove a head: what its output ``z`` is replaced by before ``W_O``.

    Attributes:
        mode: ``"zero"`` (by 0), ``"mean"`` (by its mean over every real token of
            ``reference``) or ``"resample"`` (at each position, by its output at the same
            position of a ``reference`` input drawn at random among those long enough).
        reference: texts or a batch (anything :meth:`HeadModel.tokenize` reads) for ``"mean"``
            and ``"resample"``; ``None`` for ``"zero"``. A model reads it once per ``Ablation``
            object for ``"mean"`` and keeps the means until its weights change, so a loop of
            ablations pays for one reference forward; to change the texts, make a new ``Ablation``
            (changing the list in place goes unseen).
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
        raise TypeError(f"ablation must be an Ablation (or a mode name), got {type(value).__name__} "
                        f"{value!r:.60}: write Ablation('mean', reference=texts)")

    def __repr__(self) -> str:
        parts = [repr(self.mode)]
        if self.reference is not None:
            parts.append("reference=...")
        if self.seed:
            parts.append(f"seed={self.seed}")
        return f"Ablation({', '.join(parts)})"
