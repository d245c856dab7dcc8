"""A toy head score registered in one place, and every registered score on the three paths.

``tests/test_score_registry.py`` imports the pieces; run as a script (``TRITON_INTERPRET=1``
must be set before triton is imported, so the test runs it in a subprocess) it registers the
toy score, scores a tiny model of the synthetic language on the materialized path, the tiled
torch path and the Triton path, and writes every score's values as JSON.
"""

from __future__ import annotations

import json
import sys

import torch

from headlab.analysis.detect import head_scores
from headlab.analysis.detect.registry import Score, has_key_at, pattern_scores, register_score
from headlab.analysis.streaming import streaming_head_scores
from headlab.heads.model import HeadModel
from headlab.kernels.keysets import KeySet
from deviating.data.language import Language, SyntheticCorpus, tokenizer

TOY = "two_back"


def toy_score() -> Score:
    """The whole definition of the toy score "mass two tokens back": one entry."""
    return Score(TOY, "weight on key i-2, over real queries i >= 2", has_key_at(-2), keys=KeySet(lo=-2, hi=-2),
                 family="named", colour="#000000")


def tiny_language_model(seed: int = 0) -> HeadModel:
    """A random 2-layer GPT-2 over the synthetic language's vocabulary (a tokenizer: separators and
    punctuation are scored too)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = tokenizer(Language())
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=len(tok), n_positions=32))
    return HeadModel(model.eval(), tok, name="tiny-synthetic")


def texts_and_frequency(hm: HeadModel) -> tuple[list[str], torch.Tensor]:
    """Windows of the synthetic language, some cut short (so batches are padded), and the
    language's token frequencies (so rare_token is scored)."""
    corpus = SyntheticCorpus(Language())
    texts, _ = corpus.texts(hm, seed=0)
    texts = texts[:6]
    cut = [" ".join(t.split()[:n]) for t, n in zip(texts, (32, 9, 20, 2, 27, 14))]
    repeated = [" ".join(t.split()[:12] * 2) for t in texts[:2]]  # repeats: induction is defined
    return cut + repeated, corpus.token_frequency(hm.tokenizer)


def every_path(hm: HeadModel, texts, frequency, backends=("tiled", "triton")) -> dict:
    """Score name -> path -> per-input values ``(n_inputs, n_layers, n_heads)`` as nested lists."""
    paths = {"materialized": head_scores(hm, texts, scores=list(pattern_scores()), token_frequency=frequency)}
    for backend in backends:
        paths[backend] = streaming_head_scores(hm, texts, scores=list(pattern_scores()), token_frequency=frequency,
                                               backend=backend, block_size=16)
    return {name: {path: scores.per_input[name].tolist() for path, scores in paths.items()}
            for name in pattern_scores()}


def main(out: str) -> None:
    register_score(toy_score())
    hm = tiny_language_model()
    texts, frequency = texts_and_frequency(hm)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"names": list(pattern_scores()), "scores": every_path(hm, texts, frequency)}, f)


if __name__ == "__main__":
    main(sys.argv[1])
