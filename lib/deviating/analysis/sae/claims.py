"""Claim C15 measured with SAEs trained at several seeds: how many heads are polysemantic, and how
many features an SAE finds that another SAE seed finds again.

Both are claims about the dictionary as much as about the model, so every number here is given
per SAE seed (the seed of the SAE's training; the model is one trained model):

* :func:`stable_features`: for each seed, the live features whose decoder direction has a
  near-identical twin (cosine above a threshold) in *every* other seed's SAE; a feature that only
  one optimisation finds is a property of that optimisation;
* :func:`c15_row`: the ledger row "SAEs find more features than heads": the stable features
  against the number of dimensions the SAE reads. Any basis of the layer has as many directions as
  it has dimensions (8 heads of 16 give 128), so more features than *heads* is no finding; more
  stable features than dimensions would be.

"Most heads are polysemantic" is not judged: with 8 heads only 8 of 8 can exclude one half
(``deviating.ledger.REMOVED`` says why); the chapter shows the counts per SAE seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from headlab import stats
from deviating.verdicts import ClaimRow, Measurement

__all__ = ["stable_features", "count_interval", "c15_row"]


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


def c15_row(model: str, n_dims: int, n_heads: int, stable: dict[str, Sequence], seeds: Sequence[int]) -> ClaimRow:
    """The ledger row of C15: live features that every other SAE seed finds again, per SAE seed and
    twin threshold, against ``n_dims``, the dimensions the SAE reads.

    Args:
        model: the model and layer, in words.
        n_dims: the width of what the SAE reads (the layer's ``n_heads * d_head``).
        n_heads: the layer's heads (for the wording).
        stable: threshold name -> ``(k, n_alive)`` per SAE seed, from :func:`stable_features`.
        seeds: the SAE seeds, in the order of the lists.
    """
    seeds = list(seeds)
    if n_dims % n_heads:
        raise ValueError(f"n_dims = {n_dims} is not n_heads = {n_heads} heads of equal width")
    ms = []
    for name, pairs in stable.items():
        if len(pairs) != len(seeds):
            raise ValueError(f"{name}: {len(pairs)} counts for {len(seeds)} SAE seeds")
        for seed, (k, n) in zip(seeds, pairs):
            low, high = count_interval(k, n)
            ms.append(Measurement(f"twin in every other SAE seed, {name}", float(k), low, high, n, seed))
    first = next(iter(stable))
    headline = Measurement.from_estimate(stats.over_seeds([k for k, _ in stable[first]]),
                                         f"twin in every other SAE seed, {first}, mean over SAE seeds")
    return ClaimRow("C15", model, "live features that every other SAE seed finds again", float(n_dims),
                    f"as many as the {n_dims} dimensions the SAE reads ({n_heads} heads of {n_dims // n_heads})",
                    "greater", tuple(ms), headline=headline, unit="count",
                    note="seeds are the SAEs' training seeds; interval: the exact interval of the stable share, "
                         "times the live features")
