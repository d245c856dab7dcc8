"""Checks that catch annotation errors in the hand-annotated English set.

Each test states one rule of the annotation guide (``lib/headlab/english/README.md``) and fails
naming the item (its id and text) that breaks it. The word knowledge they need is small and
explicit: the nouns and names of the set with their gender class and number
(``tests/data/english_nouns.txt``), and the verb forms below.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from headlab.english import load_english
from headlab.english.split import SPLITS, assign_splits, hash_split

HERE = Path(__file__).parent
README = Path(resources.files("headlab.english")) / "README.md"
DATA = Path(resources.files("headlab.english")) / "english.jsonl"

# The annotated third-person pronouns, and what each one may refer to (classes of english_nouns.txt).
PRONOUN_AGREES = {
    "he": ({"m", "p"}, {"sg"}), "him": ({"m", "p"}, {"sg"}), "his": ({"m", "p"}, {"sg"}),
    "she": ({"f", "p"}, {"sg"}), "her": ({"f", "p"}, {"sg"}),
    "it": ({"t"}, {"sg"}), "its": ({"t"}, {"sg"}),
    "they": ({"m", "f", "p", "t"}, {"pl"}), "them": ({"m", "f", "p", "t"}, {"pl"}),
    "their": ({"m", "f", "p", "t"}, {"pl"}),
}
# Pronoun forms the set does not use (see the guide): reflexives and independent possessives.
UNUSED_PRONOUNS = {"himself", "herself", "itself", "themselves", "hers", "theirs"}
SUBJECT_PRONOUNS = {"i": None, "you": None, "we": "pl", "he": "sg", "she": "sg", "it": "sg", "they": "pl"}
CLOSED_CLASS = set(PRONOUN_AGREES) | set(SUBJECT_PRONOUNS) | UNUSED_PRONOUNS | {
    "me", "us", "my", "our", "your", "who", "whom", "that", "which", "the", "a", "an", "this", "these",
    "those", "every", "each", "some", "any", "to", "of", "in", "on", "and", "but", "or", "so", ".", ","}

# Finite forms: singular, plural, and forms that agree with either (past tense, modals).
SINGULAR = {"is", "was", "has", "does"}
PLURAL = {"are", "were", "have", "do"}
MODALS = {"will", "would", "can", "could", "shall", "should", "may", "might", "must"}
AUXILIARIES = SINGULAR | PLURAL | MODALS | {"had", "did", "am"}
# Irregular past forms (and present forms identical to the past): they agree with either number.
IRREGULAR_PAST = set("""
ate began bit blew bought bowed broke brought built came caught chose cost cut did drew drank drove
fed fell felt flew forgave forgot fought found froze gave got grew had held hid hit hung kept knew laid
led left lent let lit lost made meant met paid put ran rang read rode rose said sang sank sat saw sent
shook shot slept sold spent spoke stood stole struck swam swept taught thought threw told took tore
understood was went were woke won wore wrote""".split())
# Verbs of the set that are also nouns of english_nouns.txt ("The owls nest in the barn").
VERB_NOUNS = {"nest", "cost", "smell", "waters"}
# Bare (plural) present forms that end in -ing: not participles.
BARE_ING = {"bring", "ring", "sing", "spring", "string", "swing", "sting", "cling"}
# Adverbs that may stand inside a verb group ("has already left", "did not fit").
GROUP_ADVERBS = {"not", "never", "already", "still", "just", "also", "always", "often", "nearly", "finally",
                 "barely", "rarely", "now", "later", "soon", "even", "really", "all"}


def _lexicon() -> dict[str, tuple[str, str]]:
    out = {}
    for line in (HERE / "data" / "english_nouns.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            word, cls, number = line.split()
            assert cls in "mfpt" and number in ("sg", "pl", "any"), line
            assert word not in out, f"{word} is listed twice in english_nouns.txt"
            out[word] = (cls, number)
    return out


LEXICON = _lexicon()


def noun_entry(word: str) -> tuple[str, str] | None:
    """(class, number) of a noun or name, read through a possessive ``'s``/``s'``."""
    base = word[:-2] if word.endswith("'s") else word.rstrip("'")
    return LEXICON.get(base) or (LEXICON.get(base[0].lower() + base[1:]) if base else None)


def verb_number(word: str) -> str | None:
    """"sg" or "pl" for a present form that shows number, None for a form that agrees with both."""
    w = word.lower()
    if w in SINGULAR:
        return "sg"
    if w in PLURAL:
        return "pl"
    if w in MODALS or w in IRREGULAR_PAST or w.endswith("ed"):
        return None
    if w.endswith("s") and not w.endswith("ss"):
        return "sg"
    return "pl"


def subject_number(word: str) -> str | None:
    if word.lower() in SUBJECT_PRONOUNS:
        return SUBJECT_PRONOUNS[word.lower()]
    entry = noun_entry(word)
    return None if entry is None or entry[1] == "any" else entry[1]


def agrees(pronoun: str, word: str) -> bool:
    entry = noun_entry(word)
    classes, numbers = PRONOUN_AGREES[pronoun.lower()]
    return entry is not None and entry[0] in classes and (entry[1] in numbers or entry[1] == "any")


def marks(record: dict) -> set[int]:
    """Indices of the pronouns an item marks ``"resolved_by": "meaning"``."""
    return {p["pronoun"] for p in record["pronouns"] if p.get("resolved_by") == "meaning"}


def name(s) -> str:
    return f"{s.id} {s.text!r}"


@pytest.fixture(scope="module")
def items():
    return load_english()


@pytest.fixture(scope="module")
def records():
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------ form of the file

def test_words_join_to_the_text_and_indices_are_in_range(items):
    word = re.compile(r"^(?:[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*'?|[.,])$")
    for s in items:
        assert "".join(s.words) == "".join(s.text.split()), name(s)
        assert all(word.match(w) for w in s.words), f"{name(s)}: a word that is not one word: {s.words}"
        assert s.words[-1] == ".", f"{name(s)}: an item ends with a full stop"
        for i, j in s.verbs + s.pronouns:
            assert 0 <= i < len(s.words) and 0 <= j < len(s.words) and i != j, name(s)
        assert len({v for v, _ in s.verbs}) == len(s.verbs), f"{name(s)}: a verb annotated twice"
        assert len({p for p, _ in s.pronouns}) == len(s.pronouns), f"{name(s)}: a pronoun annotated twice"


def test_ids_are_stable_and_texts_unique(items, records):
    assert [s.id for s in items] == [f"en-{k:04d}" for k in range(1, len(items) + 1)]
    texts = Counter(" ".join(s.text.lower().split()) for s in items)
    assert not [t for t, n in texts.items() if n > 1], "duplicate texts"
    assert all(set(r) <= {"id", "split", "text", "words", "construction", "verbs", "pronouns"} for r in records)
    for r in records:
        for p in r["pronouns"]:
            assert set(p) <= {"pronoun", "antecedent", "resolved_by"} and p.get("resolved_by", "meaning") == "meaning"


def test_the_first_175_items_are_the_original_ones(records):
    """The original items stay first and unchanged (ids en-0001 ... en-0175), so results on
    them stay comparable; only the id, the split and the resolved_by marks were added."""
    core = [{k: r[k] for k in ("text", "words", "construction", "verbs")} | {
        "pronouns": [{"pronoun": p["pronoun"], "antecedent": p["antecedent"]} for p in r["pronouns"]]}
        for r in records[:175]]
    digest = hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()
    assert digest == "1cfe987931327c5fe170adea07ddbb1e98ada2077c635d373d63549321994187"


# ------------------------------------------------------------------ the rules, item by item
# Each rule takes one item and the set of its pronoun indices marked "resolved_by": "meaning",
# and returns its problems (empty when the item follows the rule).

def base_word(word: str) -> str:
    return (word[:-2] if word.endswith("'s") else word.rstrip("'")).lower()


def skip_adverbs(words, k: int) -> int:
    while k >= 0 and words[k].lower() in GROUP_ADVERBS:
        k -= 1
    return k


def subjects_are_nouns_or_pronouns_before_their_verbs(s, marked) -> list[str]:
    verbs = {v for v, _ in s.verbs}
    out = []
    for v, subj in s.verbs:
        sw, vw = s.words[subj], s.words[v]
        if subj > v:
            out.append(f"{name(s)}: subject {sw!r} after its verb {vw!r} (the set has no inversions)")
        if subj in verbs or not (sw.lower() in SUBJECT_PRONOUNS or noun_entry(sw) is not None):
            out.append(f"{name(s)}: subject {sw!r} of {vw!r} is neither a subject pronoun "
                       "nor a noun of english_nouns.txt")
    return out


def verbs_are_finite_words_of_their_groups(s, marked) -> list[str]:
    out = []
    for v, _ in s.verbs:
        w = s.words[v].lower()
        if w in CLOSED_CLASS or noun_entry(s.words[v]) is not None and w not in VERB_NOUNS:
            out.append(f"{name(s)}: {s.words[v]!r} is not a verb")
        if w.endswith("ing") and w not in BARE_ING:
            out.append(f"{name(s)}: {s.words[v]!r} is a participle")
        k = skip_adverbs(s.words, v - 1)
        if k >= 0 and s.words[k].lower() in AUXILIARIES | {"to", "been", "be"}:
            out.append(f"{name(s)}: {s.words[v]!r} follows {s.words[k]!r}: annotate the finite word of the group")
    return out


def every_finite_auxiliary_is_annotated(s, marked) -> list[str]:
    """A form of be/have/do or a modal is the finite word of its group unless another
    auxiliary or 'to' comes first ("would have", "to be")."""
    verbs = {v for v, _ in s.verbs}
    out = []
    for k, w in enumerate(s.words):
        if (w if k else w.lower()) in AUXILIARIES and k not in verbs:  # (w, not w.lower(): "May" the month)
            j = skip_adverbs(s.words, k - 1)
            if not (j >= 0 and s.words[j].lower() in AUXILIARIES | {"to"}):
                out.append(f"{name(s)}: the finite {w!r} (word {k}) has no subject annotation")
    return out


def verbs_agree_in_number(s, marked) -> list[str]:
    out = []
    for v, subj in s.verbs:
        want, have = verb_number(s.words[v]), subject_number(s.words[subj])
        if s.words[subj].lower() in ("i", "you"):
            continue
        if want is not None and have is not None and want != have:
            out.append(f"{name(s)}: {s.words[v]!r} is {want} but its subject {s.words[subj]!r} is {have}")
    return out


def every_pronoun_is_annotated(s, marked) -> list[str]:
    """No generic "it", no cataphora, no pronoun left out, no unused form."""
    annotated = {p for p, _ in s.pronouns}
    out = [f"{name(s)}: {s.words[p]!r} is not an annotated pronoun" for p in annotated
           if s.words[p].lower() not in PRONOUN_AGREES]
    for k, w in enumerate(s.words):
        if w.lower() in UNUSED_PRONOUNS:
            out.append(f"{name(s)}: {w!r} is a form the set does not use")
        if w.lower() in PRONOUN_AGREES and k not in annotated:
            out.append(f"{name(s)}: {w!r} (word {k}) has no antecedent")
    return out


def antecedents_are_nearest_earlier_nouns_that_agree(s, marked) -> list[str]:
    verbs = {v for v, _ in s.verbs}
    out = []
    for p, a in s.pronouns:
        pw, aw = s.words[p], s.words[a]
        if a > p:
            out.append(f"{name(s)}: antecedent {aw!r} after {pw!r} (cataphora is excluded)")
        if aw.lower() in CLOSED_CLASS or a in verbs or noun_entry(aw) is None:
            out.append(f"{name(s)}: antecedent {aw!r} is not a noun of english_nouns.txt")
        elif not agrees(pw, aw):
            out.append(f"{name(s)}: {pw!r} cannot refer to {aw!r} {noun_entry(aw)}")
        later = [k for k in range(a + 1, p) if base_word(s.words[k]) == base_word(aw)]
        if later:
            out.append(f"{name(s)}: {aw!r} is mentioned again at word {later[0]}, nearer to {pw!r}")
    return out


def head_words_are_not_noun_modifiers(s, marked) -> list[str]:
    """An annotated noun is the head of its phrase: "driver" in "the bus driver", not "bus"."""
    verbs = {v for v, _ in s.verbs}
    out = []
    for i in sorted({j for _, j in s.verbs} | {a for _, a in s.pronouns}):
        w = s.words[i]
        if w.lower() in SUBJECT_PRONOUNS or w.endswith("'s") or w.endswith("'"):
            continue
        if noun_entry(s.words[i + 1]) is not None and i + 1 not in verbs:
            out.append(f"{name(s)}: {w!r} is followed by the noun {s.words[i + 1]!r}: is {w!r} the head?")
    return out


def competitors(s, p: int, a: int) -> list[str]:
    """Earlier nouns other than the antecedent (and its repetitions) that agree with pronoun ``p``."""
    return [s.words[k] for k in range(p) if k != a and s.words[k].lower() not in PRONOUN_AGREES
            and agrees(s.words[p], s.words[k]) and base_word(s.words[k]) != base_word(s.words[a])]


def meaning_marks_match_competitors(s, marked) -> list[str]:
    """A pronoun is resolved by form when its antecedent is the only earlier noun of its
    gender and number; otherwise it is marked "resolved_by": "meaning"."""
    out = []
    for p, a in s.pronouns:
        rivals = competitors(s, p, a)
        if p in marked and not rivals:
            out.append(f"{name(s)}: {s.words[p]!r} -> {s.words[a]!r} is marked 'meaning' but has no competitor")
        elif p not in marked and rivals:
            out.append(f"{name(s)}: {s.words[p]!r} -> {s.words[a]!r} has competitors {rivals}: "
                       "mark it resolved_by meaning, or rewrite the item")
    return out


RULES = [subjects_are_nouns_or_pronouns_before_their_verbs, verbs_are_finite_words_of_their_groups,
         every_finite_auxiliary_is_annotated, verbs_agree_in_number, every_pronoun_is_annotated,
         antecedents_are_nearest_earlier_nouns_that_agree, head_words_are_not_noun_modifiers,
         meaning_marks_match_competitors]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_every_item_follows_the_rule(rule, items, records):
    problems = [msg for s, r in zip(items, records) for msg in rule(s, marks(r))]
    assert not problems, "\n".join(problems)


def test_agreement_checks_most_verbs(items):
    """The number check is not vacuous: most subject-verb pairs show their number."""
    shown = sum(verb_number(s.words[v]) is not None and subject_number(s.words[j]) is not None
                for s in items for v, j in s.verbs)
    assert shown >= 250


def test_verb_number_rules():
    assert [verb_number(w) for w in ("sleeps", "drift", "fell", "would", "is", "were", "passed", "cross")] == [
        "sg", "pl", None, None, "sg", "pl", None, "pl"]
    assert subject_number("children") == "pl" and subject_number("Rosa's") == "sg" and subject_number("sheep") is None


PLANTED = [  # (item id, how to break it: (item, marks) -> (item, marks), the rule that must catch it)
    ("en-0027", lambda s, m: (replace(s, words=s.words[:5] + ("are",) + s.words[6:]), m),  # "The key ... are"
     verbs_agree_in_number),
    ("en-0118", lambda s, m: (replace(s, pronouns=((9, 1), (11, 1))), m),  # them -> girl
     antecedents_are_nearest_earlier_nouns_that_agree),
    ("en-0118", lambda s, m: (replace(s, pronouns=((9, 1),)), m), every_pronoun_is_annotated),  # them left out
    ("en-0010", lambda s, m: (replace(s, verbs=()), m), every_finite_auxiliary_is_annotated),  # "was" left out
    ("en-0033", lambda s, m: (replace(s, verbs=((6, 1),)), m), verbs_are_finite_words_of_their_groups),  # "gone"
    ("en-0001", lambda s, m: (replace(s, verbs=((3, 1),)), m), subjects_are_nouns_or_pronouns_before_their_verbs),
    ("en-0248", lambda s, m: (s, set()), meaning_marks_match_competitors),  # them -> lions, zebras before it
    ("en-0247", lambda s, m: (replace(s, verbs=((3, 1), (8, 2))), m), head_words_are_not_noun_modifiers),  # "bus"
]


@pytest.mark.parametrize("item_id, breaks, rule", PLANTED, ids=[f"{i}-{r.__name__}" for i, _, r in PLANTED])
def test_rules_catch_planted_errors(item_id, breaks, rule, items, records):
    k = next(k for k, s in enumerate(items) if s.id == item_id)
    assert not rule(items[k], marks(records[k]))
    assert rule(*breaks(items[k], marks(records[k]))), f"{rule.__name__} misses an error planted in {item_id}"


# ------------------------------------------------------------------ counts, split, README

def readme_table() -> dict[str, tuple[int, int, int]]:
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| (\d+) \| (\d+) \| (\d+) \|$", README.read_text(encoding="utf-8"), re.M)
    return {label: (int(a), int(b), int(c)) for label, a, b, c in rows}


def test_readme_counts_equal_the_file(items):
    table = readme_table()
    counts = {c: (sum(s.construction == c for s in items), sum(len(s.verbs) for s in items if s.construction == c),
                  sum(len(s.pronouns) for s in items if s.construction == c))
              for c in {s.construction for s in items}}
    assert table == counts
    text = README.read_text(encoding="utf-8")
    total = f"{len(items)} items, {sum(len(s.verbs) for s in items)} verb→subject and " \
            f"{sum(len(s.pronouns) for s in items)} pronoun→antecedent annotations"
    assert total in text


def test_the_set_is_large_enough(items):
    assert sum(len(s.verbs) for s in items) >= 300
    assert sum(len(s.pronouns) for s in items) >= 300
    for split in SPLITS:
        half = load_english(split)
        assert sum(len(s.pronouns) for s in half) >= 140, split


def test_stored_split_is_the_documented_rule_and_balanced(items):
    assert [s.split for s in items] == assign_splits([(s.id, s.construction) for s in items])
    for c in {s.construction for s in items}:
        n = Counter(s.split for s in items if s.construction == c)
        assert abs(n["select"] - n["measure"]) <= 1, (c, n)
    select, measure = load_english("select"), load_english("measure")
    assert len(select) + len(measure) == len(items) and not {s.id for s in select} & {s.id for s in measure}
    with pytest.raises(ValueError, match="split='test'"):
        load_english("test")


def test_split_rule_never_moves_an_old_item():
    pairs = assign_splits([("en-0001", "simple"), ("en-0002", "pp"), ("en-0003", "simple")])
    assert pairs[0] == hash_split("en-0001") and pairs[1] == hash_split("en-0002") and pairs[2] != pairs[0]
    assert {hash_split(f"en-{k:04d}") for k in range(1, 9)} == set(SPLITS)
    old = [(f"x{k}", "abc"[k % 3]) for k in range(20)]
    new = old + [(f"y{k}", "abd"[k % 3]) for k in range(7)]
    assert assign_splits(new)[:20] == assign_splits(old)
    with pytest.raises(ValueError, match="twice"):
        assign_splits([("a", "simple"), ("a", "pp")])


# ------------------------------------------------------------------ the typing aid

def test_notation_lines_become_items():
    import importlib.util

    spec = importlib.util.spec_from_file_location("english_items", HERE.parent / "scripts" / "english_items.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    record = tool.parse_line("pronoun | Lucy visited her aunt's farm. She fed her goats. | visited>Lucy fed>She "
                             "| her#1>Lucy She>Lucy her#2>aunt's*")
    assert record["words"] == ["Lucy", "visited", "her", "aunt's", "farm", ".", "She", "fed", "her", "goats", "."]
    assert record["verbs"] == [{"verb": 1, "subject": 0}, {"verb": 7, "subject": 6}]
    assert record["pronouns"] == [{"pronoun": 2, "antecedent": 0}, {"pronoun": 6, "antecedent": 0},
                                  {"pronoun": 8, "antecedent": 3, "resolved_by": "meaning"}]
    with pytest.raises(ValueError, match="occurs 2 times; write her#1"):
        tool.parse_line("simple | Anna saw her dog and her cat. | saw>Anna | her>Anna")
    with pytest.raises(ValueError, match="no word 'dog'"):
        tool.parse_line("simple | The cat sleeps. | sleeps>dog |")
    with pytest.raises(ValueError, match="cannot split"):
        tool.parse_line("simple | The cat sleeps! | sleeps>cat |")
    with pytest.raises(ValueError, match="unknown construction"):
        tool.parse_line("poem | The cat sleeps. | sleeps>cat |")
