"""Measurements of the indirect-object task on a model, through headlab's tools.

Every function takes a :class:`~headlab.heads.model.HeadModel` and
:class:`~deviating.data.ioi.prompts.IoiPrompts` (and their ABC twins where a corrupted run is
needed) and returns tensors with a head axis ``(n_layers, n_heads)``; nothing is averaged over
prompts before the caller asks, except where a function says so. The metric throughout is
``logit(IO) - logit(S)`` at END (:class:`IoiMetric`).

* :func:`logit_diffs`: the metric per prompt (optionally with heads removed);
* :func:`head_dla`: each head's direct share of the metric (headlab's direct logit attribution);
* :func:`patch_heads`, :func:`patch_head_positions`: activation patching of the ABC run into the
  clean one (noising), per head and per head at each named position;
* :func:`path_patch_senders`: path patching from every earlier head into one receiver's query,
  key or value;
* :func:`attention_scores`: each head's attention between the ground-truth positions;
* :func:`effect_fraction`: how a patched metric compares with the clean and corrupted ones.
"""

from __future__ import annotations

from typing import Iterable

import torch

from deviating.data.ioi.prompts import IoiPrompts, corrupt_abc, logit_diff, make_prompts
from deviating.data.ioi.windows import IoiSplit
from headlab.analysis.lens import direct_logit_attribution
from headlab.analysis.patching import activation_patch, path_patch
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.heads.model import HeadModel
from headlab.metrics import Metric

__all__ = ["evaluation_prompts", "NAMED_POSITIONS", "IoiMetric", "prompt_batch", "logit_diffs", "head_dla", "patch_heads",
           "patch_head_positions", "path_patch_senders", "attention_scores", "ATTENTION_EDGES", "effect_fraction"]

NAMED_POSITIONS = ("IO", "S1", "S1+1", "S2", "END")
# (query position, key position) pairs read by attention_scores
ATTENTION_EDGES = {"END->IO": ("END", "IO"), "END->S1": ("END", "S1"), "END->S2": ("END", "S2"),
                   "S2->S1": ("S2", "S1"), "S2->S1+1": ("S2", "S1+1"), "S1+1->S1": ("S1+1", "S1")}


def _position(prompts: IoiPrompts, name: str) -> torch.Tensor:
    if name == "S1+1":
        return prompts.pos["S1"] + 1
    if name not in prompts.pos:
        raise ValueError(f"unknown position {name!r}: choose from {', '.join(NAMED_POSITIONS)}")
    return prompts.pos[name]


def evaluation_prompts(hm: HeadModel, n: int = 128, seed: int = 0) -> tuple[IoiPrompts, IoiPrompts]:
    """``(clean, abc)``: ``n`` prompts of the names that ``hm`` (an ``ioi-gpt`` checkpoint) never saw
    in an indirect-object sentence, in its *training* templates, drawn with ``seed``, and their ABC
    twins (drawn with ``seed + 1`` from the same held-out names).

    The circuit is read where the model does the task: the shipped seeds get 0.98 and 0.995 of
    these prompts right, against 0.74 and 0.59 with held-out templates as well (their recipe's
    docstring), where a head's share of an answer the model mostly misses would mean little."""
    split = IoiSplit.from_provenance(hm.provenance)
    clean = make_prompts(hm.tokenizer, split.heldout_names, split.train_templates, n, seed)
    return clean, corrupt_abc(hm.tokenizer, clean, split.heldout_names, seed + 1)


def prompt_batch(prompts: IoiPrompts) -> dict[str, torch.Tensor]:
    """The prompts as a batch for :meth:`HeadModel.tokenize`: ``input_ids`` and an ``attention_mask``
    that is 1 up to each prompt's END (so position ``-1`` of headlab's metrics is END)."""
    n, length = prompts.tokens.shape
    mask = (torch.arange(length)[None, :] <= prompts.pos["END"][:, None]).long()
    return {"input_ids": prompts.tokens, "attention_mask": mask}


class IoiMetric:
    """``logit(IO) - logit(S)`` at END, one value per row: a headlab metric
    (``metric(output, batch) -> (rows,)``) that reads each row's prompt through ``batch["index"]``
    (the row's prompt when a patching run tiles the batch)."""

    __name__ = "logit_diff"

    def __init__(self, prompts: IoiPrompts):
        self.prompts = prompts

    def __call__(self, output: torch.Tensor, batch) -> torch.Tensor:
        index = batch.get("index", torch.arange(len(output), device=output.device)).cpu()
        if int(index.max()) >= len(self.prompts):
            raise ValueError(f"the batch has rows for {int(index.max()) + 1} prompts, the metric knows {len(self.prompts)}")
        rows = torch.arange(len(output), device=output.device)
        end = output[rows, self.prompts.pos["END"][index].to(output.device)].float()
        return end[rows, self.prompts.io_id[index].to(output.device)] - end[rows, self.prompts.s_id[index].to(output.device)]


@torch.no_grad()
def logit_diffs(hm: HeadModel, prompts: IoiPrompts, removed: Iterable[Head] = (),
                ablation: Ablation | None = None) -> torch.Tensor:
    """The metric per prompt ``(n,)``, with the heads ``removed`` ablated (``ablation``, default zero)."""
    removed = list(removed)
    if not removed:
        return logit_diff(hm.forward(prompt_batch(prompts)), prompts).float().cpu()
    with hm.ablate(removed, ablation):
        return logit_diff(hm.forward(prompt_batch(prompts)), prompts).float().cpu()


