"""The Brown Corpus's part-of-speech tags as ground truth: which token belongs to which word, and
which earlier word a word is tied to by its grammar.

Tags (Francis and Kučera's tag set) carry suffixes that say nothing about the part of speech:
``-tl`` (in a title), ``-hl`` (in a headline), ``-nc`` (cited), and ``fw-`` for a foreign word;
:func:`base_tag` strips them. A contraction has two tags joined by ``+`` (``ppss+md``, *I'll*).

Relations (each pair is ``(query word, key word)``, the key earlier in the sentence, so a
causal model's head at the query can attend to it):

* ``noun->determiner``: the head noun of a noun phrase to its article or determiner;
* ``noun->adjective``: the head noun to the nearest adjective of its phrase;
* ``object->preposition``: a preposition's object (the head noun after it) to the preposition;
* ``verb->auxiliary``: a main verb to the auxiliary (modal, *be*, *have*, *do*) that governs it.

The rules are deliberately simple phrase patterns over tags; the tests pin them on sentences
of the corpus.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["RELATIONS", "base_tag", "word_class", "relations", "token_tags", "train_tokenizer"]

RELATIONS = ("noun->determiner", "noun->adjective", "object->preposition", "verb->auxiliary")

_DETERMINERS = {"at", "dt", "dti", "dts", "dtx", "abn", "abx", "pp$", "wp$", "np$", "nn$"}
_MODIFIERS = {"jj", "jjr", "jjs", "jjt", "od", "cd", "ap", "ql", "vbn", "vbg"}  # may stand between det and noun
_AUXILIARIES = {"md", "be", "bed", "bedz", "beg", "bem", "ben", "ber", "bez", "hv", "hvd", "hvg", "hvn", "hvz",
                "do", "dod", "doz"}
_MAIN_VERBS = {"vb", "vbd", "vbg", "vbn", "vbz"}
_ADVERBS = {"rb", "rbr", "rbt", "*", "ql"}  # may stand between an auxiliary and its verb (not, never)


def base_tag(tag: str) -> str:
    """The part of speech of a corpus tag: ``nn-tl`` -> ``nn``, ``fw-nn`` -> ``nn``, ``ppss+md`` ->
    ``ppss+md`` (a contraction keeps both), ``nn-tl-hl`` -> ``nn``."""
    tag = tag.lower()
    if tag.startswith("fw-"):
        tag = tag[3:]
    parts = [p for p in tag.split("-") if p not in ("tl", "hl", "nc")]
    return parts[0] if parts and parts[0] else tag


def word_class(tag: str) -> str:
    """A coarse class: noun, verb, auxiliary, adjective, determiner, preposition, pronoun,
    punctuation or other."""
    t = base_tag(tag)
    if t in ("nn", "nns", "np", "nps", "nr", "nrs"):
        return "noun"
    if t in _MAIN_VERBS:
        return "verb"
    if t in _AUXILIARIES:
        return "auxiliary"
    if t.startswith("jj"):
        return "adjective"
    if t in _DETERMINERS:
        return "determiner"
    if t == "in":
        return "preposition"
    if t.startswith("pp") or t in ("pn", "wps", "wpo"):
        return "pronoun"
    if not t[:1].isalpha():
        return "punctuation"
    return "other"


def _head_noun_after(tags: Sequence[str], i: int) -> int | None:
    """The head noun of the noun phrase starting at ``i``: skip determiners and modifiers, then
    take the last of a run of nouns."""
    j = i
    while j < len(tags) and (tags[j] in _DETERMINERS or tags[j] in _MODIFIERS):
        j += 1
    if j >= len(tags) or word_class(tags[j]) != "noun":
        return None
    while j + 1 < len(tags) and word_class(tags[j + 1]) == "noun":
        j += 1
    return j


def relations(tags: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """The sentence's relation pairs ``(query index, key index)`` by relation (see the module
    docstring). ``tags`` are the corpus tags of the sentence's words."""
    t = [base_tag(x) for x in tags]
    out: dict[str, list[tuple[int, int]]] = {r: [] for r in RELATIONS}
    for i, tag in enumerate(t):
        if tag in _DETERMINERS:
            noun = _head_noun_after(t, i + 1)
            if noun is not None:
                out["noun->determiner"].append((noun, i))
                adjectives = [k for k in range(i + 1, noun) if t[k].startswith("jj")]
                if adjectives:
                    out["noun->adjective"].append((noun, adjectives[-1]))
        elif tag == "in":
            noun = _head_noun_after(t, i + 1)
            if noun is not None:
                out["object->preposition"].append((noun, i))
        elif tag in _AUXILIARIES:
            j = i + 1
            while j < len(t) and t[j] in _ADVERBS:
                j += 1
            if j < len(t) and t[j] in _MAIN_VERBS:
                out["verb->auxiliary"].append((j, i))
    return out


def token_tags(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """For each token (its ``(start, end)`` characters, as a tokenizer's offsets give them), the
    index of the word it belongs to (``spans``, from :func:`deviating.data.brown.detokenize`), or
    -1 for a token of no word (a space, a special token). A token belongs to the word that holds
    its first character that is not a space."""
    out = []
    w = 0
    for start, end in offsets:
        if end <= start:
            out.append(-1)
            continue
        while w < len(spans) and spans[w][1] <= start:
            w += 1
        hit = -1
        for k in range(w, len(spans)):
            if spans[k][0] >= end:
                break
            if spans[k][1] > start:
                hit = k
                break
        out.append(hit)
    return out


def train_tokenizer(texts: Sequence[str], vocab_size: int = 4096, *, min_frequency: int = 2):
    """A byte-level BPE tokenizer (Hugging Face ``tokenizers``) trained on ``texts``, with
    ``<|endoftext|>`` as its one special token (id 0): the separator between texts, and the
    beginning-of-sequence token of every window."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 260:
        raise ValueError(f"vocab_size must be at least 260 (256 bytes and a few merges), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok
