"""Append hand-written items to the English set (``lib/headlab/english/english.jsonl``).

This is a typing aid, not a generator: every sentence and every annotation is written by a
person, one line at a time, in a compact notation that saves counting word indices by hand::

    pronoun | Anna met the new neighbors. She liked them. | met>Anna liked>She | She>Anna them>neighbors

Four fields separated by ``|``: the construction label, the text, the verb annotations
(``verb>subject``) and the pronoun annotations (``pronoun>antecedent``; a trailing ``*``
marks a pronoun resolved by meaning rather than by form, see the README's guide). A word
that occurs more than once in the text is named with its occurrence, ``her#2`` for the second
``her`` (case-sensitive). Lines starting with ``#`` and blank lines are skipped.

The script splits the text into words (``.`` and ``,`` are words of their own; a possessive
``'s`` stays on its noun), resolves every name to an index, gives each item the next free id
and its split (:func:`headlab.english.split.assign_splits`, which depends only
on the items before it), and appends it. Run ``--dry-run`` to print the items without writing.

Usage::

    python scripts/english_items.py NOTATION_FILE [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from headlab.english import ENGLISH_CONSTRUCTIONS, EnglishSentence
from headlab.english.split import assign_splits

DATA = Path(__file__).resolve().parents[1] / "lib" / "headlab" / "english" / "english.jsonl"
WORD = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*'?|[.,]")


def split_words(text: str) -> list[str]:
    """``text`` as words and punctuation marks; raises ValueError on a character it cannot place."""
    words = WORD.findall(text)
    if "".join(words) != "".join(text.split()):
        raise ValueError(f"cannot split {text!r} into words: use letters, digits, hyphens, "
                         "apostrophes, '.' and ',' only")
    return words


def _index(words: list[str], name: str, line: str) -> int:
    word, _, nth = name.partition("#")
    hits = [i for i, w in enumerate(words) if w == word]
    if not hits:
        raise ValueError(f"{line!r}: no word {word!r} in the text")
    if not nth and len(hits) > 1:
        raise ValueError(f"{line!r}: {word!r} occurs {len(hits)} times; write {word}#1 ... {word}#{len(hits)}")
    k = int(nth) if nth else 1
    if not 1 <= k <= len(hits):
        raise ValueError(f"{line!r}: {word!r} occurs {len(hits)} times, not {k}")
    return hits[k - 1]


def parse_line(line: str) -> dict:
    """One notation line as a record (without ``id`` and ``split``)."""
    fields = [f.strip() for f in line.split("|")]
    if len(fields) != 4:
        raise ValueError(f"{line!r}: expected 4 fields separated by '|', got {len(fields)}")
    construction, text, verbs, pronouns = fields
    if construction not in ENGLISH_CONSTRUCTIONS:
        raise ValueError(f"{line!r}: unknown construction {construction!r}; use one of {ENGLISH_CONSTRUCTIONS}")
    words = split_words(text)
    record = {"text": text, "words": words, "construction": construction, "verbs": [], "pronouns": []}
    for pair in verbs.split():
        verb, subject = pair.split(">")
        record["verbs"].append({"verb": _index(words, verb, line), "subject": _index(words, subject, line)})
    for pair in pronouns.split():
        pronoun, antecedent = pair.split(">")
        entry = {"pronoun": _index(words, pronoun, line), "antecedent": _index(words, antecedent.rstrip("*"), line)}
        if antecedent.endswith("*"):
            entry["resolved_by"] = "meaning"
        record["pronouns"].append(entry)
    EnglishSentence.from_json(record, where=repr(line))  # the loader's own validation
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notation", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print the new items instead of appending them")
    args = parser.parse_args(argv)
    old = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = {r["text"] for r in old}
    new = []
    for line in args.notation.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            record = parse_line(line)
            if record["text"] in texts:
                raise ValueError(f"{record['text']!r} is already in the set")
            texts.add(record["text"])
            new.append(record)
    start = len(old)
    for k, record in enumerate(new):
        record["id"] = f"en-{start + k + 1:04d}"
    splits = assign_splits([(r["id"], r["construction"]) for r in old + new])
    if splits[:start] != [r.get("split") for r in old]:
        raise ValueError(f"the stored splits of {DATA} differ from the rule: fix the file before appending")
    for record, split in zip(new, splits[start:]):
        record["split"] = split
    first = ("id", "split")
    lines = [json.dumps({**{k: r[k] for k in first}, **{k: v for k, v in r.items() if k not in first}},
                        ensure_ascii=False) for r in new]
    if args.dry_run:
        print("\n".join(lines))
    else:
        with DATA.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
        print(f"appended {len(new)} items ({new[0]['id'] if new else '-'} ...) to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
