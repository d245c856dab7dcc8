"""Score every head of a model without materializing a single attention pattern.

:func:`streaming_head_scores` returns what :func:`~headlab.analysis.detect.head_scores`
returns (to float32 rounding), from the per-query statistics of
:func:`~headlab.kernels.streaming.fused_attention`: memory O(n), not O(n^2).
Inside :func:`streamed` every attention layer runs the fused kernel; the gate before
``W_O`` is untouched, so ablations and captures still work.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

from headlab.analysis.detect import LOCAL_WINDOW, HeadScores, scores_to_compute, token_masks
from headlab.analysis.detect.registry import pattern_scores, score, score_from_per_query
from headlab.kernels.statistics import HeadStatistics, StatInputs, statistic_inputs
from headlab.kernels.streaming import fused_attention
from headlab.heads.head import format_head, parse_head

__all__ = ["streamed", "streaming_head_scores", "scores_from_statistics", "uniform_statistics", "label_changes"]


class _Recorder:
    """The session object: runs the fused kernel for each layer and keeps its statistics."""

    def __init__(self, hm, statistics: StatInputs | None, backend: str, block_size: int | None):
        self.layer_of = {id(m): layer for layer, block in enumerate(hm.blocks) for m in block.modules()}
        self.statistics, self.backend, self.block_size = statistics, backend, block_size
        self.recorded: dict[int, HeadStatistics] = {}

    def attend(self, module, q, k, v, key_mask, causal, scale):
        layer = self.layer_of.get(id(module))
        stats = self.statistics if layer is not None else None
        if stats is not None and stats.shape != (q.shape[0], q.shape[2]):
            raise ValueError(f"the statistics' inputs are (batch, n) = {stats.shape} but layer {layer} runs "
                             f"{(q.shape[0], q.shape[2])}: give streamed() the StatInputs of the batch being run")
        out, recorded = fused_attention(q, k, v, causal=causal, key_mask=key_mask, statistics=stats, scale=scale,
                                        backend=self.backend, block_size=self.block_size)
        if recorded is not None:
            self.recorded[layer] = recorded
        return out


@contextlib.contextmanager
def streamed(hm, statistics: StatInputs | None = None, *, backend: str = "auto",
             block_size: int | None = None) -> Iterator[dict[int, HeadStatistics]]:
    """Inside the block, every attention layer of ``hm`` runs the fused kernel; yields ``layer -> statistics``.

    ``statistics``: the :class:`~headlab.kernels.statistics.StatInputs` of the batch that will
    run; None: nothing recorded. ``backend``, ``block_size``: as for
    :func:`~headlab.kernels.streaming.fused_attention`. The model's adapter installs the kernel
    (``Architecture.fused_attention`` in :mod:`headlab.heads.adapters`); afterwards the model is as before.
    """
    recorder = _Recorder(hm, statistics, backend, block_size)
    with hm.arch.fused_attention(hm.model, recorder):  # the adapter's switch, undone on exit
        yield recorder.recorded


# ------------------------------------------------------------------- scores from statistics


def scores_from_statistics(stats: HeadStatistics, inputs: StatInputs,
                           names: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
    """Pattern scores from streamed statistics, ``name -> (batch, head)``, for each registered
    score (or those in ``names``) whose statistic was streamed; NaN with no eligible query."""
    values = stats.values.float()  # (batch, head, n, statistic)
    out = {}
    for name in pattern_scores() if names is None else names:
        entry = score(name)
        if entry.stream in stats.names:
            per_query = values[..., stats.names.index(entry.stream)]  # (batch, head, n)
            out[name] = score_from_per_query(entry, per_query, inputs)
    return out


def uniform_statistics(inputs: StatInputs) -> HeadStatistics:
    """The statistics of *uniform* attention (all-zero queries) on these inputs, one head, O(n)."""
    batch, n = inputs.shape
    zeros = torch.zeros(batch, 1, n, 1, device=inputs.key_real.device)
    _, stats = fused_attention(zeros, zeros, zeros, causal=inputs.causal, statistics=inputs, backend="tiled")
    return stats


# ------------------------------------------------------------------------ a model's heads


def streaming_head_scores(hm, inputs, *, scores: Sequence[str] | None = None, batch_size: int = 32,
                          window: int = LOCAL_WINDOW, token_frequency: torch.Tensor | None = None,
                          backend: str = "auto", block_size: int | None = None) -> HeadScores:
    """:func:`~headlab.analysis.detect.head_scores`, streamed: no attention pattern is ever held.

    Same arguments and result (``copying_dla`` is left out with a note), plus ``backend`` and
    ``block_size`` of :func:`~headlab.kernels.streaming.fused_attention`.
    """
    wanted, notes = scores_to_compute(
        hm, scores, token_frequency, default=pattern_scores() + ("write_norm",),
        unavailable={"copying_dla": "not streamed: it needs each head's pattern and write together"})
    frequency = None if token_frequency is None else torch.as_tensor(token_frequency, dtype=torch.float64)
    per_input: dict[str, list[torch.Tensor]] = {name: [] for name in wanted}
    uniform: dict[str, list[torch.Tensor]] = {name: [] for name in wanted if name in pattern_scores()}
    for batch in hm.batches(inputs, batch_size):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        masks = token_masks(hm.tokenizer, ids.cpu()) if hm.tokenizer is not None else {}
        stat_inputs = statistic_inputs(mask, causal=hm.causal, tokens=ids, window=window,
                                       separator=masks.get("separator"), punctuation=masks.get("punctuation"),
                                       frequency=None if frequency is None else frequency[ids.cpu()])
        capture = hm.capture(("z",)) if "write_norm" in wanted else contextlib.nullcontext()
        with torch.no_grad(), streamed(hm, stat_inputs, backend=backend, block_size=block_size) as recorded, \
                capture as cache:
            hm.forward(batch)
        patterns = [name for name in wanted if name != "write_norm"]
        layers = [scores_from_statistics(recorded[layer], stat_inputs, patterns) for layer in range(hm.n_layers)]
        chance = scores_from_statistics(uniform_statistics(stat_inputs), stat_inputs, patterns)
        real = mask.to(torch.float32).cpu()
        for name in wanted:
            if name == "write_norm":
                norms = torch.stack([cache.result(layer).float().cpu().norm(dim=-1).transpose(1, 2)
                                     for layer in range(hm.n_layers)], dim=1)  # (batch, layer, head, pos)
                per_input[name].append((norms * real[:, None, None]).sum(-1) / real.sum(-1)[:, None, None])
                continue
            per_input[name].append(torch.stack([scores[name].cpu() for scores in layers], dim=1))
            uniform[name].append(chance[name][:, 0].cpu())
    return HeadScores({n: torch.cat(v) for n, v in per_input.items()},
                      {n: torch.cat(v).double() for n, v in uniform.items()},
                      hm.n_layers, hm.n_heads, notes)


def label_changes(before: dict, after: dict) -> list[dict]:
    """Heads whose atlas label differs between two atlases of one model (e.g. two context lengths).

    Returns ``[{"head": "L.H", "before": label, "after": label}, ...]`` in head order.
    """
    if (before.get("n_layers"), before.get("n_heads")) != (after.get("n_layers"), after.get("n_heads")):
        raise ValueError("the two atlases describe models of different shapes")
    labels = {tuple(parse_head(e["head"])): e["label"] for e in before["heads"]}
    changes = []
    for entry in after["heads"]:
        key = tuple(parse_head(entry["head"]))
        if labels[key] != entry["label"]:
            changes.append({"head": format_head(key), "before": labels[key], "after": entry["label"]})
    return changes

