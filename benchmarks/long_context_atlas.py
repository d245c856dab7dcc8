#!/usr/bin/env python
"""Which head labels change when the atlas reads long inputs instead of short ones?

    python benchmarks/long_context_atlas.py [--model organism|minilm|attn-only-2l] [--json OUT]

Two atlases of one model, the same effect measure (zero-ablation), the same label rule:

* **short**: the atlas's default inputs (:func:`headlab.analysis.atlas.default_texts`:
  English sentences for MiniLM, 64-token windows of the synthetic language for the organisms);
* **long**: the same kind of text packed to the model's longest context (MiniLM: the English
  set's sentences joined into texts of up to 510 word pieces; organisms: windows of
  ``n_ctx`` tokens of the synthetic language), scored with ``streaming=True`` -- the fused
  kernel, no attention pattern held.

It prints the label counts of both and every head whose label changed. The context is
capped by the model's learned position table (MiniLM 512, organism 128, attn-only-2l 64),
not by memory: at these lengths the materialized atlas fits too (its cost at longer n is
section 5 of ``benchmarks/kernels.py``).

Chapter 3 reads the stored result for the organism, written by

    python benchmarks/long_context_atlas.py --model organism \
        --json lib/deviating/results/atlases/long-context-organism.json

(about two minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

# benchmarks/kernels.py would shadow the `kernels` package that transformers looks for: drop this folder
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # this checkout's code
import headlab  # noqa: E402
from headlab.analysis.atlas import compute_atlas, default_texts  # noqa: E402
from headlab.analysis.streaming import label_changes  # noqa: E402
from deviating.data.language import corpus_for  # noqa: E402


def long_texts(hm, seed: int = 0) -> tuple[list[str], str]:
    """Texts as long as the model reads, of the same kind as its default inputs."""
    from deviating.data.language import Language, load_english, pack

    config = hm.model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_ctx")
    if hm.tokenizer is not None and "[CLS]" in hm.tokenizer.get_vocab():  # MiniLM reads English
        budget = limit - 2  # [CLS] and [SEP]
        texts, current = [], []
        for sentence in (s.text for s in load_english()):
            trial = " ".join(current + [sentence])
            if current and len(hm.tokenizer(trial, add_special_tokens=False)["input_ids"]) > budget:
                texts.append(" ".join(current))
                current = [sentence]
            else:
                current.append(sentence)
        if current:
            texts.append(" ".join(current))
        lengths = [len(hm.tokenizer(t)["input_ids"]) for t in texts]
        return texts, f"{len(texts)} texts of the English set's sentences joined, {min(lengths)}-{max(lengths)} tokens"
    windows = pack(Language().sample(80, seed=seed), n_ctx=limit, drop_last=True)[:32]
    return [w.text for w in windows], f"{len(windows)} windows of {limit} tokens of the synthetic language"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="organism")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hm = headlab.load(args.model)
    corpus = corpus_for(hm)  # the synthetic language's texts and rare-word frequencies, for its models
    short, short_what = default_texts(hm, corpus=corpus)
    long, long_what = long_texts(hm)
    started = time.perf_counter()
    a = compute_atlas(hm, short, corpus=corpus)
    b = compute_atlas(hm, long, streaming=True, corpus=corpus)
    changes = label_changes(a, b)
    print(f"{hm.name}: short = {short_what}; long = {long_what} (streamed); {time.perf_counter() - started:.0f} s")
    for name, atlas in (("short", a), ("long", b)):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(atlas["label_counts"].items(), key=lambda kv: -kv[1]))
        print(f"  {name:>5}: {counts}")
    print(f"  {len(changes)} of {hm.n_layers * hm.n_heads} heads change label:")
    for change in changes:
        print(f"    {change['head']:>5}: {change['before']} -> {change['after']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": hm.name, "short": short_what, "long": long_what,
                                               "label_counts": {"short": a["label_counts"],
                                                                "long": b["label_counts"]},
                                               "changes": changes}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
