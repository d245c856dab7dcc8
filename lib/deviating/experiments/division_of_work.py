"""Chapter 6's stored measurements: every head's ablation effect, per input, on the organism's
three training seeds and on MiniLM, under zero, mean and resample ablation and several metrics.

The chapter's verdicts must hold (or fail) under each ablation mode and with two metrics, on
three training seeds; measuring all of that live would take minutes per build, so
``scripts/division_of_work.py`` computes it once and writes one JSON file per model under
``lib/deviating/results/division_of_work/``, which the chapter reads (the chapter recomputes the
seed-0, zero-ablation loss effects live and checks that they equal the stored ones).

What one file holds (``FORMAT`` 1), all effects rounded to 5 decimals:

* ``singles[mode][metric]``: ``(n_layers * n_heads, n_items)``, head ``l.h`` in row ``l * n_heads + h``;
* ``pairs[mode][metric]`` (the organism): every pair of heads within a layer, on the first
  ``pair_items`` items, with ``pair_heads`` naming each row's two heads;
* ``entropy``: ``(n_layers * n_heads, n_items)`` normalised attention entropy of the clean model;
* ``gradient``: ``(n_layers * n_heads, n_items)`` ``|d metric / d gate|`` (Michel et al.'s importance
  per item; the loss for the organism, the self-retrieval loss for MiniLM);
* ``clean``: the clean metric per item, and the settings, the command and the seconds it took.

The organism's metrics are the next-token loss (increase, nats), the divergence of the
predictions from the clean model's (KL, nats) and, per annotated phenomenon, the margin and the
accuracy lost; MiniLM's are ``1 - cos`` of the sentence embedding, the shift of its similarities
to the other sentences, and the (saturated) self-retrieval loss.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import torch

from headlab.analysis.effects import causal_lm_metrics, encoder_metrics, group_effects
from headlab.heads.ablation import ABLATION_MODES, Ablation
from headlab.analysis.detect import entropy_score
from deviating.data.language import encode
from deviating.data.language.metrics import agreement_metric, copy_metric, pronoun_metric
from deviating.training.recipes import RECIPES
from deviating.data.language import load_english
import headlab
from headlab.analysis.importance import gradient_importance
from headlab.metrics import Metric
from headlab.metrics import next_token_loss

__all__ = ["OUT", "FORMAT", "ORGANISMS", "Sizes", "measure_model", "run", "load"]

OUT = Path(__file__).resolve().parent.parent / "results" / "division_of_work"
FORMAT = 1
ORGANISMS = ("organism", "organism-s1", "organism-s2")
REFERENCE_SEED = 20_250  # the windows mean and resample ablation take their replacements from
PHENOMENA = {"agreement": "agreement", "pronouns": "pronoun", "copying": "copy", "rare-word copies": "rare"}


@dataclass(frozen=True)
class Sizes:
    """How much is measured (the defaults are what the chapter ships)."""

    windows: int = 32        # organism: held-out evaluation windows of 128 tokens
    pair_items: int = 16     # organism: windows the within-layer pairs are measured on
    sentences: int = 64      # MiniLM: sentences of the English set, evenly spread
    modes: tuple[str, ...] = ABLATION_MODES


def _rows(t: torch.Tensor) -> list:
    return np.round(t.double().numpy(), 5).tolist()


def _entropy(hm, batch) -> torch.Tensor:
    _, cache = hm.run_with_cache(batch, names=("pattern",))
    per = [entropy_score(cache.pattern(l).float(), batch["attention_mask"], causal=hm.causal)
           for l in range(hm.n_layers)]  # each (n_items, n_heads)
    return torch.stack(per, dim=1).flatten(1).T  # (L * H, n_items)


def _organism_inputs(name: str, sizes: Sizes):
    task = RECIPES[name].task
    data = task.eval_data(sizes.windows)
    vocab = task.tokenizer().get_vocab()
    n = len(data.windows)
    build = {"agreement": agreement_metric, "pronoun": pronoun_metric, "copy": copy_metric, "rare": copy_metric}
    items = {label: build[attr](getattr(data, attr), vocab, n) for label, attr in PHENOMENA.items()}
    reference = encode(task.tokenizer(), task.windows(sizes.windows, seed=REFERENCE_SEED))
    return data.ids, items, reference


def _minilm_inputs(sizes: Sizes):
    texts = [s.text for s in load_english()]
    # the ten longest sentences stay references: resample ablation needs a reference at least
    # as long as every sentence measured
    longest = set(sorted(range(len(texts)), key=lambda i: (-len(texts[i]), i))[:10])
    pool = [i for i in range(len(texts)) if i not in longest]
    picks = [pool[i] for i in np.linspace(0, len(pool) - 1, sizes.sentences).round().astype(int)]
    chosen = set(picks)
    # every other sentence is a reference: resample ablation needs references at least as long
    # as the longest sentence measured
    return [texts[i] for i in picks], [t for i, t in enumerate(texts) if i not in chosen]


def measure_model(name: str, sizes: Sizes = Sizes(), progress: bool = True) -> dict:
    """Every measurement of one model (a name of :data:`ORGANISMS` or ``"minilm"``), as the stored dict."""

    start = time.perf_counter()
    hm = headlab.load(name)
    if name == "minilm":
        inputs, reference = _minilm_inputs(sizes)
        metrics, items = encoder_metrics(), None
        grad_metric = Metric("retrieval")
    elif name in ORGANISMS:
        inputs, items, reference = _organism_inputs(name, sizes)
        metrics = causal_lm_metrics(items)
        grad_metric = Metric("loss")
    else:
        raise ValueError(f"unknown model {name!r}: measure one of {', '.join(ORGANISMS)} or 'minilm'")
    batch = hm.tokenize(inputs)
    n_items = batch["input_ids"].shape[0]
    pairs = None
    if name in ORGANISMS:
        pairs = [((l, a), (l, b)) for l in range(hm.n_layers) for a, b in combinations(range(hm.n_heads), 2)]
        pair_batch = {k: v[:sizes.pair_items] for k, v in batch.items()}
        pair_metrics = {k: metrics[k] for k in ("loss", "kl")}
    singles, pair_effects = {}, {}
    for mode in sizes.modes:
        ablation = Ablation() if mode == "zero" else Ablation(mode, reference=reference)
        ge = group_effects(hm, batch, metrics, ablation=ablation, progress=progress)
        singles[mode] = {k: _rows(v) for k, v in ge.effects.items()}
        if pairs is not None:
            pe = group_effects(hm, pair_batch, pair_metrics, groups=pairs, ablation=ablation, progress=progress)
            pair_effects[mode] = {k: _rows(v) for k, v in pe.effects.items()}
    with torch.no_grad():
        entropy = _entropy(hm, batch)
        clean_out = hm.forward(batch)
    grads = gradient_importance(hm, batch, metric=grad_metric, batch_size=8).abs()  # (n_items, L, H)
    if name in ORGANISMS:

        clean = {"loss": _rows(next_token_loss(clean_out, batch["input_ids"], batch["attention_mask"]))}
        clean.update({f"{k} margin": _rows(m(clean_out, batch)) for k, m in items.items()})
    else:
        clean = {}
    return {
        "format": FORMAT, "model": name, "n_layers": hm.n_layers, "n_heads": hm.n_heads, "n_items": n_items,
        "items": ("held-out evaluation windows of the organism's language" if name in ORGANISMS
                  else "sentences of the English set, evenly spread"),
        "sizes": asdict(sizes), "reference_seed": REFERENCE_SEED if name in ORGANISMS else None,
        "singles": singles, "pairs": pair_effects or None,
        "pair_heads": [[list(a), list(b)] for a, b in pairs] if pairs else None,
        "entropy": _rows(entropy), "gradient": _rows(grads.flatten(1).T), "clean": clean,
        "seconds": round(time.perf_counter() - start, 1),
    }


def run(models=(*ORGANISMS, "minilm"), sizes: Sizes = Sizes(), out: Path = OUT,
        command: str = "python scripts/division_of_work.py") -> None:
    """Measure each model and write ``<out>/<model>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    for name in models:
        data = measure_model(name, sizes)
        data["command"] = command
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"{name}: {data['seconds']} s -> {path}", flush=True)


def load(name: str, folder: Path = OUT) -> dict:
    """The stored measurements of one model, with every array as a float64 numpy array."""
    path = Path(folder) / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no stored measurements {path}: run python scripts/division_of_work.py "
                                f"--models {name}")
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} has format {data.get('format')!r}; this headlab reads {FORMAT}: "
                         f"regenerate it with python scripts/division_of_work.py --models {name}")
    for part in ("singles", "pairs"):
        if data.get(part):
            data[part] = {mode: {k: np.asarray(v, dtype=float) for k, v in ms.items()}
                          for mode, ms in data[part].items()}
    for key in ("entropy", "gradient"):
        data[key] = np.asarray(data[key], dtype=float)
    data["clean"] = {k: np.asarray(v, dtype=float) for k, v in data["clean"].items()}
    return data
