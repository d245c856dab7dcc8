"""The head atlas: every head of a model, its pattern scores, its effect and one label.

    python -m headlab atlas --model minilm --json atlas.json --png atlas.png

Definitions are in :mod:`headlab.analysis.detect`. Pattern scores are a mean over texts of a
per-text mean over eligible queries; ``induction`` is scored on repeated random tokens only;
``copying`` is :func:`headlab.analysis.detect.ov_copying_score` (null for encoders); the effect
is the mean absolute zero-ablation effect (:func:`headlab.analysis.sweep.sweep`), the write
norm, or none; the label is :func:`headlab.analysis.detect.label_heads`'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from headlab.analysis.detect import (
    DEFAULT_THRESHOLDS, NotApplicable, RelationSet, Thresholds, english_relation_set, head_scores,
    held_out_relation_scores, label_heads, ov_copying_score, relation_scores,
)
from headlab.analysis.detect.registry import BUILTIN_NAMES, pattern_scores, score
from headlab.analysis.detect.registry import scores as score_entries
from headlab.analysis.streaming import streaming_head_scores
from headlab.analysis.sweep import sweep
from headlab.analysis.texts import (
    check_lengths, reads_english, repeated_tokens, special_wrapping, token_pool,
)
from headlab.english import load_english
from headlab.heads.head import Head, parse_head
from headlab.schema import check_schema, schema_of

__all__ = ["Corpus", "compute_atlas", "load_atlas", "default_texts", "repeated_random_tokens",
           "relation_summary", "check_lengths", "atlas_scores", "definitions", "ATLAS_SCORES", "DEFINITIONS",
           "SCHEMA"]

SCHEMA = schema_of("atlas")

INDUCTION_TEXTS = 4
INDUCTION_LENGTH = 20
EFFECT_TEXTS = 48
EFFECT_KINDS = ("ablation", "write_norm", "none")
COPYING_DEFINITION = "fraction of tokens t, fed alone, whose own logit is in the top 5 of the head's write"


def atlas_scores() -> tuple[str, ...]:
    """The scores that go into each head's ``"scores"`` (all in [0, 1] where defined, null where
    not): every registered pattern score (:mod:`headlab.analysis.detect.registry`), then ``copying``."""
    return pattern_scores() + ("copying",)


def definitions() -> dict[str, str]:
    """Score name -> its definition, as every atlas records it (each pattern score's registry entry)."""
    return {**{s.name: s.definition for s in score_entries()}, "copying": COPYING_DEFINITION}


# The built-in scores and their definitions (atlas_scores() and definitions() add registered ones).
ATLAS_SCORES = BUILTIN_NAMES + ("copying",)
DEFINITIONS = {name: definitions()[name] for name in ATLAS_SCORES}

# --------------------------------------------------------------------------- inputs


@runtime_checkable
class Corpus(Protocol):
    """Annotated text of one's own for the atlas: default texts, token frequencies and relations.

    Pass one to :func:`compute_atlas` when ``hm`` reads a language the library does not know
    (the book's synthetic language is one).
    """

    def texts(self, hm, seed: int) -> tuple[list[str], str]:
        """The default texts for ``hm`` (each at most its maximum length), and a sentence saying what they are."""

    def token_frequency(self, tokenizer) -> torch.Tensor | None:
        """``(len(tokenizer),)`` expected frequency of each id (``inf``: never rare); None: no ``rare_token``."""

    def relation_set(self, hm, seed: int) -> RelationSet:
        """Gold relations on text of this corpus, tokenized for ``hm``."""


def _check_corpus(corpus) -> None:
    if corpus is not None and not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must have the methods texts, token_frequency and relation_set "
                        f"(headlab.analysis.atlas.Corpus), got {type(corpus).__name__}")


def default_texts(hm, seed: int = 0, corpus: Corpus | None = None) -> tuple[list[str] | dict, str]:
    """The atlas's default inputs for ``hm`` and a sentence saying what they are: the corpus's texts
    when one is given; else every sentence of the hand-annotated English set
    (:mod:`headlab.english`) for a tokenizer that reads English; else random token sequences."""
    _check_corpus(corpus)
    if corpus is not None:
        return corpus.texts(hm, seed)
    english = [s.text for s in load_english()]
    if reads_english(hm, english):
        return english, f"the {len(english)} sentences of the hand-annotated English set"
    length = min(32, hm.max_positions or 32)
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor(token_pool(hm))
    ids = pool[torch.randint(len(pool), (32, length), generator=gen)]
    return ({"input_ids": ids, "attention_mask": torch.ones_like(ids)},
            f"32 sequences of {length} random tokens (seed {seed}): {hm.name} reads no English and no corpus was given")


