"""Sparse autoencoders on a layer's head outputs, and the head basis beside them.

A layer's attention writes ``z @ W_O`` into the residual stream, where ``z`` is
the concatenation of its heads' outputs, ``(batch, pos, n_heads * d_head)``.
The head basis cuts ``z`` into ``n_heads`` fixed slices. A sparse autoencoder
(SAE) learns another basis for the same vector: many more directions than
heads, of which only a few are used at each token,

    f = sparsify(W_enc^T (x - b_dec) + b_enc)      (n_features,), f >= 0
    x_hat = W_dec^T f + b_dec = b_dec + sum_i f_i d_i

with ``x = z / scale`` (``scale``: the RMS distance of the training inputs to
their mean, so that the reconstruction loss is a fraction of variance), and
unit-norm decoder directions ``d_i`` (the rows of ``W_dec``; the columns of the
``d_in x n_features`` decoder matrix). ``sparsify`` is one of

* ``"l1"``: ReLU, with the penalty ``l1_coeff * sum_i f_i`` added to the loss;
* ``"topk"``: keep the ``k`` largest pre-activations, zero the rest, then ReLU
  (:func:`topk_relu`); no penalty.

Training (:func:`deviating.training.sae.train_sae`, on the one training loop) is deterministic
given the seed; it resamples dead features (features that stopped firing) towards what the SAE
reconstructs worst.

Measurements here: reconstruction (:func:`evaluate_sae`) and the fraction of
loss recovered when the reconstruction replaces ``z`` in the forward pass
(:func:`loss_recovered`). The comparisons with the head basis (sparsity,
stability across seeds, alignment with ground truth, polysemantic heads) are in
:mod:`deviating.analysis.sae.compare`.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from headlab.heads.ablation import Ablation
from headlab.heads.model import HeadModel
from headlab.metrics import Metric

__all__ = [
    "SAEConfig", "SparseAutoencoder", "topk_relu", "check_activations", "evaluate_sae",
    "collect_z", "spliced", "fraction_loss_recovered", "loss_recovered", "save_sae", "load_sae", "SAE_DIR",
]

SPARSITY = ("topk", "l1")
SAE_DIR = Path(__file__).resolve().parents[2] / "results" / "saes"  # the shipped SAEs (load_sae(SAE_DIR / name))


# --------------------------------------------------------------------------- the model


@dataclass
class SAEConfig:
    """Shape and sparsity of a :class:`SparseAutoencoder`.

    ``d_in``: input size (``n_heads * d_head`` of the layer); ``n_features``:
    dictionary size; ``sparsity``: ``"topk"`` (exactly the ``k`` largest
    pre-activations may be non-zero) or ``"l1"`` (ReLU with an L1 penalty of
    weight ``l1_coeff`` on the activations).
    """

    d_in: int
    n_features: int
    sparsity: str = "topk"
    k: int | None = 8
    l1_coeff: float = 3e-3

    def __post_init__(self) -> None:
        for name in ("d_in", "n_features"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SAEConfig.{name} must be a positive int, got {value!r}")
        if self.sparsity not in SPARSITY:
            raise ValueError(f"SAEConfig.sparsity must be one of {SPARSITY}, got {self.sparsity!r}")
        if self.sparsity == "topk":
            if not isinstance(self.k, int) or self.k < 1:
                raise ValueError(f"top-k sparsity needs an int k >= 1, got k={self.k!r}")
            if self.k > self.n_features:
                raise ValueError(f"k={self.k} is larger than n_features={self.n_features}: a top-k SAE "
                                 "cannot keep more features than it has; lower k or add features")
        elif not (isinstance(self.l1_coeff, (int, float)) and self.l1_coeff > 0):
            raise ValueError(f"L1 sparsity needs l1_coeff > 0, got {self.l1_coeff!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest entries of the last axis, zero the others, then ReLU.

    So at most ``k`` entries are non-zero, and exactly ``min(k, #positive)``.
    """
    if not 1 <= k <= pre.shape[-1]:
        raise ValueError(f"k must lie in [1, {pre.shape[-1]}] (the size of the last axis), got {k}")
    values, indices = pre.topk(k, dim=-1)  # (..., k)
    return torch.zeros_like(pre).scatter(-1, indices, values.relu())


