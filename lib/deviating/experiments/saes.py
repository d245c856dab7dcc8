"""Chapter 8's sparse autoencoders, trained and shipped with their provenance (``lib/deviating/results/saes/``).

For one layer of a model organism trained on the synthetic language, :func:`train_saes` collects
the layer's concatenated head outputs ``z`` on windows of the language (documents drawn with
``data_seed``), trains a top-k SAE (:func:`deviating.training.sae.train_sae`) for each seed (and,
with ``l1``, one L1 SAE at the first seed), evaluates each on held-out windows (``data_seed + 1``)
and writes ``<out>/<model>-L<layer>-<kind>-s<seed>.safetensors`` and ``.json`` (command, seed,
config, training log, held-out metrics, sha256 of the weights and of the model's weights). With
``head_features``, also one small top-k SAE per head on that head's own ``d_head``-dimensional
output (``<model>-L<layer>-head<h>-topk-s<seed>``, at each of ``head_seeds``, by default the
first seed only). ``scripts/train_saes.py`` is
its command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch
import headlab
from deviating.analysis.sae.compare import language_windows
from deviating.analysis.sae.model import SAEConfig, collect_z, evaluate_sae, loss_recovered, save_sae
from deviating.data.language import Language
from deviating.training.sae import train_sae

__all__ = ["OUT", "train_saes"]

OUT = Path(__file__).resolve().parents[1] / "results" / "saes"


def train_saes(layer: int, model: str = "organism", windows: int = 1200, eval_windows: int = 128,
               data_seed: int = 7000, features: int = 512, k: int = 8, l1: float | None = None,
               seeds: Sequence[int] = (0, 1), head_features: int | None = None, head_k: int = 2,
               head_steps: int = 1500, head_seeds: Sequence[int] | None = None, steps: int = 3000,
               batch_size: int = 512, lr: float = 1e-3,
               out: str | Path = OUT, threads: int = 1, command: str = "python scripts/train_saes.py",
               progress: bool = True) -> list[dict[str, Any]]:
    """Train and save the SAEs of ``model``'s layer ``layer`` (see the module docstring); returns the
    records written (provenance, config, sha256), in training order.

    Args:
        layer: the layer whose ``z`` the SAEs read.
        model: an organism trained on the synthetic language.
        windows: training windows.
        eval_windows: held-out windows.
        data_seed: seed of the training documents (held-out: ``data_seed + 1``).
        features: dictionary size of the layer SAEs.
        k: active features per token of the top-k layer SAEs.
        l1: also train an L1 SAE with this coefficient (first seed).
        seeds: seeds of the top-k layer SAEs.
        head_features: also train one SAE per head with this many features.
        head_k: active features per token of the per-head SAEs.
        head_steps: training steps of the per-head SAEs.
        head_seeds: seeds of the per-head SAEs (default: the first of ``seeds``); they need not
            be among ``seeds`` (e.g. ``seeds=[2], head_seeds=[1, 2]`` adds what seeds 0 and 1
            left out).
        steps: training steps of the layer SAEs.
        batch_size: SAE training batch size.
        lr: SAE learning rate.
        out: the folder written.
        threads: recorded as the torch thread count (set it before calling).
        command: the command line recorded.
        progress: progress bars and a line per SAE.
    """

    seeds = list(seeds)
    if not seeds and not head_seeds:
        raise ValueError("give at least one seed (seeds) or one per-head seed (head_seeds)")
    if head_seeds is not None and head_features is None:
        raise ValueError(f"head_seeds {list(head_seeds)} given without head_features: say how many features "
                         "each per-head SAE has")
    head_seeds = list(seeds[:1] if head_seeds is None else head_seeds)
    hm = headlab.load(model)
    lang = Language.from_description(hm.provenance["data"]["language"])
    n_ctx = hm.model.config.n_ctx
    _, train_ids = language_windows(lang, windows, n_ctx, seed=data_seed)
    _, eval_ids = language_windows(lang, eval_windows, n_ctx, seed=data_seed + 1)
    acts = collect_z(hm, layer, train_ids).flatten(0, 1)  # (n_tokens, n_heads * d_head)
    eval_acts = collect_z(hm, layer, eval_ids).flatten(0, 1)
    d_in = acts.shape[1]
    runs = [("topk", seed, SAEConfig(d_in, features, "topk", k=k), None) for seed in seeds]
    if l1 is not None:
        if not seeds:
            raise ValueError("an L1 SAE is trained at the first of seeds; give seeds")
        runs.append(("l1", seeds[0], SAEConfig(d_in, features, "l1", k=None, l1_coeff=l1), None))
    if head_features is not None:
        runs += [(f"head{h}-topk", seed, SAEConfig(hm.d_head, head_features, "topk", k=head_k), h)
                 for seed in head_seeds for h in range(hm.n_heads)]
    records = []
    for kind, seed, config, head in runs:
        cut = slice(None) if head is None else slice(head * hm.d_head, (head + 1) * hm.d_head)
        sae, log = train_sae(acts[:, cut].contiguous(), config, seed=seed, steps=steps if head is None else head_steps,
                             batch_size=batch_size, lr=lr, progress=progress)
        stats = evaluate_sae(sae, eval_acts[:, cut].contiguous())
        metrics = {name: round(v, 5) for name, v in stats.items() if name != "fire_rate"}
        recovered = {}
        if head is None:
            recovered = {f: loss_recovered(hm, sae, layer, eval_ids, floor=f) for f in ("zero", "mean")}
        metrics.update({f"loss_{floor}": {name: round(v, 5) if isinstance(v, float) else v for name, v in r.items()}
                        for floor, r in recovered.items()})
        provenance = {
            "command": command, "seed": seed, "model": model, "model_sha256": hm.provenance["sha256"],
            "layer": layer, "kind": kind, "head": head,
            "data": {"language": lang.describe(), "train_windows": windows, "eval_windows": eval_windows,
                     "n_ctx": n_ctx, "train_seed": data_seed, "eval_seed": data_seed + 1,
                     "train_tokens": len(acts)},
            "training": log.to_dict(), "eval_metrics": metrics,
            "torch_version": torch.__version__, "threads": threads,
        }
        path = Path(out) / f"{model}-L{layer}-{kind}-s{seed}"
        records.append(save_sae(sae, path, provenance))
        if progress:
            lost = "".join(f", loss recovered {r['fraction']:.3f} ({f} floor)" for f, r in recovered.items())
            print(f"{path.name}: EV {metrics['explained_variance']:.3f}, L0 {metrics['l0']:.1f}, dead {metrics['dead']}, "
                  f"resampled {log.n_resampled}{lost}, {log.seconds:.0f} s", flush=True)
    return records
