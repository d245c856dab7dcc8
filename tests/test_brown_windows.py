"""The Brown Corpus training task: windows inside one text, the repeat curriculum, the n-gram
baselines, the evaluation's chance scores, and a two-step training run, on made-up texts (every
run); the real corpus's windows when it is cached."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import brown_or_skip
from deviating.data import brown
from deviating.data.brown_windows import (
    EOT_ID, BrownWindows, add_repeats, ngram_baselines, window_starts,
)
from deviating.training.loop import train
from deviating.training.runs import save_run
from headlab.models.checkpoints import load_checkpoint
from deviating.training.recipes import RECIPES
from deviating.training.recipes.brown import brown_recipe

WORDS = ("the cat sat on a mat while the dog ran far away from home and then came back to eat some food "
         "that was left for him by a kind old man who lived in the small house near the river").split()


def made_up_texts(n_per_genre: int = 6) -> list[brown.Text]:
    """Texts of two genres, each a different rotation of WORDS, long enough for windows of 32 tokens."""
    texts = []
    for g, genre in (("a", "news"), ("k", "fiction")):
        for i in range(n_per_genre):
            words = WORDS[i:] + WORDS[:i]
            sentences = tuple(tuple((w, "nn") for w in words[j:j + 10]) for j in range(0, len(words), 10))
            texts.append(brown.Text(f"c{g}{i + 1:02d}", genre, sentences * 3))
    return texts


def test_window_starts_keep_every_window_inside_one_text():
    starts = window_starts([5, 2, 4], n_ctx=4)  # windows of 3 tokens after the EOT
    assert starts.tolist() == [0, 1, 2, 7, 8]  # the 2-token text has none; the third starts at 7
    with pytest.raises(ValueError, match="n_ctx=9"):
        window_starts([5, 2, 4], n_ctx=9)


def test_add_repeats_writes_the_stated_repeat_and_is_deterministic_per_seed():
    tokens = torch.arange(1, 4001).reshape(100, 40)  # every id distinct, so a copy is unmistakable
    out = add_repeats(tokens, 0.3, 3, 9, torch.Generator().manual_seed(7))
    again = add_repeats(tokens, 0.3, 3, 9, torch.Generator().manual_seed(7))
    other = add_repeats(tokens, 0.3, 3, 9, torch.Generator().manual_seed(8))
    assert torch.equal(out.tokens, again.tokens) and torch.equal(out.repeated, again.repeated)
    assert not torch.equal(out.tokens, other.tokens)
    assert 15 <= int(out.repeated.sum()) <= 45  # about 30 of 100
    for b in range(100):
        row, s, d, L = out.tokens[b], int(out.start[b]), int(out.period[b]), int(out.span_len[b])
        if not out.repeated[b]:
            assert torch.equal(row, tokens[b]) and s == d == L == 0
            continue
        assert 3 <= L <= 9 and d >= L and s >= 1 and s + d + L <= 40
        assert torch.equal(row[s + d:s + d + L], tokens[b, s:s + L])  # the span, written again
        changed = (row != tokens[b]).nonzero().flatten()
        assert changed.tolist() == list(range(s + d, s + d + L))  # nothing else touched
    assert not add_repeats(tokens, 0.0, 3, 9, torch.Generator().manual_seed(7)).repeated.any()
    assert add_repeats(tokens, 1.0, 3, 9, torch.Generator().manual_seed(7)).repeated.all()
    with pytest.raises(ValueError, match="2 \\* max_span <= n_ctx - 1 = 39"):
        add_repeats(tokens, 0.3, 3, 20, torch.Generator())


def test_ngram_baselines_match_a_hand_count():
    train_ids = [torch.tensor([0, 1, 2, 1, 2])]
    targets = torch.tensor([[0, 1, 2]])
    out = ngram_baselines(train_ids, targets, d_vocab=3)
    p_uni = [2 / 8, 3 / 8, 3 / 8]  # add-one counts
    assert out["unigram"] == pytest.approx(-(math.log(p_uni[1]) + math.log(p_uni[2])) / 2)
    # bigrams 0->1 (1 of 1) and 1->2 (2 of 2): the interpolated model at weight 0.99 is best
    lam = 0.99
    best = -(math.log(lam + (1 - lam) * p_uni[1]) + math.log(lam + (1 - lam) * p_uni[2])) / 2
    assert out["bigram"] == pytest.approx(best, rel=1e-5) and out["bigram"] < out["unigram"]


def test_bad_options_name_the_value():
    with pytest.raises(ValueError, match="repeat_fraction .* got 1.5"):
        BrownWindows(repeat_fraction=1.5)
    with pytest.raises(ValueError, match="vocab_size .* got 100"):
        BrownWindows(vocab_size=100)
    with pytest.raises(ValueError, match="max_span=40"):
        BrownWindows(n_ctx=64, max_span=40)


def test_training_windows_evaluation_and_a_short_run_on_made_up_texts(tmp_path):
    task = BrownWindows(vocab_size=300, n_ctx=32, repeat_fraction=0.5, min_span=4, max_span=10)
    p = task.prepared(made_up_texts())
    batch = task.sample(64, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (64, 32) and (batch.tokens[:, 0] == EOT_ID).all()
    assert not (batch.tokens[:, 1:] == EOT_ID).any()  # windows never reach a text boundary
    plain = batch.tokens[~batch.repeated, 1:]
    stream = p["stream"]
    for row in plain[:5]:  # a natural window is a stretch of one training text
        hits = [s for s in p["starts"].tolist() if torch.equal(stream[s:s + 31], row)]
        assert hits

    data = task.eval_data(16)
    assert data.text_repeats.shape == data.random_repeats.shape == (8, 1 + 2 * 15)
    assert torch.equal(data.text_repeats[:, 1:16], data.text_repeats[:, 16:])
    assert torch.equal(data.random_repeats[:, 1:16], data.random_repeats[:, 16:])
    # chance of the previous-token score: a uniform causal pattern's mean of 1 / (i + 1) over i >= 1
    assert data.chance["previous_token"] == pytest.approx(sum(1 / (i + 1) for i in range(1, 31)) / 30, rel=1e-5)
    assert 0 < data.chance["induction"] < data.chance["previous_token"]

    recipe = brown_recipe("brown-test", "made-up texts", task, steps=2, batch_size=4, eval_every=1, eval_size=16,
                          warmup=1, config={"d_model": 16, "n_heads": 2})
    result = train(recipe, progress=False)
    assert [r["step"] for r in result.curve] == [0, 1, 2]
    m = result.metrics
    for key in ("val_loss", "loss_text_first", "loss_text_second", "loss_random_first", "loss_random_second",
                "induction_best", "previous_token_l0", "induction_chance", "unigram_loss", "bigram_loss"):
        assert math.isfinite(m[key]), key
    assert m["previous_token_l0"] == max(m["previous_token"][0])
    assert result.phase_change is None  # two steps form no induction head
    assert task.phase_change({**m, "induction_best": 6 * m["induction_chance"], "loss_text_second": 1.0,
                              "loss_text_first": 4.0})
    assert not task.phase_change({**m, "induction_best": 4 * m["induction_chance"], "loss_text_second": 1.0,
                                  "loss_text_first": 4.0})
    assert not task.phase_change({**m, "induction_best": 6 * m["induction_chance"], "loss_text_second": 2.5,
                                  "loss_text_first": 4.0})
    assert task.tokenizer().decode(data.windows[0, :5].tolist()).startswith("<|endoftext|>")

    save_run(result, recipe, tmp_path / "run", "python -m deviating train brown-test")  # what `train NAME` does
    model, tok, provenance = load_checkpoint(tmp_path / "run")
    assert provenance["data"]["kind"] == "brown_windows" and provenance["data"]["repeat_fraction"] == 0.5
    assert tok.decode(data.windows[0, :5].tolist()) == task.tokenizer().decode(data.windows[0, :5].tolist())
    assert torch.allclose(model(data.windows), result.model(data.windows), atol=1e-5)


def test_the_brown_recipes_are_registered_without_loading_the_corpus():
    main, plain = RECIPES["brown-attn-2l"], RECIPES["brown-attn-2l-plain"]
    assert main.task.repeat_fraction == 1.0 and plain.task.repeat_fraction == 0.0
    assert (main.task.min_span, main.task.max_span) == (16, 48)
    for r in (main, plain):
        assert r.config.d_mlp == 0 and r.config.n_layers == 2
        assert r.config.d_vocab == r.task.vocab_size and r.config.n_ctx == r.task.n_ctx
        assert r.task._prepared is None  # noqa: SLF001 - importing the registry reads no corpus
    assert {k: v for k, v in main.to_dict().items() if k not in ("name", "description", "task")} == \
        {k: v for k, v in plain.to_dict().items() if k not in ("name", "description", "task")}


def test_real_corpus_windows_stay_inside_texts():
    brown_or_skip()
    task = BrownWindows(vocab_size=1024, n_ctx=128)
    p = task.prepared()
    lengths = [len(x) for x in p["train"]]
    ends = torch.tensor(lengths).cumsum(0)
    starts = p["starts"]
    text_of = torch.searchsorted(ends, starts, right=True)
    assert bool((starts + 127 <= ends[text_of]).all())  # the last token is in the same text
    assert len(p["validation"]) >= 40 and not set(map(id, p["train"])) & set(map(id, p["validation"]))