class SparseAutoencoder(nn.Module):
    """``x -> f -> x_hat`` on inputs of size ``d_in`` (see the module docstring).

    Parameters: ``W_enc (d_in, n_features)``, ``b_enc (n_features,)``,
    ``W_dec (n_features, d_in)`` with unit-norm rows (the feature directions),
    ``b_dec (d_in,)``; buffer ``scale`` (a positive scalar). All act on
    normalised inputs ``x / scale``; :meth:`encode` takes and :meth:`decode`
    returns raw inputs.
    """

    def __init__(self, config: SAEConfig, seed: int = 0):
        super().__init__()
        self.config = config
        g = torch.Generator().manual_seed(seed)
        d = torch.randn(config.n_features, config.d_in, generator=g)
        d = d / d.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(d)  # (n_features, d_in)
        self.W_enc = nn.Parameter(d.T.clone())  # (d_in, n_features): tied at initialisation
        self.b_enc = nn.Parameter(torch.zeros(config.n_features))
        self.b_dec = nn.Parameter(torch.zeros(config.d_in))
        self.register_buffer("scale", torch.tensor(1.0))

    def __repr__(self) -> str:
        c = self.config
        how = f"top-{c.k}" if c.sparsity == "topk" else f"L1 {c.l1_coeff:g}"
        return f"SparseAutoencoder(d_in={c.d_in}, n_features={c.n_features}, {how})"

    @property
    def n_features(self) -> int:
        return self.config.n_features

    def check_input(self, x: torch.Tensor) -> None:
        """Raise a clear error unless ``x`` is a finite float tensor ``(..., d_in)``."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"the SAE takes a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"the SAE takes floating-point activations, got dtype {x.dtype}")
        if x.dim() == 0 or x.shape[-1] != self.config.d_in:
            raise ValueError(f"the SAE takes inputs of size d_in={self.config.d_in} on the last axis, got "
                             f"shape {tuple(x.shape)}; reshape z to (..., n_heads * d_head) first")
        if not torch.isfinite(x).all():
            bad = int((~torch.isfinite(x)).sum())
            raise ValueError(f"the input holds {bad} NaN or infinite value(s); the SAE would propagate them "
                             "silently: find where they come from")

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_in) -> (..., n_features)``, before the sparsifying step."""
        x_n = x / self.scale
        return (x_n - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``(..., n_features)``, all >= 0."""
        self.check_input(x)
        pre = self.pre_activations(x)
        if self.config.sparsity == "topk":
            return topk_relu(pre, self.config.k)
        return pre.relu()

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """``(..., n_features) -> (..., d_in)``, in raw input units."""
        return (f @ self.W_dec + self.b_dec) * self.scale

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x_hat, f)``."""
        f = self.encode(x)
        return self.decode(f), f

    @torch.no_grad()
    def normalize_decoder_(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)


# --------------------------------------------------------------------------- activations


def check_activations(acts: torch.Tensor) -> torch.Tensor:
    """``acts`` as float32 after checking that it is a finite ``(n_tokens, d_in)`` float tensor with
    at least 2 rows; a clear error otherwise."""
    if not isinstance(acts, torch.Tensor) or acts.dim() != 2:
        raise ValueError(f"activations must be a (n_tokens, d_in) tensor, got "
                         f"{getattr(acts, 'shape', type(acts).__name__)}; flatten (batch, pos) first")
    if not acts.is_floating_point():
        raise TypeError(f"activations must be floating point, got {acts.dtype}")
    if len(acts) < 2:
        raise ValueError("need at least 2 activation vectors to train an SAE")
    if not torch.isfinite(acts).all():
        raise ValueError(f"the activations hold {int((~torch.isfinite(acts)).sum())} NaN or infinite "
                         "value(s); clean them before training")
    return acts.float()


# --------------------------------------------------------------------------- measurements


@torch.no_grad()
def evaluate_sae(sae: SparseAutoencoder, acts: torch.Tensor, batch_size: int = 4096) -> dict[str, Any]:
    """Reconstruction and sparsity of ``sae`` on ``acts`` ``(n_tokens, d_in)``.

    ``mse``: mean over tokens and dimensions of ``(x - x_hat)^2`` (raw units);
    ``explained_variance``: ``1 - sum ||x - x_hat||^2 / sum ||x - mean(x)||^2``;
    ``l0``: mean number of non-zero features per token; ``dead``: features
    that are zero on every token of ``acts``; ``alive``: the others;
    ``fire_rate``: per feature, the fraction of tokens where it is non-zero.
    """
    acts = check_activations(acts)
    sq_err, l0, fires = 0.0, 0.0, torch.zeros(sae.n_features)
    for chunk in acts.split(batch_size):
        x_hat, f = sae(chunk)
        sq_err += float((chunk - x_hat).pow(2).sum())
        active = f > 0  # (chunk, n_features)
        l0 += float(active.sum())
        fires += active.sum(0)
    total_var = float((acts - acts.mean(0)).pow(2).sum())
    n = len(acts)
    return {"mse": sq_err / acts.numel(), "explained_variance": 1.0 - sq_err / total_var,
            "l0": l0 / n, "dead": int((fires == 0).sum()), "alive": int((fires > 0).sum()),
            "fire_rate": (fires / n).tolist()}


@torch.no_grad()
def collect_z(hm: HeadModel, layer: int, input_ids: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """Layer ``layer``'s concatenated head outputs on ``input_ids`` ``(n, pos)``:
    ``(n, pos, n_heads * d_head)``, float32 on the CPU."""
    if not 0 <= layer < hm.n_layers:
        raise ValueError(f"layer {layer} is out of range: {hm.name} has layers 0..{hm.n_layers - 1}")
    out = []
    for chunk in input_ids.split(batch_size):
        _, cache = hm.run_with_cache(chunk, names=("z",), layers=[layer])
        z = cache.z(layer)  # (batch, pos, head, d_head)
        out.append(z.reshape(*z.shape[:2], -1).float().cpu())  # (batch, pos, head * d_head)
    return torch.cat(out)


@contextlib.contextmanager
def spliced(hm: HeadModel, sae: SparseAutoencoder, layer: int) -> Iterator[HeadModel]:
    """Inside the block, every forward pass uses the SAE's reconstruction ``sae(z)[0]`` in place
    of layer ``layer``'s head outputs ``z``, at every position (through :meth:`HeadModel.patch_z`)."""
    if not 0 <= layer < hm.n_layers:
        raise ValueError(f"layer {layer} is out of range: {hm.name} has layers 0..{hm.n_layers - 1}")
    if sae.config.d_in != hm.n_heads * hm.d_head:
        raise ValueError(f"the SAE takes d_in={sae.config.d_in} but {hm.name}'s z has n_heads * d_head = "
                         f"{hm.n_heads * hm.d_head} dimensions: it was trained on another model")

    def reconstruct(_: int, z: torch.Tensor) -> torch.Tensor:
        batch, pos, n_heads, d_head = z.shape
        x_hat = sae(z.reshape(batch, pos, n_heads * d_head).float())[0]  # (batch, pos, head * d_head)
        return x_hat.to(z.dtype).reshape(batch, pos, n_heads, d_head)

    with hm.patch_z(reconstruct, layers=[layer]):
        yield hm


def fraction_loss_recovered(clean: float, replaced: float, floor: float) -> float:
    """``(floor - replaced) / (floor - clean)``: 1 when the replacement is as good as the
    clean model, 0 when it is as bad as the floor (the layer ablated), negative when worse."""
    for name, value in (("clean", clean), ("replaced", replaced), ("floor", floor)):
        if not math.isfinite(float(value)):
            raise ValueError(f"{name} loss is {value}; all three losses must be finite")
    if floor - clean <= 0:
        raise ValueError(f"the floor loss ({floor:.4g}) is not above the clean loss ({clean:.4g}): ablating "
                         "the layer does not hurt, so the fraction of loss recovered is undefined")
    return (floor - replaced) / (floor - clean)


@torch.no_grad()
def loss_recovered(hm: HeadModel, sae: SparseAutoencoder, layer: int, input_ids: torch.Tensor,
                   floor: str = "zero", batch_size: int = 64) -> dict[str, float]:
    """Next-token loss with the SAE's reconstruction spliced in for layer ``layer``'s ``z``.

    ``clean``: the model's mean loss on ``input_ids``; ``sae``: with ``z``
    replaced by ``sae(z)[0]`` at every position; ``floor``: with the whole
    layer's ``z`` zero-ablated (``floor="zero"``) or replaced by its mean over
    every token of ``input_ids`` (``"mean"``); ``fraction``:
    :func:`fraction_loss_recovered` of the three.
    """
    if floor not in ("zero", "mean"):
        raise ValueError(f"floor must be 'zero' or 'mean', got {floor!r}")
    heads = [(layer, h) for h in range(hm.n_heads)]

    def mean_loss() -> float:
        total, count = 0.0, 0
        for chunk in input_ids.split(batch_size):
            batch = hm.tokenize(chunk)
            total += float(Metric().bound(hm).score(hm.forward(batch), batch).sum())
            count += len(chunk)
        return total / count

    clean = mean_loss()
    with spliced(hm, sae, layer):
        with_sae = mean_loss()
    reference = input_ids if floor == "mean" else None
    with hm.ablate(heads, Ablation(floor, reference=reference)):
        ablated = mean_loss()
    return {"clean": clean, "sae": with_sae, "floor": ablated, "floor_kind": floor,
            "fraction": fraction_loss_recovered(clean, with_sae, ablated)}


# --------------------------------------------------------------------------- saving


def save_sae(sae: SparseAutoencoder, path: str | Path, provenance: dict[str, Any]) -> dict[str, Any]:
    """Write ``path.safetensors`` and ``path.json`` (``provenance`` plus config and sha256)."""
    from safetensors.torch import save_file

    from headlab.models.checkpoints import sha256_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    weights = path.with_suffix(".safetensors")
    save_file({k: v.detach().float().contiguous() for k, v in sae.state_dict().items()}, str(weights))
    record = {**provenance, "config": sae.config.to_dict(), "file": weights.name, "sha256": sha256_file(weights)}
    path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def load_sae(path: str | Path) -> tuple[SparseAutoencoder, dict[str, Any]]:
    """Load an SAE saved by :func:`save_sae` after checking its sha256; returns ``(sae, provenance)``.

    The SAE is returned for analysis: in eval mode, with gradients switched off
    (``sae.requires_grad_(True)`` to train it further)."""
    from safetensors.torch import load_file

    from headlab.models.checkpoints import CheckpointError, sha256_file

    path = Path(path)
    meta = path.with_suffix(".json")
    if not meta.is_file():
        raise FileNotFoundError(f"{meta} is missing: not an SAE saved by deviating.analysis.sae.model.save_sae")
    record = json.loads(meta.read_text())
    weights = path.with_suffix(".safetensors")
    actual = sha256_file(weights)
    if actual != record["sha256"]:
        raise CheckpointError(f"{weights} does not match its recorded sha256 ({record['sha256']}, got "
                              f"{actual}); regenerate it with: {record.get('command', '(no command)')}")
    sae = SparseAutoencoder(SAEConfig(**record["config"]))
    sae.load_state_dict(load_file(str(weights)))
    return sae.eval().requires_grad_(False), record

