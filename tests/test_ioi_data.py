"""The indirect-object data: the sentences' ground truth, the token positions, the ABC twins, the
held-out split, and the tokenizer that keeps names whole (on the real corpus when it is cached)."""

from __future__ import annotations

import random

import pytest
import torch

from conftest import brown_or_skip
from deviating.data.ioi.names import CANDIDATE_NAMES, EXTRA_NAMES, name_token_ids, name_tokenizer, split_names
from deviating.data.ioi.prompts import POSITIONS, corrupt_abc, logit_diff, make_prompts
from deviating.data.brown import Text
from deviating.data.ioi.sentences import (
    ACTIVITIES, ADJECTIVES, GIVINGS, HELDOUT_PARTS, IOI_TEMPLATES, LEAD_INS, N_TRAIN_TEMPLATES, OTHER_TEMPLATES,
    BrownFrameWords, brown_frame_other_sentence, brown_frame_sentence, brown_frame_words, heldout_words, ioi_sentence, other_sentence, passage,
)
from deviating.data.ioi.windows import IoiWindows, ioi_split
from deviating.training.recipes import RECIPES

NAMES = ["Mary", "John", "Alice", "Peter", "Susan", "George", "Kate", "Henry", "Ruth", "Walter"]
TEXTS = ["When the man went to the store, he gave a book to his friend. The river was quiet."] * 40


@pytest.fixture(scope="module")
def tok():
    return name_tokenizer(TEXTS, NAMES, vocab_size=300)


def test_ioi_sentence_spans_point_at_the_names_in_both_orders():
    for order in ("ABBA", "BABA"):
        x = ioi_sentence(0, "Mary", "John", order, "store", "ring")
        assert x.text == ("When Mary and John went to the store, John gave a ring to" if order == "ABBA"
                          else "When John and Mary went to the store, John gave a ring to")
        assert x.text[slice(*x.spans["IO"])] == "Mary"
        assert x.text[slice(*x.spans["S1"])] == x.text[slice(*x.spans["S2"])] == "John"
        assert (x.spans["IO"][0] < x.spans["S1"][0]) == (order == "ABBA")
        assert x.spans["S2"][0] > max(x.spans["IO"][0], x.spans["S1"][0])


def test_ioi_sentence_rejects_bad_arguments():
    with pytest.raises(ValueError, match="order"):
        ioi_sentence(0, "Mary", "John", "ABAB", "store", "ring")
    with pytest.raises(ValueError, match="differ"):
        ioi_sentence(0, "Mary", "Mary", "ABBA", "store", "ring")
    with pytest.raises(ValueError, match="template"):
        ioi_sentence(len(IOI_TEMPLATES), "Mary", "John", "ABBA", "store", "ring")


def test_tokenizer_keeps_every_name_whole_and_leaves_other_words_alone(tok):
    for n in NAMES:
        assert len(tok.encode(" " + n).ids) == 1 and len(tok.encode(n).ids) == 1
    base = name_tokenizer(TEXTS, ["Zed"], vocab_size=300)  # a name absent from the texts changes nothing else
    assert base.encode(TEXTS[0]).ids == tok.encode(TEXTS[0]).ids
    assert len(set(name_token_ids(tok, NAMES))) == len(NAMES)
    with pytest.raises(ValueError, match="not single tokens"):
        name_token_ids(base, ["Mary"])


def test_tokenizer_pads_to_a_fixed_size_and_refuses_too_small_a_size():
    assert name_tokenizer(TEXTS, NAMES, 300, total_size=400).get_vocab_size() == 400
    with pytest.raises(ValueError, match="total_size"):
        name_tokenizer(TEXTS, NAMES, 300, total_size=301)


def test_prompt_positions_are_the_name_tokens_and_orders_are_balanced(tok):
    p = make_prompts(tok, NAMES, range(len(IOI_TEMPLATES)), 64, seed=3)
    assert p.orders.count("ABBA") == p.orders.count("BABA") == 32
    rows = torch.arange(len(p))
    assert (p.tokens[:, 0] == 0).all()
    # every template puts a word before the first name, so every name is the " Name" token the answer is
    assert torch.equal(p.tokens[rows, p.pos["IO"]], p.io_id)
    assert torch.equal(p.tokens[rows, p.pos["S1"]], p.s_id)
    assert torch.equal(p.tokens[rows, p.pos["S2"]], p.s_id)
    for i, x in enumerate(p.sentences):
        ids = tok.encode(x.text).ids
        assert p.pos["END"][i] == len(ids)  # EOT first, so the last token sits at len(ids)
        for name in ("S1", "S2", "IO"):
            word = tok.decode([int(p.tokens[i, p.pos[name][i]])]).strip()
            assert word == (x.io if name == "IO" else x.s)
        assert p.pos["S2"][i] > max(p.pos["IO"][i], p.pos["S1"][i])
        assert tok.id_to_token(int(p.io_id[i])) == "Ġ" + x.io and tok.id_to_token(int(p.s_id[i])) == "Ġ" + x.s


