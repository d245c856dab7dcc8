"""A causal LM's logits at one position, read as one number per input: a logit difference, a
probability, or the KL divergence from the clean run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from headlab.metrics.functions import positions

__all__ = ["LogitMetric", "LOGIT_SCORES"]

# score -> how many token ids it reads
LOGIT_SCORES = {"logit_diff": 2, "prob": 1, "kl": 0}


def _token_table(tokens, need: int, score: str) -> tuple[tuple[int, ...], torch.Tensor | None]:
    """``tokens`` as ``(shared ids, None)`` or ``((), per-input table (n_inputs, need))``."""
    if isinstance(tokens, torch.Tensor):
        if tokens.dtype in (torch.bool,) or tokens.is_floating_point() or tokens.is_complex():
            raise ValueError(f"{score!r} needs integer token ids, got a {tokens.dtype} tensor")
        table = tokens.long().cpu()
        if table.dim() == 1 and need:
            table = table[:, None]
        if table.dim() != 2 or table.shape[1] != need or len(table) == 0:
            raise ValueError(f"{score!r} reads {need} token id(s) per input: give a tuple of {need} ids for every "
                             f"input, or an (n_inputs, {need}) tensor, not a tensor of shape {tuple(tokens.shape)}")
        return (), table
    if not isinstance(tokens, Sequence) or isinstance(tokens, str):
        raise ValueError(f"{score!r}: tokens must be a tuple of {need} token ids or an (n_inputs, {need}) tensor, "
                         f"got {type(tokens).__name__} {tokens!r:.60}")
    if tokens and all(isinstance(t, Sequence) and not isinstance(t, str) for t in tokens):
        rows = [tuple(t) for t in tokens]
        if any(isinstance(i, bool) or not isinstance(i, int) for r in rows for i in r):
            raise ValueError(f"{score!r} needs integer token ids, got {tokens!r:.80}")
        bad = [i for i, r in enumerate(rows) if len(r) != need]
        if bad:
            raise ValueError(f"{score!r} needs {need} token id(s) per input; input {bad[0]} has {rows[bad[0]]!r}")
        return _token_table(torch.tensor(rows, dtype=torch.long), need, score)
    if len(tokens) != need or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
        raise ValueError(f"{score!r} needs {need} token id(s), got {tokens!r}: give ints (a True is not a token id)")
    return tuple(tokens), None


@dataclass(frozen=True, eq=False)
class LogitMetric:
    """A causal LM's logits at position ``pos`` of each row (:func:`~headlab.metrics.positions`), one number per row.

    ``score``: ``"logit_diff"`` (logit of the first token minus that of the second), ``"prob"``
    (probability of the token) or ``"kl"`` (``KL(clean || this run)`` of the next-token
    distributions, ``clean`` being the clean run's logits ``(n, pos, d_vocab)``).

    ``tokens``: the same ids for every input (``(t,)`` or ``(t1, t2)``), or one pair per input —
    a list of tuples or an ``(n_inputs, 2)`` tensor, as a task whose answer differs from prompt to
    prompt needs (each prompt's indirect object against its subject, say). Row ``r`` of a tiled
    batch reads input ``batch["index"][r]`` (a sweep's tiling); untiled, row ``r`` is input ``r``.

    Example::

        # one pair per prompt
        m = LogitMetric("logit_diff", [(io, s) for io, s in answers])
        activation_patch(hm, clean, corrupted, metric=m)

    Raises:
        ValueError: an unknown score, token ids that are not ints (``True`` is refused), a table
            of the wrong width, ``clean`` missing for ``"kl"`` or given for another score; when
            called, ids outside the vocabulary or a table with fewer rows than the inputs.
    """

    score: str
    tokens: object = ()
    pos: int = -1
    clean: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.score not in LOGIT_SCORES:
            raise ValueError(f"score must be one of {', '.join(map(repr, LOGIT_SCORES))}, not {self.score!r}")
        need = LOGIT_SCORES[self.score]
        shared, table = _token_table(self.tokens, need, self.score) if need else ((), None)
        if not need and (isinstance(self.tokens, torch.Tensor) or self.tokens):
            raise ValueError(f"'kl' reads no token ids, got {self.tokens!r:.60}")
        object.__setattr__(self, "tokens", shared)
        object.__setattr__(self, "table", table)
        if (self.clean is None) == (self.score == "kl"):
            raise ValueError("'kl' and only 'kl' needs the clean run's logits (clean=...)")
        if self.clean is not None and (not isinstance(self.clean, torch.Tensor) or self.clean.dim() != 3
                                       or not self.clean.is_floating_point()):
            raise ValueError(f"clean must be the clean run's logits, a float (n_inputs, pos, d_vocab) tensor, got "
                             f"{tuple(getattr(self.clean, 'shape', ())) or type(self.clean).__name__}")
        object.__setattr__(self, "__name__", self.score)  # the metric's name in results and messages

    def ids(self, batch: Mapping[str, torch.Tensor], rows: int) -> torch.Tensor:
        """The token ids each of ``rows`` rows reads, ``(rows, n_tokens)``."""
        if self.table is None:
            return torch.tensor(self.tokens, dtype=torch.long).expand(rows, len(self.tokens))
        index = batch.get("index")
        index = torch.arange(rows) if index is None else index.cpu()
        if int(index.max()) >= len(self.table):
            raise ValueError(f"the metric holds token ids for {len(self.table)} inputs, the batch has "
                             f"{int(index.max()) + 1}: give one pair per input")
        return self.table[index]

    def __call__(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """One value per row of ``output`` ``(rows, pos, d_vocab)``."""
        rows = torch.arange(len(output), device=output.device)
        at = positions(batch, self.pos).to(output.device)
        logits = output[rows, at].float()
        if self.score == "kl":
            index = batch.get("index", rows).to(output.device)
            if self.clean.shape[1:] != output.shape[1:] or int(index.max()) >= len(self.clean):
                raise ValueError(f"clean logits {tuple(self.clean.shape)} do not match this run's "
                                 f"{tuple(output.shape)} ({int(index.max()) + 1} inputs): give the clean run of "
                                 "the same inputs")
            ref = self.clean.to(output.device)[index, at].float().log_softmax(-1)
            return (ref.exp() * (ref - logits.log_softmax(-1))).sum(dim=-1)
        ids = self.ids(batch, len(output)).to(output.device)
        if int(ids.min()) < 0 or int(ids.max()) >= output.shape[-1]:
            raise ValueError(f"token ids from {int(ids.min())} to {int(ids.max())} are outside the "
                             f"{output.shape[-1]} logits")
        picked = logits.gather(1, ids)
        if self.score == "logit_diff":
            return picked[:, 0] - picked[:, 1]
        return logits.softmax(-1).gather(1, ids)[:, 0]
