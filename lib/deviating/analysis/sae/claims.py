"""Claim C15 measured with SAEs trained at several seeds: how many heads are polysemantic, and how
many features an SAE finds that another SAE seed finds again.

Both are claims about the dictionary as much as about the model, so every number here is given
per SAE seed (the seed of the SAE's training; the model is one trained model):

* :func:`stable_features`: for each seed, the live features whose decoder direction has a
  near-identical twin (cosine above a threshold) in *every* other seed's SAE; a feature that only
  one optimisation finds is a property of that optimisation;
* :func:`c15_rows`: the two ledger rows, "most heads are polysemantic" (the share of heads, with
  an exact interval over the heads, against one half) and "SAEs find more features than heads"
  (the stable features, against the number of heads).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from headlab import stats
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["stable_features", "count_interval", "c15_rows"]


def _unit(rows: torch.Tensor) -> torch.Tensor:
    norms = rows.norm(dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError("a decoder direction has norm 0: it is no direction")
    return rows / norms


def stable_features(decoders: Sequence[torch.Tensor], alive: Sequence[torch.Tensor],
                    threshold: float) -> list[tuple[int, int]]:
    """For each SAE (one per seed): ``(k, n_alive)``, the live features whose best cosine with the
    decoder directions of every *other* SAE exceeds ``threshold``, and the number of live features.

    Args:
        decoders: ``(n_features, d)`` decoder directions of each SAE (any lengths).
        alive: ``(n_features,)`` bool masks of the features that fire on the held-out text.
        threshold: the cosine a twin must exceed, in (-1, 1).
    """
    if len(decoders) < 2 or len(decoders) != len(alive):
        raise ValueError(f"give at least two SAEs and one alive mask each; got {len(decoders)} decoders and "
                         f"{len(alive)} masks")
    if not -1 < threshold < 1:
        raise ValueError(f"threshold must be a cosine in (-1, 1); got {threshold}")
    units = [_unit(d.detach().float()) for d in decoders]
    out = []
    for i, (u, a) in enumerate(zip(units, alive)):
        live = u[a.bool()]
        ok = torch.ones(len(live), dtype=torch.bool)
        for j, other in enumerate(units):
            if j != i:
                ok &= (live @ other.T).max(dim=1).values > threshold
        out.append((int(ok.sum()), int(len(live))))
    return out


def count_interval(k: int, n: int) -> tuple[float, float]:
    """A 95% interval for a count ``k`` of ``n`` units: ``n`` times the exact interval of ``k / n``."""
    est = stats.proportion(k, n)
    return est.low * n, est.high * n


def c15_rows(model: str, n_heads: int, polysemantic: dict[str, Sequence[int]], stable: dict[str, Sequence],
             seeds: Sequence[int]) -> list[ClaimRow]:
    """The ledger rows of C15.

    Args:
        model: the model and layer, in words.
        n_heads: the layer's heads.
        polysemantic: reading -> polysemantic heads per SAE seed (e.g. ``{"layer SAE": [3, 4, 3]}``).
        stable: threshold name -> ``(k, n_alive)`` per SAE seed, from :func:`stable_features`.
        seeds: the SAE seeds, in the order of the lists.
    """
    seeds = list(seeds)
    rows = []
    ms = []
    for reading, counts in polysemantic.items():
        if len(counts) != len(seeds):
            raise ValueError(f"{reading}: {len(counts)} counts for {len(seeds)} SAE seeds")
        for seed, k in zip(seeds, counts):
            ms.append(Measurement.from_estimate(stats.proportion(int(k), n_heads), f"read with the {reading}", seed))
    first = next(iter(polysemantic.values()))
    headline = Measurement.from_estimate(stats.over_seeds([k / n_heads for k in first]),
                                         f"read with the {next(iter(polysemantic))}, mean over SAE seeds")
    rows.append(ClaimRow("C15", model, f"share of the {n_heads} heads that are polysemantic", 0.5,
                         "half the heads (\"most\")", "greater", tuple(ms), headline=headline,
                         note="seeds are the SAEs' training seeds; the interval is exact over the heads"))
    ms = []
    for name, pairs in stable.items():
        for seed, (k, n) in zip(seeds, pairs):
            low, high = count_interval(k, n)
            ms.append(Measurement(f"twin in every other SAE seed, {name}", float(k), low, high, n, seed))
    first = next(iter(stable))
    headline = Measurement.from_estimate(stats.over_seeds([k for k, _ in stable[first]]),
                                         f"twin in every other SAE seed, {first}, mean over SAE seeds")
    rows.append(ClaimRow("C15", model, "live features that every other SAE seed finds again", float(n_heads),
                         "as many features as heads", "greater", tuple(ms), headline=headline,
                         note="interval: the exact interval of the stable share, times the live features"))
    return rows