def test_prompts_are_deterministic_given_the_seed(tok):
    a, b, c = (make_prompts(tok, NAMES, [0, 1, 2], 16, seed=s) for s in (5, 5, 6))
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


def test_abc_twins_line_up_with_three_different_names(tok):
    p = make_prompts(tok, NAMES, range(len(IOI_TEMPLATES)), 32, seed=1)
    q = corrupt_abc(tok, p, NAMES, seed=2)
    assert q.tokens.shape == p.tokens.shape
    for k in POSITIONS:
        assert torch.equal(q.pos[k], p.pos[k])
    rows = torch.arange(len(p))
    three = torch.stack([q.tokens[rows, q.pos[k]] for k in ("S1", "IO", "S2")], 1)
    decoded = [[tok.decode([int(t)]).strip() for t in row] for row in three]
    assert all(len(set(r)) == 3 for r in decoded)
    # outside the three name slots the twin is the clean prompt
    mask = torch.ones_like(p.tokens, dtype=torch.bool)
    for k in ("S1", "IO", "S2"):
        mask[rows, p.pos[k]] = False
    assert torch.equal(p.tokens[mask], q.tokens[mask])
    assert torch.equal(q.io_id, p.io_id) and torch.equal(q.s_id, p.s_id)


def test_logit_diff_reads_the_end_position(tok):
    p = make_prompts(tok, NAMES, [0], 4, seed=0)
    logits = torch.zeros(4, p.tokens.shape[1], tok.get_vocab_size())
    rows = torch.arange(4)
    logits[rows, p.pos["END"], p.io_id] = 2.0
    logits[rows, p.pos["END"] - 1, p.s_id] = 9.0  # a position before END: ignored
    assert torch.equal(logit_diff(logits, p), torch.full((4,), 2.0))
    with pytest.raises(ValueError, match="n_prompts"):
        logit_diff(logits[:2], p)


def _parts_of(template: str) -> tuple[str, str, str]:
    """(lead-in, activity, giving clause) of a composed template, read back from its text."""
    lead = next(b + "|" + j for b, j in LEAD_INS if template.startswith(b + "{A}") and j + "{S}" in template)
    act = next(a for a in ACTIVITIES if "{B} " + a in template)
    give = next(g for g in GIVINGS if any(template.endswith("{S} " + g.replace("{OBJECT}", adj + "{OBJECT}"))
                                          for adj in ADJECTIVES))
    return lead, act, give


def test_templates_are_composed_and_held_out_ones_share_no_part_with_training_ones():
    n_train = {k: len(v) - HELDOUT_PARTS[k] for k, v in
               {"LEAD_INS": LEAD_INS, "ACTIVITIES": ACTIVITIES, "GIVINGS": GIVINGS}.items()}
    assert N_TRAIN_TEMPLATES >= 1000 and len(IOI_TEMPLATES) - N_TRAIN_TEMPLATES >= 100
    assert not any(t.startswith("{") for t in IOI_TEMPLATES)  # a name opening the text is another token
    assert len(set(IOI_TEMPLATES)) == len(IOI_TEMPLATES)
    train = [_parts_of(t) for t in IOI_TEMPLATES[:N_TRAIN_TEMPLATES]]
    held = [_parts_of(t) for t in IOI_TEMPLATES[N_TRAIN_TEMPLATES:]]
    for k in range(3):
        assert not {p[k] for p in train} & {p[k] for p in held}
    assert len({p[0] for p in train}) == n_train["LEAD_INS"] and len({p[2] for p in train}) == n_train["GIVINGS"]
    assert len({p[1] for p in held}) == HELDOUT_PARTS["ACTIVITIES"]


def test_no_fixed_distance_marks_s2_or_the_answer(tok):
    p = make_prompts(tok, NAMES, range(N_TRAIN_TEMPLATES), 200, seed=4)
    assert len(set((p.pos["END"] - p.pos["S2"]).tolist())) >= 4
    assert len(set((p.pos["S2"] - p.pos["IO"]).tolist())) >= 4