def repeated_random_tokens(hm, n: int = INDUCTION_TEXTS, length: int = INDUCTION_LENGTH, seed: int = 0) -> dict:
    """``n`` sequences of ``length`` random ordinary tokens, each repeated once, as a batch.

    Special tokens are added as the tokenizer adds them (else its ``bos_token``, if any);
    ``length`` shrinks to fit the model's maximum length.
    """
    return _repeated(hm, n, length, seed)[0]


def _repeated(hm, n: int, length: int, seed: int) -> tuple[dict, int]:
    """:func:`repeated_random_tokens` and the span length it used."""
    if n < 1 or length < 2:
        raise ValueError(f"need n >= 1 sequences of length >= 2, got n={n}, length={length}")
    tok = hm.tokenizer
    limit = hm.max_positions
    if limit is not None:
        length = min(length, (limit - 3) // 2)
    pool = token_pool(hm)
    length = min(length, len(pool))  # distinct tokens, so each has exactly one earlier occurrence
    prefix, suffix = special_wrapping(tok) if tok is not None else ([], [])
    if tok is not None and not prefix and tok.bos_token_id is not None:
        prefix = [tok.bos_token_id]
    ids = repeated_tokens(pool, n, length, torch.Generator().manual_seed(seed), prefix=prefix, suffix=suffix)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, length


def relation_summary(hm, seed: int = 0, corpus: Corpus | None = None) -> dict:
    """Relation accuracies of every head on the annotated text the model reads.

    The corpus's relation set, else the English set for a fast tokenizer that reads English. A
    head's choice is its argmax over all keys, and over keys without special tokens, each
    with the held-out comparison.
    """
    _check_corpus(corpus)
    if corpus is not None:
        rs = corpus.relation_set(hm, seed)
    elif getattr(hm.tokenizer, "is_fast", False) and reads_english(hm, [s.text for s in load_english()]):
        rs = english_relation_set(hm.tokenizer)
    else:
        raise ValueError(f"no annotated text for {hm.name}: relations need a fast tokenizer that reads English, "
                         "or a corpus (compute_atlas(..., corpus=...)) that supplies its own relation set")
    out: dict = {"source": rs.source, "n_inputs": len(rs)}
    for key, ignore in (("argmax", False), ("argmax_without_special", True)):
        results = relation_scores(hm, rs, ignore_special=ignore)
        out[key] = {name: r.to_dict() for name, r in results.items()}
        out[f"{key}_held_out"] = held_out_relation_scores(hm, rs, ignore_special=ignore)
    return out


# ------------------------------------------------------------------------- the atlas


def _round(x) -> float | None:
    x = float(x)
    return None if x != x else round(x, 4)


def compute_atlas(hm, texts=None, *, effect: str = "ablation", effect_texts: int = EFFECT_TEXTS,
                  induction_texts: int = INDUCTION_TEXTS, induction_length: int = INDUCTION_LENGTH,
                  seed: int = 0, thresholds: Thresholds = DEFAULT_THRESHOLDS, batch_size: int = 32,
                  token_frequency: torch.Tensor | None = None, relations: bool = False,
                  streaming: bool = False, corpus: Corpus | None = None) -> dict:
    """Every head's scores, effect and label, as the JSON-ready dict the CLI writes.

    ``texts``: a list of texts, a token batch or a tensor of token ids; None for ``default_texts``.
    ``corpus``: supplies the default texts, the token frequencies and the relation set.
    ``relations``: also add ``relation_summary`` under ``"relations"``.
    ``streaming``: score with the fused kernel, holding no attention pattern.

    Under ``"heads"``, one entry per head: ``head`` (``[layer, head]``), ``scores``, ``label``,
    ``strength``, ``lift``, ``effect``, ``relative_effect`` and ``write_norm``.
    """
    if effect not in EFFECT_KINDS:
        raise ValueError(f"unknown effect {effect!r}: choose from {', '.join(EFFECT_KINDS)}")
    _check_corpus(corpus)
    source = "given"
    if texts is None:
        texts, source = default_texts(hm, seed=seed, corpus=corpus)
    elif isinstance(texts, torch.Tensor):  # token ids (batch, pos), no padding
        texts = {"input_ids": texts, "attention_mask": torch.ones_like(texts)}
    elif isinstance(texts, (list, tuple)):
        texts = list(texts)
        if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("texts must be a non-empty list of non-empty strings")
    check_lengths(hm, texts)
    if token_frequency is None and corpus is not None:
        token_frequency = corpus.token_frequency(hm.tokenizer)

    scoring = streaming_head_scores if streaming else head_scores  # streamed: no n x n pattern is ever held
    names = atlas_scores()
    on_repeats = [n for n in names[:-1] if score(n).on_repeats]  # induction: scored on repeated random tokens
    wanted = [n for n in names[:-1] if n not in on_repeats] + ["write_norm"]
    scores = scoring(hm, texts, scores=wanted, batch_size=batch_size, token_frequency=token_frequency)
    repeats, span = _repeated(hm, induction_texts, induction_length, seed=seed)
    induction = scoring(hm, repeats, scores=on_repeats, batch_size=batch_size)
    means = {**scores.means(), **{n: induction.mean(n) for n in on_repeats}}
    uniform = {name: (induction if name in on_repeats else scores).uniform_mean(name)
               for name in means if name in names[:-1]}
    notes = dict(scores.notes)

    copying = None
    try:
        copying = ov_copying_score(hm, seed=seed)
    except NotApplicable as err:
        notes["copying"] = f"not applicable: {err}"

    n_texts = len(texts) if isinstance(texts, list) else int(texts["input_ids"].shape[0])
    effects, effect_info = None, {"kind": effect}
    if effect == "ablation":
        subset = texts[:effect_texts] if isinstance(texts, list) else {k: v[:effect_texts] for k, v in texts.items()}
        result = sweep(hm, subset)  # zero ablation, the model's own metric
        effects = result.by_head().abs().mean(-1)  # (n_layers, n_heads): mean |effect| over texts
        effect_info.update(mode="zero", metric=result.kind, n_texts=min(effect_texts, n_texts),
                           definition="mean over texts of |metric(head zero-ablated) - metric(clean)|")
    elif effect == "write_norm":
        effects = scores.mean("write_norm")
        effect_info.update(definition="mean over real positions of the norm of the head's write (cache.result)")

    labels = label_heads({n: m for n, m in means.items() if n in names[:-1]}, effects, thresholds,
                         uniform={n: torch.full_like(means[n], u) for n, u in uniform.items()})
    heads = []
    for layer in range(hm.n_layers):
        for head in range(hm.n_heads):
            entry_scores = {}
            for name in names:
                if name == "copying":
                    entry_scores[name] = None if copying is None else _round(copying[layer, head])
                else:
                    entry_scores[name] = _round(means[name][layer, head]) if name in means else None
            heads.append({
                "head": Head(layer, head).to_json(), "scores": entry_scores,
                "label": labels[layer, head], "strength": _round(labels.strength[layer, head]),
                "lift": {n: _round(v[layer, head]) for n, v in labels.lifts.items()},
                "effect": None if effects is None else _round(effects[layer, head]),
                "relative_effect": None if labels.relative_effect is None else _round(labels.relative_effect[layer, head]),
                "write_norm": _round(means["write_norm"][layer, head]),
            })
    for name in names:
        if name not in means and name != "copying" and name not in notes:
            notes[name] = "undefined on every text"
    atlas = {
        "schema": SCHEMA, "model": hm.name, "n_layers": hm.n_layers, "n_heads": hm.n_heads, "n_texts": n_texts,
        "texts": source, "induction_texts": induction_texts, "induction_length": span,
        "seed": seed, "effect": effect_info, "thresholds": thresholds.to_dict(),
        "uniform": {n: _round(u) for n, u in uniform.items()},
        "definitions": definitions(), "notes": notes, "label_counts": dict(labels.counts()), "heads": heads,
    }
    if relations:
        atlas["relations"] = relation_summary(hm, seed=seed, corpus=corpus)
    return atlas


def load_atlas(source) -> dict:
    """An atlas written by :func:`compute_atlas`, from a JSON file or a dict; headlab 0.1
    atlases are upgraded.

    Raises:
        headlab.schema.SchemaError: the data is not an atlas, or from a newer headlab.
    """
    if isinstance(source, dict):
        data, where = source, "the atlas"
    else:
        data, where = json.loads(Path(source).read_text(encoding="utf-8")), str(source)
    if check_schema(data, "atlas", where) == 0:
        heads = []
        for entry in data.get("heads", []):
            entry = dict(entry)
            layer = entry.pop("layer")
            heads.append({"head": Head(layer, entry.pop("head")).to_json(), **entry})
        data = {"schema": SCHEMA, **{k: v for k, v in data.items() if k != "heads"}, "heads": heads}
    for entry in data.get("heads", []):
        parse_head(entry["head"])  # a head in any other form is refused here, not deep in a figure
    return data
