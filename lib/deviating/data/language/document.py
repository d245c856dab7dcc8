"""Annotated token sequences: `Document`, slicing and concatenation, packing into windows.

A `Document` is a list of tokens with one annotation list per property, all of the same
length. Annotations that point at other tokens (`subject`, `antecedent`, `copy_source`)
hold indices into the same `Document`, or -1. Slicing and concatenation keep them correct:
an index is shifted with its token, and an index whose target falls outside the result
becomes -1. `pack` turns generated documents into the fixed-length training windows the
organisms see, each starting with ``<bos>``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"

# Per-token annotation fields; the "pointer" ones hold token indices.
POINTER_FIELDS = ("subject", "antecedent", "copy_source")
LABEL_FIELDS = ("pos_tag", "number", "gender", "is_punct", "is_sentence_end", "construction",
                "clause", "sentence", "doc_id")


@dataclass
class Document:
    """One annotated token sequence (a generated document or a packed training window).

    All lists have one entry per token:

    - `tokens`: the words; `text` is ``" ".join(tokens)``, which the language's tokenizer maps
      one word to one id, so positions here are positions in the tokenized ids.
    - `pos_tag`: DET, ADJ, NOUN, VERB (including the copula), PRON, PREP, REL, ADV, PUNCT,
      or SPECIAL (``<bos>``, ``<eos>``, ``<pad>``).
    - `number`: "sg"/"pl" for nouns, pronouns, number-marked determiners and present-tense
      (agreeing) verbs; None elsewhere (past-tense verbs do not agree).
    - `gender`: "m"/"f"/"n" for nouns (lexical, also in the plural) and he/she/it (him/her);
      None elsewhere ("they"/"them" carry no gender).
    - `subject`: for a verb, the index of the head of its subject (a noun, or a pronoun in a
      pronoun-subject clause; for the verb of a subject relative clause, the noun that the
      clause modifies); -1 otherwise or when the subject lies outside this Document.
    - `antecedent`: for a pronoun, the index of the noun it refers to; -1 otherwise.
    - `copy_source`: for a token inside a repeated sentence, the index of the same token in
      the earlier occurrence; -1 otherwise.
    - `is_punct`, `is_sentence_end`: punctuation, and the "." that ends a sentence.
    - `construction`: the label of the sentence the token is in (None for special tokens).
    - `clause`: "main", "rel" (a relative clause, from "that" to its last word) or "front"
      (a fronted adverb or prepositional phrase and its comma); None for special tokens.
    - `sentence`: an id of the sentence the token is in, unique within the Document
      (0, 1, ... in a generated document); -1 for special tokens.
    - `doc_id`: the index of the generated document the token came from; -1 for specials.
    """

    tokens: list[str]
    pos_tag: list[str]
    number: list[str | None]
    gender: list[str | None]
    subject: list[int]
    antecedent: list[int]
    copy_source: list[int]
    is_punct: list[bool]
    is_sentence_end: list[bool]
    construction: list[str | None]
    clause: list[str | None]
    sentence: list[int]
    doc_id: list[int]

    def __post_init__(self) -> None:
        n = len(self.tokens)
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, list):
                raise TypeError(f"Document.{f.name} must be a list, got {type(value).__name__}")
            if len(value) != n:
                raise ValueError(f"Document.{f.name} has {len(value)} entries but there are {n} tokens; "
                                 "every annotation needs exactly one entry per token")
        for name in POINTER_FIELDS:
            for i, j in enumerate(getattr(self, name)):
                if not -1 <= j < n:
                    raise ValueError(f"Document.{name}[{i}] = {j} is outside the document "
                                     f"(length {n}); use -1 for 'none'")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def text(self) -> str:
        """The tokens joined by single spaces (what the tokenizer reads)."""
        return " ".join(self.tokens)

    def slice(self, start: int, stop: int) -> Document:
        """Tokens ``start:stop`` with pointers re-based; pointers leaving the slice become -1."""
        n = len(self)
        if not (0 <= start <= stop <= n):
            raise ValueError(f"slice({start}, {stop}) is not a valid range of a document of length {n}")
        cut = {f.name: getattr(self, f.name)[start:stop] for f in fields(self)}
        for name in POINTER_FIELDS:
            cut[name] = [j - start if start <= j < stop else -1 for j in cut[name]]
        return Document(**cut)

    @staticmethod
    def concat(docs: Sequence[Document]) -> Document:
        """Documents one after another; pointers shifted by each part's offset.

        Sentence ids are offset too so that they stay unique within the result.
        """
        out: dict[str, list] = {f.name: [] for f in fields(Document)}
        offset, sentence_offset = 0, 0
        for doc in docs:
            if not isinstance(doc, Document):
                raise TypeError(f"Document.concat takes Documents, got {type(doc).__name__}")
            for f in fields(Document):
                values = getattr(doc, f.name)
                if f.name in POINTER_FIELDS:
                    values = [j + offset if j >= 0 else -1 for j in values]
                elif f.name == "sentence":
                    values = [s + sentence_offset if s >= 0 else -1 for s in values]
                out[f.name].extend(values)
            offset += len(doc)
            ids = [s for s in doc.sentence if s >= 0]
            if ids:
                sentence_offset += max(ids) + 1
        return Document(**out)

    @staticmethod
    def special(token: str, n: int = 1) -> Document:
        """`n` copies of a special token (``<bos>``, ``<eos>``, ``<pad>``) with empty annotations."""
        return Document(tokens=[token] * n, pos_tag=["SPECIAL"] * n, number=[None] * n,
                        gender=[None] * n, subject=[-1] * n, antecedent=[-1] * n,
                        copy_source=[-1] * n, is_punct=[False] * n, is_sentence_end=[False] * n,
                        construction=[None] * n, clause=[None] * n, sentence=[-1] * n,
                        doc_id=[-1] * n)

    def with_bos(self) -> Document:
        """This document with ``<bos>`` prepended (every index shifted by one)."""
        return Document.concat([Document.special(BOS), self])


def pack(docs: Sequence[Document], n_ctx: int, *, drop_last: bool = False) -> list[Document]:
    """Pack documents into windows of exactly `n_ctx` tokens, each starting with ``<bos>``.

    The documents are laid end to end, each followed by ``<eos>``, and the stream is cut into
    consecutive chunks of ``n_ctx - 1`` tokens; each window is ``<bos>`` + a chunk. A
    document may be split across windows; annotations whose target lies in an earlier
    window become -1 (the model cannot see it). The last window is padded with ``<pad>``
    unless `drop_last`, which drops it when it is short. Positions in a window are positions
    in ``tokenizer(lang)(window.text)["input_ids"]``.
    """
    if not isinstance(n_ctx, int) or n_ctx < 2:
        raise ValueError(f"n_ctx must be an integer >= 2 (room for <bos> and a token), got {n_ctx!r}")
    if len(docs) == 0:
        raise ValueError("pack needs at least one document")
    eos = Document.special(EOS)
    parts: list[Document] = []
    for d in docs:
        parts += [d, eos]
    stream = Document.concat(parts)
    body = n_ctx - 1
    bos = Document.special(BOS)
    windows = []
    for start in range(0, len(stream), body):
        chunk = stream.slice(start, min(start + body, len(stream)))
        if len(chunk) < body:
            if drop_last:
                break
            chunk = Document.concat([chunk, Document.special(PAD, body - len(chunk))])
        windows.append(Document.concat([bos, chunk]))
    return windows

