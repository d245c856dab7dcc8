"""Real English, offline: the tag-grounded relation set of the Brown Corpus, the head catalogue,
and the chapters' GPT-2 path, run on a tiny random GPT-2 (the hub is never reached).

The Brown tokenizer comes with the shipped ``brown-attn-2l`` checkpoint, and the held-out text
with the book's sample, so nothing here needs the corpus tarball except where it says so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import headlab
from deviating.data import brown
from deviating.data.brown_relations import brown_relation_set, file_split
from deviating.data.brown_sample import held_out
from deviating.experiments.brown_catalogue import PATTERN_KINDS, catalogue, catalogue_table, pattern_rows
from deviating.report.real_model import BOOK_MODEL, english_inputs, real_language_model
from deviating.training.recipes import RECIPES
from headlab.heads.loading import ModelUnavailable
from headlab.heads.model import HeadModel

SENTENCES = [
    (("The", "at"), ("old", "jj"), ("jury", "nn"), ("said", "vbd"), ("it", "pps"), ("will", "md"),
     ("not", "*"), ("go", "vb"), ("to", "in"), ("the", "at"), ("city", "nn"), (".", ".")),
    (("A", "at"), ("man", "nn"), ("has", "hvz"), ("seen", "vbn"), ("the", "at"), ("big", "jj"),
     ("dogs", "nns"), ("in", "in"), ("Atlanta", "np"), (".", ".")),
]


@pytest.fixture(scope="module")
def brown_lm():
    return headlab.load("brown-attn-2l")


@pytest.fixture(scope="module")
def held():
    return held_out(RECIPES["brown-attn-2l"].task)


def texts(n_files: int = 6):
    return [brown.Text(f"c{'ak'[i % 2]}{i:02d}", "news" if i % 2 == 0 else "fiction", tuple(SENTENCES))
            for i in range(n_files)]


def tiny_gpt2(vocab: int, seed: int = 0) -> HeadModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=vocab, n_positions=128,
                                      bos_token_id=0, eos_token_id=0))


# ---------------------------------------------------------------------------- the relation set


def test_relation_set_marks_each_pair_at_the_query_words_last_token(brown_lm):
    tok = brown_lm.tokenizer
    got = brown_relation_set(tok, texts(2), n_ctx=128)
    rs = got.relation_set
    assert got.file_ids == ("ca00", "ck01")  # both sentences fit in one passage per file
    assert got.n_pairs == {"noun->determiner": 8, "noun->adjective": 4, "object->preposition": 4,
                           "verb->auxiliary": 4}
    text, spans = brown.detokenize([w for s in SENTENCES for w, _ in s])
    enc = tok(text, return_offsets_mapping=True)
    assert rs.input_ids[0, :len(enc["input_ids"])].tolist() == enc["input_ids"]
    assert enc["input_ids"][0] == 0  # <|endoftext|> first, as in training

    def tokens_of(word):  # the token positions of word number `word`
        s, e = spans[word]
        return [p for p, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a < e and b > s]

    gold = rs.relations["noun->determiner"][0]
    jury, the = tokens_of(2), tokens_of(0)
    q = jury[-1]
    assert gold[q].nonzero().flatten().tolist() == the
    assert not gold[jury[0]].any() or len(jury) == 1
    # verb->auxiliary: "go" -> "will" across "not"
    go, will = tokens_of(7), tokens_of(5)
    assert rs.relations["verb->auxiliary"][0][go[-1]].nonzero().flatten().tolist() == will
    # the nearest-candidate baseline points at the first token of the nearest earlier determiner
    name, pointers = rs.baselines["noun->determiner"]
    assert name == "nearest determiner"
    city = tokens_of(10)
    assert int(pointers[0, city[-1]]) == tokens_of(9)[0]
    # a made-up tag set where the nearest determiner is not the key: "the" before "big dogs" is,
    # but for "seen" (a verb) nothing is marked
    assert not rs.relations["noun->determiner"][0][tokens_of(3)[-1]].any()


def test_passages_respect_n_ctx_and_split_by_file(brown_lm):
    got = brown_relation_set(brown_lm.tokenizer, texts(6), n_ctx=24)
    assert int(got.relation_set.attention_mask.sum(1).max()) <= 24
    assert len(got.file_ids) > 6  # each file cut into several passages
    split = file_split(got.file_ids)
    sel = {got.file_ids[i] for i in split.select}
    meas = {got.file_ids[i] for i in split.measure}
    assert sel and meas and not sel & meas
    assert sorted([*split.select, *split.measure]) == list(range(len(got.file_ids)))
    with pytest.raises(ValueError, match="n_ctx must be at least 8"):
        brown_relation_set(brown_lm.tokenizer, texts(2), n_ctx=4)
    with pytest.raises(ValueError, match="no texts"):
        brown_relation_set(brown_lm.tokenizer, [], n_ctx=64)


# ---------------------------------------------------------------------------- the catalogue


def test_catalogue_finds_the_brown_models_copying_and_sink(brown_lm, held):
    rows = {r.kind: r for r in pattern_rows(brown_lm, held, n=32, n_resamples=500)}
    assert set(rows) == set(PATTERN_KINDS)
    # brown-attn-2l copies a repeated held-out span: an induction head past the book's bar
    ind = rows["induction, repeated text"]
    assert ind.found and ind.head[0] == 1 and ind.lead.low >= ind.bar == 0.3
    assert rows["first-token (sink)"].found
    # the interval is of the measured half only: fewer inputs than were given
    assert ind.n_inputs < 32
    assert not rows["duplicate-token"].found


def test_catalogue_finds_nothing_in_a_random_gpt2(brown_lm, held):
    """The GPT-2 path: a tiny random GPT-2 reading the Brown tokenizer's ids runs every kind
    and names none (its attention is close to uniform)."""
    hm = HeadModel(tiny_gpt2(brown_lm.vocab_size), brown_lm.tokenizer, name="random gpt2")
    rel = brown_relation_set(brown_lm.tokenizer, texts(4), n_ctx=64)
    rows = catalogue(hm, held, rel, n=16, n_resamples=300)
    assert len(rows) == len(PATTERN_KINDS) + 4
    assert not any(r.found for r in rows if r.kind != "first-token (sink)")
    table = catalogue_table({"random gpt2": rows})
    assert table.count("\n") == len(rows) + 1 and "nearest determiner" in table


def test_real_language_model_is_the_book_model_unless_gpt2_is_asked_for():
    """Colab and the site run the same model by default; GPT-2 is an opt-in that fails loudly offline."""
    calls = []

    class Fake:
        n_layers, n_heads, name = 4, 4, BOOK_MODEL

    def offline(name, device="cpu"):
        calls.append(name)
        if name == "gpt2":
            raise ModelUnavailable("no hub")
        return Fake()

    lm = real_language_model(loader=offline)
    assert calls == [BOOK_MODEL] and lm.name == BOOK_MODEL  # the hub is not even tried
    assert "same model on the site, in Colab" in lm.note
    calls.clear()
    with pytest.raises(ModelUnavailable, match="needs the Hugging Face hub.*Colab.*brown-gpt"):
        real_language_model(gpt2=True, loader=offline)
    assert calls == ["gpt2"]  # no quiet fallback to another model

    def online(name, device="cpu"):
        calls.append(name)
        return Fake()

    calls.clear()
    assert "Hugging Face hub" in real_language_model(gpt2=True, loader=online).note and calls == ["gpt2"]
    calls.clear()
    assert real_language_model(loader=online).name == BOOK_MODEL and calls == [BOOK_MODEL]  # online too
    with pytest.raises(TypeError, match="gpt2 must be True or False, got 'yes'"):
        real_language_model(gpt2="yes", loader=online)


def test_english_inputs_retokenize_for_another_tokenizer(brown_lm, held):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    assert english_inputs(brown_lm, held, brown_lm.tokenizer) is held
    # another byte-level tokenizer: no merges at all, one token per byte
    raw = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    raw.pre_tokenizer, raw.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    other = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="Ā")
    hm = HeadModel(tiny_gpt2(len(other)), other, name="byte gpt2")
    got = english_inputs(hm, held, brown_lm.tokenizer, n=8, half=20)
    assert got.windows.shape == (8, held.windows.shape[1])
    first_text = brown_lm.tokenizer.decode(held.windows[0, 1:].tolist())
    assert other.decode(got.windows[0, 1:].tolist()) == first_text[:held.windows.shape[1] - 1]
    assert torch.equal(got.text_repeats[:, 1:21], got.text_repeats[:, 21:41])
    assert torch.equal(got.random_repeats[:, 1:21], got.random_repeats[:, 21:])
    assert all(len(set(r[1:21].tolist())) == 20 for r in got.random_repeats)
    assert np.all(got.windows[:, 0].numpy() == other.eos_token_id)


def test_the_chapters_gpt2_cells_run_on_a_random_gpt2(brown_lm, held):
    """What chapters 3 and 5 run on the model real_language_model gives, on a tiny random GPT-2
    that reads its own tokenizer (as GPT-2 small would in Colab): the atlas, the catalogue, the
    induction rule and the circuit search. A random model names no induction head."""
    from deviating.analysis.circuit_search import induction_circuit
    from headlab.roles.induction import induction_heads
    from headlab.analysis.atlas import compute_atlas
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    raw.pre_tokenizer, raw.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    other = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="Ā")
    lm = real_language_model(gpt2=True,
                             loader=lambda name, device="cpu": HeadModel(tiny_gpt2(len(other)), other, name=name))
    assert lm.name == "gpt2" and "Hugging Face hub" in lm.note
    got = english_inputs(lm.hm, held, brown_lm.tokenizer, n=8, half=24)
    atlas = compute_atlas(lm.hm, got.windows, effect="write_norm")
    assert len(atlas["heads"]) == 8 and sum(atlas["label_counts"].values()) == 8
    rows = pattern_rows(lm.hm, got, n=8, n_resamples=200)
    assert [r.kind for r in rows] == list(PATTERN_KINDS)
    assert not any(r.found for r in rows if r.kind.startswith("induction"))
    assert induction_heads(lm.hm, got.random_repeats).heads == ()
    found = induction_circuit(lm.hm, got.text_repeats[:4])
    assert found.induction_head[0] == 1 and found.feeding_head[0] == 0


def test_the_heads_wang_et_al_report_are_written_as_the_book_writes_heads():
    from deviating.report.real_model import WANG2022_GPT2_HEADS, reported_heads

    assert reported_heads("previous-token") == "2.2 and 4.11"
    assert reported_heads("induction") == "5.5, 5.8, 5.9 and 6.9"
    assert all(0 <= layer < 12 and 0 <= head < 12 for heads in WANG2022_GPT2_HEADS.values() for layer, head in heads)
    with pytest.raises(ValueError, match="kind must be one of .*'induction'.*got 'name mover'"):
        reported_heads("name mover")
