"""The streamed statistics, one entry each: which keys a query's *mass* sums its weights over.

Every statistic but ``entropy`` and ``max_weight`` is a mass: query ``i``'s weights summed
over the allowed keys ``j`` of a :class:`KeySet`, a conjunction of conditions on ``(i, j)``
that every backend evaluates (``key_set_mask``, or the Triton kernel's ``spec_table``). A
new statistic is one :func:`register_statistic` call:

* ``lo <= j - i <= hi`` (either bound may be None: unbounded);
* ``|j - i| <= window`` when ``within_window`` (the window of the :class:`StatInputs`);
* ``j != i`` when ``not_self``;
* the key carries the bit ``key_flag`` of ``StatInputs.key_flags`` (0: no condition);
* ``match = (key_field, query_field)``: a per-position integer of the key equals one of the
  query; fields are ``MATCH_FIELDS`` (``"position"`` is the index itself, ``"first"`` the
  input's first real position).

The statistics in order, :func:`statistic_names`: ``entropy``, ``max_weight``, then the masses
in registration order (the built-ins of ``BUILTIN_KEY_SETS`` first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["KeySet", "SEPARATOR_BIT", "PUNCTUATION_BIT", "MATCH_FIELDS", "NON_MASS", "BUILTIN_KEY_SETS",
           "register_statistic", "unregister_statistic", "statistic_names", "mass_names", "key_set",
           "key_set_mask", "spec_table", "SPEC_COLUMNS", "UNBOUNDED"]

#: Bits of ``StatInputs.key_flags``.
SEPARATOR_BIT, PUNCTUATION_BIT = 1, 2
#: The per-position integers a :class:`KeySet` can match a key's against a query's.
MATCH_FIELDS = ("tokens", "rare_class", "rare_target", "induction_target", "first", "position")
#: The statistics that are not masses (computed from the softmax's running sums themselves).
NON_MASS = ("entropy", "max_weight")
#: What stands for "no bound" in ``spec_table``'s ``lo`` and ``hi`` columns.
UNBOUNDED = 1 << 30
SPEC_COLUMNS = ("lo", "hi", "within_window", "not_self", "key_flag", "key_field", "query_field")


@dataclass(frozen=True)
class KeySet:
    """The keys ``j`` a query ``i``'s mass sums over (every condition must hold; see the module docstring)."""

    lo: int | None = None
    hi: int | None = None
    within_window: bool = False
    not_self: bool = False
    key_flag: int = 0
    match: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or abs(value) >= UNBOUNDED):
                raise ValueError(f"KeySet.{name} must be an int offset j - i (or None), got {value!r}")
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise ValueError(f"KeySet has lo={self.lo} > hi={self.hi}: no key could ever count")
        if self.key_flag not in (0, SEPARATOR_BIT, PUNCTUATION_BIT):
            raise ValueError(f"KeySet.key_flag must be 0, SEPARATOR_BIT or PUNCTUATION_BIT, got {self.key_flag!r}")
        if self.match is not None:
            if not (isinstance(self.match, tuple) and len(self.match) == 2
                    and all(f in MATCH_FIELDS for f in self.match)):
                raise ValueError(f"KeySet.match must be a (key_field, query_field) pair of {MATCH_FIELDS}, "
                                 f"got {self.match!r}")


#: The built-in masses, in column order (after ``entropy`` and ``max_weight``); see
#: :mod:`headlab.kernels.statistics` for what each one means.
BUILTIN_KEY_SETS = {
    "previous_token": KeySet(lo=-1, hi=-1),
    "next_token": KeySet(lo=1, hi=1),
    "self": KeySet(lo=0, hi=0),
    "first_token": KeySet(match=("position", "first")),
    "local": KeySet(within_window=True),
    "duplicate_token": KeySet(hi=-1, match=("tokens", "tokens")),
    "induction": KeySet(match=("position", "induction_target")),
    "separator": KeySet(key_flag=SEPARATOR_BIT),
    "punctuation": KeySet(key_flag=PUNCTUATION_BIT),
    "rare_token": KeySet(not_self=True, match=("rare_class", "rare_target")),
}
_KEY_SETS: dict[str, KeySet] = dict(BUILTIN_KEY_SETS)


def register_statistic(name: str, keys: KeySet) -> None:
    """Add the mass ``name`` over ``keys``: every backend streams it from the next call on.

    Raises:
        ValueError: ``name`` is taken (a built-in, or registered before with other keys).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a statistic's name must be an identifier, got {name!r}")
    if not isinstance(keys, KeySet):
        raise TypeError(f"keys must be a headlab.kernels.keysets.KeySet, got {type(keys).__name__}")
    if name in NON_MASS or (name in _KEY_SETS and _KEY_SETS[name] != keys):
        raise ValueError(f"statistic {name!r} already exists; choose another name")
    _KEY_SETS[name] = keys


def unregister_statistic(name: str) -> None:
    """Remove a statistic added by :func:`register_statistic` (built-ins stay)."""
    if name in BUILTIN_KEY_SETS or name in NON_MASS:
        raise ValueError(f"{name!r} is a built-in statistic; it cannot be removed")
    if name not in _KEY_SETS:
        raise KeyError(f"no registered statistic {name!r}")
    del _KEY_SETS[name]


def mass_names() -> tuple[str, ...]:
    """The masses, in column order."""
    return tuple(_KEY_SETS)


def statistic_names() -> tuple[str, ...]:
    """Every float column of the statistics tensor, in order: ``entropy``, ``max_weight``, the masses."""
    return NON_MASS + mass_names()


def key_set(name: str) -> KeySet:
    """The :class:`KeySet` of the mass ``name``."""
    if name not in _KEY_SETS:
        raise KeyError(f"no mass statistic {name!r}; the masses are {', '.join(_KEY_SETS)}")
    return _KEY_SETS[name]


def _field(inputs, name: str, index: torch.Tensor) -> torch.Tensor:
    """``(batch or 1, len(index))``: the per-position integer ``name`` at positions ``index``."""
    if name == "position":
        return index[None, :]
    if name == "first":
        return inputs.first[:, None].expand(-1, index.shape[0])
    return getattr(inputs, name)[:, index]


def key_set_mask(keys: KeySet, inputs, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``(batch or 1, len(rows), len(cols))`` bool: whether key ``cols[b]`` counts for query ``rows[a]``.

    ``inputs``: the :class:`~headlab.kernels.statistics.StatInputs` of the batch. Whether the key is
    *allowed* (real, and ``j <= i`` when causal) is not part of it: the weight of a key that is not
    allowed is 0.
    """
    offset = cols[None, :] - rows[:, None]  # (bq, bk): j - i
    where = torch.ones_like(offset, dtype=torch.bool)
    if keys.lo is not None:
        where = where & (offset >= keys.lo)
    if keys.hi is not None:
        where = where & (offset <= keys.hi)
    if keys.within_window:
        where = where & (offset.abs() <= inputs.window)
    if keys.not_self:
        where = where & (offset != 0)
    where = where[None]
    if keys.key_flag:
        where = where & ((inputs.key_flags[:, cols] & keys.key_flag) != 0)[:, None, :]
    if keys.match is not None:
        key_field, query_field = keys.match
        where = where & (_field(inputs, key_field, cols)[:, None, :] == _field(inputs, query_field, rows)[:, :, None])
    return where


def spec_table(names: tuple[str, ...], device) -> torch.Tensor:
    """``(len(names), len(SPEC_COLUMNS))`` int32: the key sets of the masses ``names`` as the Triton
    kernel reads them. A match field is its row in the kernel's side input (``MATCH_FIELDS`` order,
    after the key mask and the flags); no match is ``key_field = query_field = len(MATCH_FIELDS)``, a
    row of zeros."""
    rows = []
    for name in names:
        keys = key_set(name)
        key_field, query_field = ((MATCH_FIELDS.index(keys.match[0]), MATCH_FIELDS.index(keys.match[1]))
                                  if keys.match is not None else (len(MATCH_FIELDS), len(MATCH_FIELDS)))
        rows.append([-UNBOUNDED if keys.lo is None else keys.lo, UNBOUNDED if keys.hi is None else keys.hi,
                     int(keys.within_window), int(keys.not_self), keys.key_flag, key_field, query_field])
    return torch.tensor(rows, dtype=torch.int32, device=device).reshape(len(names), len(SPEC_COLUMNS))