def test_passages_use_only_the_names_and_templates_given():
    rng = random.Random(0)
    text = " ".join(passage(rng, NAMES[:4], [0, 1], 12) for _ in range(50))
    assert not any(n in text for n in NAMES[4:])
    for t in range(N_TRAIN_TEMPLATES, len(IOI_TEMPLATES)):  # no held-out giving clause occurs
        assert IOI_TEMPLATES[t].split("{S}")[1].split("{")[0] not in text
    assert other_sentence(random.Random(1), NAMES) != other_sentence(random.Random(2), NAMES)
    assert len(OTHER_TEMPLATES) >= 10
    with pytest.raises(ValueError, match="cast_size"):
        passage(rng, NAMES, [0], 4, cast_size=1)


def test_the_cast_brings_other_names_into_other_sentences_only():
    ioi_only = " ".join(passage(random.Random(s), NAMES[:4], [0, 1], 8, ioi_fraction=1.0, cast_names=NAMES)
                        for s in range(40))
    assert not any(n in ioi_only for n in NAMES[4:])
    others = [passage(random.Random(s), NAMES[:4], [0, 1], 8, ioi_fraction=0.0, cast_names=NAMES, cast_size=3)
              for s in range(40)]
    assert set(NAMES[4:]) <= set(" ".join(others).replace(".", " ").replace(",", " ").split())
    for text in others:  # a passage's other sentences use its cast of three names, again and again
        used = {n for n in NAMES if n in text.replace(".", " ").replace(",", " ").replace("'s", " ").split()}
        assert 2 <= len(used) <= 3


def _cast_words(text):
    return set(text.replace(".", " ").replace(",", " ").replace("'s", " ").split())


def test_a_held_out_share_sets_how_often_the_cast_is_held_out_and_none_leaves_the_text_unchanged():
    train, held = NAMES[:4], NAMES[4:]
    kw = dict(ioi_fraction=0.0, cast_names=NAMES, cast_size=3)
    assert [passage(random.Random(s), train, [0], 8, **kw) for s in range(5)] == \
        [passage(random.Random(s), train, [0], 8, cast_heldout_share=None, **kw) for s in range(5)]
    for share, lo, hi in ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.55, 0.50, 0.60)):
        texts = [passage(random.Random(s), train, [0], 8, cast_heldout_share=share, **kw) for s in range(400)]
        casts = [[n for n in NAMES if n in _cast_words(t)] for t in texts]
        assert all(2 <= len(c) <= 3 for c in casts)  # a cast of three, of whom at least two speak
        members = [n for c in casts for n in c]
        frac = sum(n in held for n in members) / len(members)
        assert lo <= frac <= hi, (share, frac)
    # uniform draws would give 6 of 10 names held out, so a share of 0 is a real restriction
    uniform = [passage(random.Random(s), train, [0], 8, **kw) for s in range(400)]
    assert any(set(held) & _cast_words(t) for t in uniform)
    ioi = " ".join(passage(random.Random(s), train, [0, 1], 8, ioi_fraction=1.0, cast_names=NAMES,
                           cast_heldout_share=1.0) for s in range(40))
    assert not set(held) & _cast_words(ioi)  # held-out names never enter an indirect-object sentence


def test_a_held_out_share_refuses_bad_values_and_too_few_names():
    for bad in (-0.1, 1.5, True, "0.5", float("nan")):
        with pytest.raises(ValueError, match=f"cast_heldout_share must be a number in \\[0, 1\\] or None, got {bad!r}"):
            passage(random.Random(0), NAMES[:4], [0], 4, cast_names=NAMES, cast_heldout_share=bad)
    with pytest.raises(ValueError, match="needs at least cast_size=3 names in cast_names that are not in names, got 2"):
        passage(random.Random(0), NAMES[:8], [0], 4, cast_names=NAMES, cast_heldout_share=0.5)
    with pytest.raises(ValueError, match="cast_heldout_share must be None or a number in \\[0, 1\\], got 2"):
        from deviating.data.ioi.windows import IoiWindows
        IoiWindows(cast_heldout_share=2)


WORDS = BrownFrameWords(verbs=("found", "led", "kept"), nouns=("floor", "mind", "box"), prepositions=("into", "of"),
                        conjunctions=("because", "while"))


def test_heldout_words_are_the_held_out_parts_words_but_shared_function_words():
    assert heldout_words() == {"once", "as", "sunday", "noon", "later", "walked", "left", "reached", "waited",
                               "offered", "brought", "showed", "threw"}
    train = " ".join(" ".join(p) if isinstance(p, tuple) else p for p in LEAD_INS[:-4] + ACTIVITIES[:-4]
                     + GIVINGS[:-4]).lower().replace(",", " ").replace(".", " ").split()
    assert heldout_words() & set(train) == {"as"}  # "Just as" trains; "As" alone is a held-out lead-in