def head_dla(hm: HeadModel, prompts: IoiPrompts) -> torch.Tensor:
    """Each head's direct share of ``logit(IO) - logit(S)`` at END, per prompt: ``(n, n_layers, n_heads)``
    (headlab's :func:`~headlab.analysis.lens.direct_logit_attribution`, one prompt at a time since each
    has its own pair of names; the final norm's scale is frozen at its value on the run). Inside
    ``hm.ablate(...)`` the ablated heads' shares are 0 and the others' are measured on the ablated run."""
    batch = prompt_batch(prompts)
    out = torch.empty(len(prompts), hm.n_layers, hm.n_heads, dtype=torch.float64)
    for i in range(len(prompts)):
        one = {k: v[i:i + 1, :int(prompts.pos["END"][i]) + 1] for k, v in batch.items()}
        att = direct_logit_attribution(hm, one, (int(prompts.io_id[i]), int(prompts.s_id[i])), pos=-1)
        out[i] = att.heads[0].cpu()
    return out


def effect_fraction(patched: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    """``(mean(patched) - mean(clean)) / (mean(clean) - mean(corrupted))`` over the prompt axis (the
    first): 0 when a patch changes nothing, -1 when it takes the whole gap between the clean and the
    corrupted run away. Means are taken before the ratio, so a prompt whose clean and corrupted
    metrics nearly agree cannot blow the ratio up."""
    gap = float(clean.mean() - corrupted.mean())
    if abs(gap) < 1e-6:
        raise ValueError("the clean and corrupted runs have the same mean metric: nothing to patch")
    return (patched.mean(0) - clean.mean()) / gap


def _ends(hm: HeadModel, clean: IoiPrompts, corrupted: IoiPrompts) -> tuple[torch.Tensor, torch.Tensor]:
    return logit_diffs(hm, clean), logit_diff(hm.forward(prompt_batch(corrupted)), clean).float().cpu()


@torch.no_grad()
def patch_heads(hm: HeadModel, clean: IoiPrompts, corrupted: IoiPrompts) -> torch.Tensor:
    """Activation patching (noising) per head: each head's ``z`` on the corrupted (ABC) run put
    into the clean run, at every position; the :func:`effect_fraction` ``(n_layers, n_heads)``."""
    values = activation_patch(hm, prompt_batch(clean), prompt_batch(corrupted), "z", metric=Metric(IoiMetric(clean)))
    return effect_fraction(values, *_ends(hm, clean, corrupted))


@torch.no_grad()
def patch_head_positions(hm: HeadModel, clean: IoiPrompts, corrupted: IoiPrompts) -> torch.Tensor:
    """Activation patching (noising) of each head at one position at a time, read at the named
    positions (:data:`NAMED_POSITIONS`; the positions of a name differ from template to template):
    the :func:`effect_fraction` ``(n_layers, n_heads, len(NAMED_POSITIONS))``."""
    values = activation_patch(hm, prompt_batch(clean), prompt_batch(corrupted), "z", positions=True,
                              metric=Metric(IoiMetric(clean)))  # (n, L, H, pos)
    rows = torch.arange(len(clean))
    at = torch.stack([values[rows, :, :, _position(clean, p)] for p in NAMED_POSITIONS], -1)  # (n, L, H, P)
    return effect_fraction(at, *_ends(hm, clean, corrupted))


@torch.no_grad()
def path_patch_senders(hm: HeadModel, clean: IoiPrompts, corrupted: IoiPrompts, receiver: Head,
                       inputs: Iterable[str] = ("q", "k", "v")) -> torch.Tensor:
    """Path patching into one receiver: for every head of an earlier layer (the *sender*), its
    corrupted output reaches only the receiver's ``input`` (query, key or value) directly; the
    :func:`effect_fraction` per sender and input, ``(len(inputs), n_layers, n_heads)`` (0 for heads
    in the receiver's layer and above, which cannot send to it)."""
    layer = hm.check_heads([receiver])[0][0]
    inputs = list(inputs)
    a, b = prompt_batch(clean), prompt_batch(corrupted)
    ends = _ends(hm, clean, corrupted)
    out = torch.zeros(len(inputs), hm.n_layers, hm.n_heads)
    for i, which in enumerate(inputs):
        for sl in range(layer):
            for sh in range(hm.n_heads):
                values = path_patch(hm, a, b, (sl, sh), receiver, which, metric=Metric(IoiMetric(clean)))
                out[i, sl, sh] = effect_fraction(values, *ends)
    return out


@torch.no_grad()
def attention_scores(hm: HeadModel, prompts: IoiPrompts) -> dict[str, torch.Tensor]:
    """Each head's mean attention, over prompts, from one ground-truth position to another
    (:data:`ATTENTION_EDGES`, e.g. ``"END->IO"``: from END to the IO token): ``(n_layers, n_heads)`` each."""
    rows = torch.arange(len(prompts))
    with hm.capture(("pattern",)) as cache:
        hm.forward(prompt_batch(prompts))
    patterns = torch.stack([cache.pattern(l).float().cpu() for l in range(hm.n_layers)], 1)  # (n, L, H, q, k)
    out = {}
    for edge, (q, k) in ATTENTION_EDGES.items():
        out[edge] = patterns[rows, :, :, _position(prompts, q), _position(prompts, k)].mean(0)
    return out
