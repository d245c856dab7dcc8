"""Training a sparse autoencoder (:class:`~deviating.analysis.sae.model.SparseAutoencoder`) on the one
training loop (:func:`deviating.training.loop.run_loop`).

The loss of a batch is the fraction of variance unexplained (``fvu``), plus, for L1 sparsity,
``l1_coeff`` times the mean L1 norm of the features (the loop's extra term, ``l1``). Adam at a
constant learning rate; before each update the decoder rows' gradient is projected to keep their
norm fixed, after it the rows are renormalised. A feature is **dead** when it has not fired on any
training input for ``resample_every`` steps; every ``resample_every`` steps, until
``resample_until`` of training, dead features are **resampled** (:func:`resample_dead`): each gets
the direction of the residual ``x - x_hat`` of a training input drawn with probability
proportional to its squared reconstruction error, so dead features move to what the SAE
reconstructs worst. Deterministic given the seed (and the torch thread count).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import torch

from deviating.analysis.sae.model import SAEConfig, SparseAutoencoder, check_activations
from deviating.training.loop import ExtraLoss, Objective, StepLosses, run_loop

__all__ = ["SAETrainLog", "resample_dead", "train_sae"]


@dataclass
class SAETrainLog:
    """What :func:`train_sae` did. ``curve``: rows ``{step, loss, fvu, l0}`` (means since the
    previous row); ``resampled``: rows ``{step, n}`` (dead features resampled at that step);
    ``dead_at_end``: features that did not fire in the last ``resample_every`` steps."""

    seed: int
    steps: int
    batch_size: int
    lr: float
    curve: list[dict[str, float]] = field(default_factory=list)
    resampled: list[dict[str, int]] = field(default_factory=list)
    dead_at_end: int = 0
    seconds: float = 0.0

    @property
    def n_resampled(self) -> int:
        """Features resampled in all."""
        return sum(r["n"] for r in self.resampled)

    def to_dict(self) -> dict[str, Any]:
        """The log as JSON-ready values, with ``n_resampled``."""
        return {**asdict(self), "n_resampled": self.n_resampled}


@torch.no_grad()
def resample_dead(sae: SparseAutoencoder, dead: torch.Tensor, acts: torch.Tensor, generator: torch.Generator,
                  optimizer: torch.optim.Optimizer | None = None, sample_size: int = 8192) -> int:
    """Give each dead feature (``dead``: ``(n_features,)`` bool) a new direction; returns how many.

    On a random sample of ``acts``, each input's squared reconstruction error ``e`` is
    computed; for each dead feature an input is drawn with probability proportional to
    ``e^2``, and the feature's decoder direction becomes that input's normalised residual
    ``x - x_hat``; its encoder column becomes the same direction times 0.2 times the mean
    encoder norm of the live features, and its encoder bias 0 (so it fires on inputs like
    the one drawn). The optimizer's moment estimates for those weights are reset.
    """
    if dead.shape != (sae.n_features,) or dead.dtype != torch.bool:
        raise ValueError(f"dead must be a bool tensor of shape ({sae.n_features},), got "
                         f"{dead.dtype} {tuple(dead.shape)}")
    idx = dead.nonzero().flatten()
    if len(idx) == 0:
        return 0
    sample = acts[torch.randperm(len(acts), generator=generator)[:sample_size]]  # (n, d_in)
    residual = (sample - sae(sample)[0]) / sae.scale  # (n, d_in), normalised units
    err = residual.pow(2).sum(1)  # (n,)
    if float(err.sum()) <= 0:
        return 0
    chosen = torch.multinomial(err.pow(2) / err.pow(2).sum(), len(idx), replacement=True, generator=generator)
    direction = residual[chosen] / residual[chosen].norm(dim=1, keepdim=True).clamp_min(1e-12)  # (n_dead, d_in)
    alive = ~dead
    enc_norm = sae.W_enc[:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0)
    sae.W_dec[idx] = direction
    sae.W_enc[:, idx] = direction.T * 0.2 * enc_norm
    sae.b_enc[idx] = 0.0
    if optimizer is not None:
        for p, rows in ((sae.W_dec, (idx,)), (sae.W_enc, (slice(None), idx)), (sae.b_enc, (idx,))):
            state = optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key][rows] = 0.0
    return len(idx)


def train_sae(acts: torch.Tensor, config: SAEConfig, seed: int = 0, steps: int = 3000,
              batch_size: int = 1024, lr: float = 1e-3, resample_every: int = 500,
              resample_until: float = 0.7, log_every: int = 100, progress: bool = True
              ) -> tuple[SparseAutoencoder, SAETrainLog]:
    """Train an SAE on ``acts`` ``(n_tokens, d_in)``; deterministic given ``seed``.

    Loss per batch: ``mean_tokens ||x_n - x_hat_n||^2`` (with inputs normalised
    by ``scale``, this is the fraction of variance unexplained) plus, for L1
    sparsity, ``l1_coeff * mean_tokens sum_i f_i``. Adam; the decoder rows are
    renormalised after every step and their gradient is projected to keep the
    norm fixed. ``b_dec`` starts at the mean input. Batches go through ``acts`` in a
    random order, reshuffled when too few rows are left for a batch. Dead features are
    resampled (see the module docstring); ``resample_every=0`` turns resampling off.
    The log's curve has the means of ``loss`` (total), ``fvu`` and ``l0`` over every
    ``log_every`` steps.
    """
    acts = check_activations(acts)
    if acts.shape[1] != config.d_in:
        raise ValueError(f"activations have {acts.shape[1]} dimensions but config.d_in={config.d_in}")
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    sae = SparseAutoencoder(config, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        mean = acts.mean(0)
        sae.scale.fill_(float((acts - mean).pow(2).sum(1).mean().sqrt().clamp_min(1e-8)))
        sae.b_dec.copy_(mean / sae.scale)
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    log = SAETrainLog(seed=seed, steps=steps, batch_size=batch_size, lr=lr)
    fired = torch.zeros(config.n_features, dtype=torch.bool)
    sums = {"loss": 0.0, "fvu": 0.0, "l0": 0.0, "n": 0}
    last: dict[str, torch.Tensor] = {}  # the features of the current batch

    def batches() -> Iterator[torch.Tensor]:
        order, cursor = torch.randperm(len(acts), generator=g), 0
        while True:
            if cursor + batch_size > len(order):
                order, cursor = torch.randperm(len(acts), generator=g), 0
            yield acts[order[cursor:cursor + batch_size]]  # (batch, d_in)
            cursor += batch_size

    def fvu(x: torch.Tensor) -> torch.Tensor:
        x_hat, last["f"] = sae(x)
        return ((x - x_hat) / sae.scale).pow(2).sum(1).mean()

    def project_decoder_grad() -> None:  # keep ||d_i|| = 1: drop the gradient along each row
        with torch.no_grad():
            grad = sae.W_dec.grad
            grad -= (grad * sae.W_dec).sum(1, keepdim=True) * sae.W_dec

    def after_update(s: StepLosses) -> None:
        nonlocal fired, sums
        sae.normalize_decoder_()
        f = last["f"]
        fired |= (f > 0).any(0)
        sums["loss"] += s.total
        sums["fvu"] += s.terms["fvu"]
        sums["l0"] += float((f > 0).float().sum(1).mean())
        sums["n"] += 1
        if s.step % log_every == 0 or s.step == steps:
            n = sums.pop("n")
            log.curve.append({"step": s.step, **{k: round(v / n, 5) for k, v in sums.items()}})
            sums = {"loss": 0.0, "fvu": 0.0, "l0": 0.0, "n": 0}
        if resample_every and s.step % resample_every == 0:
            if s.step <= resample_until * steps:
                log.resampled.append({"step": s.step, "n": resample_dead(sae, ~fired, acts, g, opt)})
            if s.step + resample_every <= steps:  # a fresh window (the last one is kept for dead_at_end)
                fired = torch.zeros_like(fired)

    l1 = ExtraLoss("l1", lambda x: last["f"].sum(1).mean(), config.l1_coeff) if config.sparsity == "l1" else None
    run = run_loop(sae, opt, batches(), steps, Objective(fvu, name="fvu", extra=l1), before_update=project_decoder_grad,
                   on_step=after_update, progress=progress, desc=f"SAE seed {seed}")
    log.dead_at_end = int((~fired).sum())
    log.seconds = round(run.seconds, 2)
    return sae.eval(), log
