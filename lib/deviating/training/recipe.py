"""What a training run is made of: a data :class:`Task` and a :class:`Recipe` (model config, task,
steps, batch size, learning rate, seed). The recipes of every shipped model are gathered in
:data:`deviating.training.recipes.RECIPES`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import torch

from headlab.models.gpt import GPT, GPTConfig

__all__ = ["Task", "Recipe"]


class Task(Protocol):
    """What the training loop needs from a data task (:mod:`deviating.data.spans`,
    :mod:`deviating.data.windows`, :mod:`deviating.data.two_relations`).

    A task may also define ``phase_change(metrics) -> bool``: then a run records the first
    evaluation at which it holds (the induction phase change of :class:`~deviating.data.spans.RepeatedSpans`).
    """

    kind: str
    version: str

    @property
    def d_vocab(self) -> int: ...
    def tokenizer(self): ...
    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]: ...
    def eval_data(self, n: int) -> Any: ...
    def evaluate(self, model: GPT, data: Any) -> dict[str, Any]: ...
    def describe(self) -> dict[str, Any]: ...


@dataclass
class Recipe:
    """Everything that determines a training run, given a seed.

    The learning rate warms up linearly over ``warmup`` steps, then decays along a cosine to
    10% of ``lr`` at the last step (:func:`deviating.training.loop.warmup_cosine`); AdamW with
    ``weight_decay`` on the matrices only; gradients clipped to norm ``grad_clip``; the task's
    ``eval_size`` evaluation inputs scored every ``eval_every`` steps.

    ``tie_embeddings`` (default off) trains the unembedding as the embedding's transpose (one
    shared matrix, as GPT-2's); the saved checkpoint is an ordinary :class:`GPT` whose two
    matrices are equal copies. It is recorded in :meth:`to_dict` only when on, so the
    provenance of recipes without it is unchanged.

    ``average_share`` (default 0: off) makes the run's model the uniform average of the weights
    after the last step and every ``average_every``-th step before it, within the last
    ``average_share`` of the steps (Izmailov et al. 2018's stochastic weight averaging, without
    changing the learning rate; a share, so that a run of other length averages alike). The rule is fixed
    before training, never chosen on evaluation prompts. Like ``tie_embeddings``, the two
    fields are recorded in :meth:`to_dict` only when on.
    """

    name: str
    description: str
    config: GPTConfig
    task: Task
    steps: int
    batch_size: int
    lr: float
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_size: int = 256
    seed: int = 0
    tie_embeddings: bool = False
    average_share: float = 0.0
    average_every: int = 100

    def __post_init__(self) -> None:
        if isinstance(self.average_share, bool) or not isinstance(self.average_share, (int, float)) \
                or not 0 <= self.average_share < 1:
            raise ValueError(f"average_share must be a number in [0, 1) (0: no averaging), got "
                             f"{self.average_share!r}")
        if isinstance(self.average_every, bool) or not isinstance(self.average_every, int) \
                or self.average_every < 1:
            raise ValueError(f"average_every must be an int >= 1, got {self.average_every!r}")

    def averaged_steps(self, steps: int) -> list[int]:
        """The steps (from 1) after which the weights enter the average in a run of ``steps``
        steps: the last step, and every ``average_every``-th before it while more than
        ``(1 - average_share) * steps``; empty when averaging is off."""
        if not self.average_share:
            return []
        first = (1 - self.average_share) * steps
        return [s for s in range(steps, 0, -self.average_every) if s > first][::-1]

    def to_dict(self) -> dict[str, Any]:
        """The recipe as JSON-ready values (config and task described), as recorded in provenance."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["config"], d["task"] = self.config.to_dict(), self.task.describe()
        if not self.tie_embeddings:
            del d["tie_embeddings"]
        if not self.average_share:
            del d["average_share"], d["average_every"]
        return d
