"""The hand-annotated English set (``headlab/english/english.jsonl``) and word-to-token alignment.

Each line is one item: its `text`, its `words` (words and punctuation marks), a
`construction`, every finite verb with its subject's head and every personal pronoun with
its antecedent, as indices into `words`. The annotation guide is ``README.md`` beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Sequence

from headlab.english.split import SPLITS, assign_splits, hash_split

__all__ = ["ENGLISH_CONSTRUCTIONS", "SPLITS", "EnglishSentence", "align_words", "assign_splits", "hash_split",
           "load_english"]

ENGLISH_CONSTRUCTIONS = ("simple", "pp", "subj_rel", "obj_rel", "long_distance", "pronoun", "coordination")


@dataclass(frozen=True)
class EnglishSentence:
    """One annotated English item. `verbs`: (verb index, subject index) pairs; `pronouns`:
    (pronoun index, antecedent index) pairs; both index `words`. `id`: its stable name
    (``en-0001``, ...); `split`: ``"select"`` or ``"measure"``."""

    text: str
    words: tuple[str, ...]
    construction: str
    verbs: tuple[tuple[int, int], ...]
    pronouns: tuple[tuple[int, int], ...]
    id: str = ""
    split: str = ""

    @classmethod
    def from_json(cls, record: dict, where: str = "record") -> EnglishSentence:
        """Parse and validate one JSON object (raises ValueError naming `where` if invalid)."""
        try:
            words = tuple(record["words"])
            sent = cls(text=record["text"], words=words, construction=record["construction"],
                       verbs=tuple((v["verb"], v["subject"]) for v in record["verbs"]),
                       pronouns=tuple((p["pronoun"], p["antecedent"]) for p in record["pronouns"]),
                       id=record.get("id", ""), split=record.get("split", ""))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: malformed English item ({e!r}); expected keys text, words, "
                             "construction, verbs [{verb, subject}], pronouns [{pronoun, antecedent}]") from e
        if sent.construction not in ENGLISH_CONSTRUCTIONS:
            raise ValueError(f"{where}: unknown construction {sent.construction!r}; use one of {ENGLISH_CONSTRUCTIONS}")
        for kind, pairs in (("verbs", sent.verbs), ("pronouns", sent.pronouns)):
            for i, j in pairs:
                if not (0 <= i < len(words) and 0 <= j < len(words)) or i == j:
                    raise ValueError(f"{where}: {kind} pair ({i}, {j}) is out of range for {len(words)} words")
        if sent.split not in ("", *SPLITS):
            raise ValueError(f"{where}: unknown split {sent.split!r}; use one of {SPLITS}")
        if "".join(sent.text.split()) != "".join(words):
            raise ValueError(f"{where}: the words do not spell the text {sent.text!r}")
        return sent


def load_english(split: str | None = None) -> list[EnglishSentence]:
    """The items of ``headlab/english/english.jsonl``, validated, in file (id) order.

    Args:
        split: None for every item; ``"select"`` or ``"measure"`` for one half of the fixed
            split (see ``headlab.english.split``): choose heads on
            ``"select"``, report on ``"measure"``.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split={split!r}: use None (every item), 'select' or 'measure'")
    path = resources.files("headlab.english") / "english.jsonl"
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                out.append(EnglishSentence.from_json(json.loads(line), where=f"english.jsonl line {n}"))
    return out if split is None else [s for s in out if s.split == split]


def align_words(tok, words: Sequence[str]) -> list[int]:
    """Position, in ``tok(list(words), is_split_into_words=True)["input_ids"]`` (special
    tokens such as [CLS] included), of the first sub-token of each word.

    `tok` must be a fast Hugging Face tokenizer (it provides `word_ids()`). Raises ValueError
    if a word produces no token or the input is cut by the tokenizer's maximum length.
    """
    if not getattr(tok, "is_fast", False):
        raise TypeError("align_words needs a fast tokenizer (with word_ids()); load it with use_fast=True")
    if isinstance(words, str):
        raise TypeError("align_words takes a list of words, not a string; split the text first")
    encoding = tok(list(words), is_split_into_words=True)
    first: dict[int, int] = {}
    for pos, w in enumerate(encoding.word_ids()):
        if w is not None and w not in first:
            first[w] = pos
    missing = [i for i in range(len(words)) if i not in first]
    if missing:
        raise ValueError(f"words {[words[i] for i in missing]} (indices {missing}) produced no token; "
                         "they may be empty, unsupported characters, or beyond the maximum length")
    return [first[i] for i in range(len(words))]
