"""The vocabulary of the synthetic language: word lists, inflection, genders, Zipf ranks.

Open-class words (nouns, adjectives, intransitive and transitive verbs) carry a Zipf
rank within their class; closed-class words (determiners, pronouns, prepositions, ...)
are fixed. `build_lexicon(seed_vocab)` is deterministic: the seed only decides which
lemma gets which Zipf rank and the gender of nouns whose gender English leaves open
(``teacher``, ``cat``). Every word form is unique across the whole vocabulary, so a
token's class never depends on context.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# ---------------------------------------------------------------------------
# Word lists. A noun entry is "singular" or "singular/plural" (irregular plural).
# ---------------------------------------------------------------------------

_MASCULINE = """
man/men boy king prince father brother son uncle husband monk wizard duke lord nephew
grandfather emperor knight gentleman/gentlemen groom fisherman/fishermen priest
"""
_FEMININE = """
woman/women girl queen princess mother sister daughter aunt wife/wives nun witch duchess
lady niece grandmother empress bride actress waitress heroine maid
"""
# People and animals: English leaves the gender open; the lexicon assigns m or f.
_ANIMATE_OPEN = """
teacher doctor farmer baker pilot sailor soldier student writer painter singer dancer lawyer
nurse judge guard thief/thieves child/children friend neighbor cousin stranger captain
driver hunter poet merchant chef butcher guest servant visitor traveler author artist
gardener shepherd mayor officer rider swimmer player clown giant dwarf/dwarves elf/elves
goblin pirate baby hero/heroes cat dog mouse/mice horse cow pig goat fox wolf/wolves bear
lion tiger rabbit frog bird duck goose/geese owl crow eagle snake turtle monkey donkey camel
zebra whale dolphin shark parrot spider bee ant beetle squirrel otter hedgehog lizard puppy
kitten pony lamb calf/calves hen swan penguin
"""
_NEUTER = """
key cabinet table chair book door window box cup lamp bottle basket bell boat car clock coin
drum flower garden house ladder letter map mirror pen pencil pillow plate ring rock rope
shoe spoon stone tree wagon wall wheel bridge candle castle tower cloud river road hill
field forest island lake mountain village city bench brush glass dish fork knife/knives
shelf/shelves loaf/loaves apple banana cake carrot egg peach pear potato/potatoes
tomato/tomatoes blanket bucket button carpet crown diamond feather flag gate hammer helmet
jar kite lantern necklace shield sword tent umbrella violin meadow pond statue temple tunnel
valley volcano/volcanoes
"""
# Verbs as "plural past"; the singular (3rd person) form is derived.
_INTRANSITIVE = """
sleep:slept run:ran sing:sang wait:waited laugh:laughed smile:smiled sit:sat swim:swam
fall:fell shine:shone dance:danced arrive:arrived rest:rested cry:cried wander:wandered
yawn:yawned shiver:shivered grow:grew vanish:vanished glow:glowed listen:listened
bark:barked dream:dreamed speak:spoke hide:hid stay:stayed return:returned sneeze:sneezed
travel:traveled whisper:whispered giggle:giggled snore:snored
"""
_TRANSITIVE = """
chase:chased see:saw like:liked help:helped follow:followed find:found love:loved hate:hated
visit:visited carry:carried push:pushed pull:pulled admire:admired remember:remembered
fear:feared feed:fed meet:met greet:greeted praise:praised blame:blamed avoid:avoided
teach:taught know:knew trust:trusted thank:thanked call:called warn:warned invite:invited
ignore:ignored build:built hold:held keep:kept bring:brought want:wanted protect:protected
catch:caught touch:touched bite:bit kick:kicked hug:hugged
"""
_ADJECTIVES = """
old young happy sad tall small big red green blue quiet loud brave clever lazy hungry tired
angry gentle proud calm busy famous strange shy lucky wild kind cruel polite rude honest
sleepy noisy funny silly wise grumpy cheerful curious eager fierce jolly lonely nervous
patient clumsy golden pale shiny soft tiny ugly warm cold wet dry heavy dark bright dusty
empty fresh frozen gray purple yellow pink brown white black rich poor strong weak quick
slow broken dirty clean
"""

DETERMINERS = {"the": None, "a": "sg", "an": "sg", "some": "pl", "this": "sg", "these": "pl"}
SUBJECT_PRONOUNS = {("sg", "m"): "he", ("sg", "f"): "she", ("sg", "n"): "it", "pl": "they"}
OBJECT_PRONOUNS = {("sg", "m"): "him", ("sg", "f"): "her", ("sg", "n"): "it", "pl": "them"}
COPULA = {"sg": "is", "pl": "are", "past_sg": "was", "past_pl": "were"}
NOUN_PREPOSITIONS = ("near", "behind", "beside", "with", "under", "from", "above", "of", "to", "inside")
FRONT_PREPOSITIONS = ("in", "after", "before", "near", "behind")
ADVERBS = ("yesterday", "today", "later", "then", "suddenly", "meanwhile", "soon", "now")
RELATIVE = "that"
PUNCTUATION = (".", ",")
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")

OPEN_CLASSES = ("noun", "adj", "intrans", "trans")


def pluralize(noun: str) -> str:
    """Regular English plural: box -> boxes, city -> cities, cat -> cats."""
    if noun.endswith(("s", "sh", "ch", "x", "z")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def third_singular(verb: str) -> str:
    """Present-tense third-person singular: chase -> chases, carry -> carries, push -> pushes."""
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


@dataclass(frozen=True)
class Lemma:
    """One open-class lemma.

    `word_class` is "noun", "adj", "intrans" or "trans"; `rank` is its Zipf rank within the
    class (1 = most frequent); `prob` its probability of filling a slot of its class,
    ``prob = rank**-alpha / sum_r r**-alpha``. `forms` maps a form name to the word:
    nouns have "sg", "pl"; verbs "sg", "pl", "past"; adjectives "base". `gender` is
    "m", "f" or "n" for nouns, None otherwise.
    """

    lemma: str
    word_class: str
    rank: int
    prob: float
    forms: dict[str, str]
    gender: str | None = None


@dataclass(frozen=True)
class Lexicon:
    """All lemmas by class (each list sorted by rank) and the index from word form to lemma."""

    classes: dict[str, list[Lemma]]
    form_of: dict[str, tuple[Lemma, str]]  # word -> (lemma, form name)

    def cumulative(self, word_class: str) -> list[float]:
        """Cumulative slot probabilities of `word_class`, in rank order (for sampling)."""
        total, out = 0.0, []
        for lemma in self.classes[word_class]:
            total += lemma.prob
            out.append(total)
        return out


def _words(block: str) -> list[str]:
    return block.split()


def _zipf(n: int, alpha: float) -> list[float]:
    weights = [r ** -alpha for r in range(1, n + 1)]
    total = sum(weights)
    return [w / total for w in weights]


def build_lexicon(seed_vocab: int = 0, zipf_alpha: float = 1.2) -> Lexicon:
    """Build the open-class lexicon: genders, ranks (shuffled by `seed_vocab`), Zipf probabilities.

    Raises ValueError if two lemmas share a word form (the lists are checked, not trusted).
    """
    # a frozen seed key (the module's name before 0.2): changing it changes the lexicon
    rng = random.Random(f"headlab.language.lexicon:{seed_vocab}")
    raw: dict[str, list[tuple[str, dict[str, str], str | None]]] = {c: [] for c in OPEN_CLASSES}
    for block, gender in ((_MASCULINE, "m"), (_FEMININE, "f"), (_ANIMATE_OPEN, None), (_NEUTER, "n")):
        for entry in _words(block):
            sg, _, pl = entry.partition("/")
            g = gender if gender is not None else rng.choice("mf")
            raw["noun"].append((sg, {"sg": sg, "pl": pl or pluralize(sg)}, g))
    for block, cls in ((_INTRANSITIVE, "intrans"), (_TRANSITIVE, "trans")):
        for entry in _words(block):
            pl, _, past = entry.partition(":")
            raw[cls].append((pl, {"sg": third_singular(pl), "pl": pl, "past": past}, None))
    raw["adj"] = [(a, {"base": a}, None) for a in _words(_ADJECTIVES)]

    closed = set(DETERMINERS) | set(SUBJECT_PRONOUNS.values()) | set(OBJECT_PRONOUNS.values())
    closed |= set(COPULA.values()) | set(NOUN_PREPOSITIONS) | set(FRONT_PREPOSITIONS)
    closed |= set(ADVERBS) | {RELATIVE} | set(PUNCTUATION) | set(SPECIAL_TOKENS)

    classes: dict[str, list[Lemma]] = {}
    form_of: dict[str, tuple[Lemma, str]] = {}
    for cls in OPEN_CLASSES:
        entries = raw[cls]
        order = list(range(len(entries)))
        rng.shuffle(order)
        probs = _zipf(len(entries), zipf_alpha)
        lemmas = []
        for rank0, i in enumerate(order):
            name, forms, gender = entries[i]
            lemma = Lemma(name, cls, rank0 + 1, probs[rank0], forms, gender)
            for form_name, word in forms.items():
                if word in form_of or word in closed:
                    raise ValueError(f"word form {word!r} of {cls} {name!r} is not unique in the lexicon")
                form_of[word] = (lemma, form_name)
            lemmas.append(lemma)
        classes[cls] = lemmas
    return Lexicon(classes, form_of)