def test_brown_frame_words_rank_by_frequency_and_never_take_a_held_out_word():
    def sentence(*pairs):
        return tuple(pairs)
    texts = [Text("ca01", "news", (
        sentence(("offered", "vbd"), ("offered", "vbd"), ("offered", "vbd"), ("gave", "vbd"), ("gave", "vbd"),
                 ("sold", "vbd"), ("Sold", "vbd"), ("box", "nn"), ("box", "nn-tl"), ("dog", "nn"), ("noon", "nn"),
                 ("noon", "nn"), ("into", "in"), ("of", "in"), ("because", "cs"), ("as", "cs"), ("as", "cs"),
                 ("while", "cs")),))]
    words = brown_frame_words(texts)
    assert words.verbs == ("gave", "sold") and words.nouns == ("box", "dog")  # "offered", "noon" held out
    assert words.prepositions == ("into", "of") and words.conjunctions == ("because", "while")
    with pytest.raises(ValueError, match="too few words"):
        brown_frame_words(texts, n_verbs=1)


def test_a_brown_frame_names_the_subject_twice_and_ends_with_the_indirect_object():
    for seed in range(200):
        text = brown_frame_sentence(random.Random(seed), NAMES[:4], WORDS)
        assert text == brown_frame_sentence(random.Random(seed), NAMES[:4], WORDS)
        assert text.endswith(".") and " to " in text
        tokens = text[:-1].replace(",", " ").replace(".", " ").split()
        io = tokens[-1]
        names = [t for t in tokens if t in NAMES]
        assert len(names) == 4 and names.count(io) == 2 and io in NAMES[:4]
        s = next(n for n in names if n != io)
        assert names.count(s) == 2 and names[2] == s  # S1 in the pair, S2 the giver, then the IO
        assert tokens[tokens.index(s, tokens.index(names[1]) + 1) + 1] in WORDS.verbs  # the giver's verb


def test_frames_replace_a_share_of_the_indirect_object_sentences_and_nothing_at_zero():
    plain = passage(random.Random(3), NAMES[:4], [0, 1], 12, cast_names=NAMES)
    assert passage(random.Random(3), NAMES[:4], [0, 1], 12, cast_names=NAMES, frame_words=WORDS,
                   frame_share=0.0) == plain  # no extra draw at 0: a template-only text is unchanged
    framed = " ".join(passage(random.Random(s), NAMES[:4], [0], 8, ioi_fraction=1.0, frame_words=WORDS,
                              frame_share=1.0) for s in range(20))
    assert "went to the" not in framed and "gave a" not in framed  # template 0's parts never occur
    assert framed.count(" to ") >= 8 * 20
    half = [passage(random.Random(s), NAMES[:4], [0], 8, ioi_fraction=1.0, frame_words=WORDS, frame_share=0.5)
            for s in range(40)]
    templated = sum(t.count("went to the") for t in half)
    assert 0.35 * 320 < templated < 0.65 * 320
    with pytest.raises(ValueError, match="frame_share must be a number in \\[0, 1\\], got 1.5"):
        passage(random.Random(0), NAMES, [0], 4, frame_words=WORDS, frame_share=1.5)
    with pytest.raises(ValueError, match="needs frame_words"):
        passage(random.Random(0), NAMES, [0], 4, frame_share=0.5)


def test_an_other_frame_repeats_a_name_but_never_ends_with_one():
    shapes = set()
    for seed in range(300):
        text = brown_frame_other_sentence(random.Random(seed), NAMES[:3], WORDS)
        assert text == brown_frame_other_sentence(random.Random(seed), NAMES[:3], WORDS)
        tokens = text[:-1].replace(",", " ").replace(".", " ").split()
        names = [t for t in tokens if t in NAMES]
        assert text.endswith(".") and tokens[-1] in WORDS.nouns and tokens[-2] == "the"
        assert set(names) <= set(NAMES[:3]) and len(names) == len(set(names)) + 1  # one name again
        assert names[-1] in names[:-1]  # the one who acts last was named before
        assert tokens[tokens.index(names[-1], tokens.index(names[-2]) + 1) + 1] in WORDS.verbs
        shapes.add(len(names))
    assert shapes == {2, 3}  # one name twice, or a pair and one of it again


def test_other_frames_take_the_casts_names_and_a_share_of_the_other_sentences():
    kwargs = dict(cast_names=NAMES, cast_size=3, frame_words=WORDS)
    plain = passage(random.Random(5), NAMES[:4], [0, 1], 12, **kwargs)
    assert passage(random.Random(5), NAMES[:4], [0, 1], 12, other_frame_share=0.0, **kwargs) == plain
    framed = [passage(random.Random(s), NAMES[:4], [0], 8, ioi_fraction=0.0, other_frame_share=1.0, **kwargs)
              for s in range(40)]
    text = " ".join(framed)
    assert not any(t.format(A="", B="", PLACE="", OBJECT="").strip(" .,") in text for t in OTHER_TEMPLATES)
    assert set(NAMES[4:]) <= set(text.replace(".", " ").replace(",", " ").split())  # held-out names too
    assert not any(f"to {n}" in text for n in NAMES)  # nothing is given to anyone by name
    half = " ".join(passage(random.Random(s), NAMES[:4], [0], 8, ioi_fraction=0.0, other_frame_share=0.5,
                            **kwargs) for s in range(40))
    n_frames = sum(half.replace(",", " ").replace(".", " ").split().count(v) for v in WORDS.verbs) / 2
    assert 0.35 * 320 < n_frames < 0.65 * 320  # two frame verbs a sentence, 320 sentences
    with pytest.raises(ValueError, match="other_frame_share must be a number in \\[0, 1\\], got -0.1"):
        passage(random.Random(0), NAMES, [0], 4, frame_words=WORDS, other_frame_share=-0.1)
    with pytest.raises(ValueError, match="other_frame_share > 0 needs frame_words"):
        passage(random.Random(0), NAMES, [0], 4, other_frame_share=0.5)


def test_extra_names_are_new_plain_first_names_that_brown_never_uses():
    assert len(EXTRA_NAMES) == 200 == len(set(EXTRA_NAMES))
    assert not set(EXTRA_NAMES) & set(CANDIDATE_NAMES)
    assert all(n.isalpha() and n[0].isupper() and n[1:].islower() and 3 <= len(n) <= 8 for n in EXTRA_NAMES)
    brown_or_skip()
    from deviating.data import brown
    words = {w.lower() for t in brown.load() for s in t.sentences for w, _ in s}
    assert not {n.lower() for n in EXTRA_NAMES} & words


def test_extra_names_join_the_training_names_and_leave_the_held_out_names_alone():
    texts = [Text("ca01", "news", (tuple((n, "np") for n in NAMES),))]
    plain, extra = ioi_split(texts), ioi_split(texts, extra_names=7)
    assert extra.train_names == plain.train_names + EXTRA_NAMES[:7]
    assert extra.heldout_names == plain.heldout_names and plain.heldout_names == ("Henry", "Ruth")
    assert ioi_split(texts, 0) == plain
    assert (extra.train_templates, extra.heldout_templates) == (plain.train_templates, plain.heldout_templates)
    for bad in (-1, 201, True, 1.5, "3", None):
        with pytest.raises(ValueError, match=f"extra_names must be an int from 0 to 200 .*got {bad!r}"):
            ioi_split(texts, bad)
        with pytest.raises(ValueError, match=f"extra_names must be an int from 0 to 200 .*got {bad!r}"):
            IoiWindows(extra_names=bad)


def test_split_names_holds_out_every_fifth():
    train, held = split_names([f"N{i}" for i in range(20)])
    assert held == ["N2", "N7", "N12", "N17"] and not set(train) & set(held) and len(train) == 16
    with pytest.raises(ValueError, match="distinct"):
        split_names(["A", "A"])


def test_the_recipe_is_registered_and_the_real_split_holds_names_and_templates_out():
    assert {"ioi-gpt", "ioi-gpt-s1", "ioi-gpt-s2"} <= set(RECIPES)
    brown_or_skip()
    task = RECIPES["ioi-gpt"].task
    p = task.prepared()
    split = p["split"]
    assert len(split.train_names) + len(split.heldout_names) >= 100
    tok = p["tokenizer"]
    assert tok.get_vocab_size() == task.d_vocab
    for n in split.train_names + split.heldout_names:
        assert len(tok.encode(" " + n).ids) == 1
    generated = " ".join(p["generated_texts"])
    words = set(generated.replace(".", " ").replace(",", " ").replace("'s", " ").split())
    assert set(split.train_names) | set(split.heldout_names) <= words  # every name recurs in some passage
    for t in split.heldout_templates:  # the held-out activities and giving clauses never occur
        act, give = _parts_of(IOI_TEMPLATES[t])[1:]
        assert act.split("{")[0] not in generated and give.split("{")[0].split(" to")[0] not in generated
    assert split.train_templates == tuple(range(N_TRAIN_TEMPLATES))
