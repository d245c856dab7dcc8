"""The synthetic tasks of chapters 1 and 2 (deviating.data.two_relations, deviating.data.windows) and their recipes
and checkpoints."""

from __future__ import annotations

import json
import math

import pytest
import torch

from headlab.models.checkpoints import CHECKPOINT_DIR
from headlab.models.gpt import GPT, GPTConfig
from deviating.data.two_relations import TwoRelations, answer_metrics, word_tokenizer
from deviating.data.windows import LanguageWindows


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------- TwoRelations


def test_two_relations_sequences_follow_the_rule_read_as_text():
    task = TwoRelations(n_letters=8, n_triples=5)
    batch = task.sample(64, gen())
    words = task.tokenizer().convert_ids_to_tokens
    assert batch.tokens.shape == (64, task.n_ctx) == (64, 17)
    for row, query, same in zip(batch.tokens, batch.query, batch.same_case):
        text = words(row.tolist())
        assert text[0] == "<bos>" and text[1].isalpha()
        topic = text[1]
        for t in range(task.n_triples):
            x, sep, y = text[2 + 3 * t: 5 + 3 * t]
            assert sep == ";" and x.isalpha()
            assert y == (topic if topic.isupper() else x)  # the rule, on the letters themselves
            i = 3 + 3 * t  # the ';'
            assert bool(query[i]) and bool(same[i]) == (x.isupper() == topic.isupper())
        assert int(query.sum()) == task.n_triples and not bool(same[~query].any())


def test_two_relations_sampling_is_deterministic_and_uses_every_letter():
    task = TwoRelations()
    a, b = task.sample(32, gen(3)), task.sample(32, gen(3))
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, task.sample(32, gen(4)).tokens)
    letters = task.sample(512, gen(0)).tokens[:, 1:]
    assert set(letters[letters < task.n_letters].unique().tolist()) == set(range(task.n_letters))
    assert torch.equal(task.eval_data(16).tokens, task.eval_data(16).tokens)
    tokens, mask = task.train_batch(4, gen(1))
    assert mask is None and tokens.shape == (4, task.n_ctx)
    assert next(task.train_batches(4, gen(1))).shape == (4, task.n_ctx)


def test_two_relations_rejects_bad_sizes():
    with pytest.raises(ValueError, match="even"):
        TwoRelations(n_letters=7)
    with pytest.raises(ValueError, match="n_triples"):
        TwoRelations(n_triples=0)


def test_answer_metrics_on_planted_logits():
    task = TwoRelations(n_letters=4, n_triples=3)
    batch = task.sample(5, gen())
    tokens, query = batch.tokens, batch.query
    perfect = torch.nn.functional.one_hot(tokens.roll(-1, dims=1), task.d_vocab).float() * 30.0  # predicts the next token
    m = answer_metrics(perfect, tokens, query)
    assert m["correct"].shape == (5 * 3,) and bool(m["correct"].all()) and float(m["loss"].max()) < 1e-6
    uniform = torch.zeros(5, task.n_ctx, task.d_vocab)
    m = answer_metrics(uniform, tokens, query)
    assert torch.allclose(m["loss"], torch.full((15,), math.log(task.d_vocab)))


def tiny(task, n_heads=2, layer_norm=False, seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(d_vocab=task.d_vocab, n_ctx=task.n_ctx, d_model=8, n_layers=1, n_heads=n_heads, d_mlp=0,
                         layer_norm=layer_norm)).eval()


def test_answers_read_the_pattern_at_the_right_keys():
    task = TwoRelations(n_letters=6, n_triples=4)
    data = task.sample(3, gen())
    model = tiny(task)
    patterns = []
    handle = model.blocks[0].attn.hook_pattern.register_forward_hook(lambda m, i, o: patterns.append(o))
    try:
        logits = model(data.tokens)
    finally:
        handle.remove()
    answers = task.answers(model, data)
    rows = [(b, i) for b in range(3) for i in range(task.n_ctx) if data.tokens[b, i] == task.sep_id]
    assert len(answers["x"]) == len(rows) == 12
    for n, (b, i) in enumerate(rows):
        assert answers["x"][n] == data.tokens[b, i - 1] and answers["topic"][n] == data.tokens[b, 1]
        assert torch.allclose(answers["prev_weight"][n], patterns[0][b, :, i, i - 1])
        assert torch.allclose(answers["topic_weight"][n], patterns[0][b, :, i, 1])
        assert bool(answers["correct"][n]) == bool(logits[b, i].argmax() == data.tokens[b, i + 1])
    m = task.evaluate(model, data)
    assert m["accuracy"] == pytest.approx(float(answers["correct"].float().mean()))
    assert m["prev_weight"][0] == [round(float(w), 4) for w in answers["prev_weight"].mean(0)]


def test_weight_table_averages_per_pair_and_marks_missing_pairs():
    task = TwoRelations(n_letters=4)
    answers = {"x": torch.tensor([0, 0, 1, 3]), "topic": torch.tensor([2, 2, 2, 0]),
               "prev_weight": torch.tensor([[0.2], [0.6], [0.9], [0.1]])}
    table = task.weight_table(answers)
    assert table.shape == (4, 4)
    assert table[0, 2] == pytest.approx(0.4) and table[1, 2] == pytest.approx(0.9) and table[3, 0] == pytest.approx(0.1)
    assert int(torch.isnan(table).sum()) == 16 - 3


def test_without_layer_norm_a_letter_scores_the_same_at_both_positions_up_to_a_constant():
    """Chapter 1's argument. log(w_prev / w_topic) = s(x, prev) - s(topic, 1), where s(letter, pos)
    is a key's score; with no LayerNorm, s(letter, pos) = a(letter) + b(pos), so for x == topic the
    ratio is b(prev) - b(1) whatever the letter. LayerNorm breaks that."""
    task = TwoRelations(n_letters=6, n_triples=1)  # one ';' per sequence, always at position 3
    tokens = torch.tensor([[task.bos_id, t, t, task.sep_id, 0] for t in range(6)])  # x == topic == t
    data = type(task.sample(1, gen()))(tokens, tokens == task.sep_id, torch.zeros_like(tokens, dtype=torch.bool))

    def spread(model) -> float:
        a = task.answers(model, data)
        log_ratio = a["prev_weight"][:, 0].log() - a["topic_weight"][:, 0].log()  # (letter,)
        return float(log_ratio.max() - log_ratio.min())

    assert spread(tiny(task, n_heads=1, layer_norm=False)) < 1e-5
    assert spread(tiny(task, n_heads=1, layer_norm=True)) > 1e-3


# ---------------------------------------------------------------------------- the word tokenizer


def test_word_tokenizer_round_trip_and_errors():
    tok = word_tokenizer(["A", "b", ";", "<bos>", "<pad>"])
    assert tok("<bos> A ; b")["input_ids"] == [3, 0, 2, 1]
    assert tok.decode([3, 0, 2, 1]) == "<bos> A ; b"
    with pytest.raises(ValueError, match="duplicates"):
        word_tokenizer(["a", "a", "<bos>", "<pad>"])
    with pytest.raises(ValueError, match="<pad>"):
        word_tokenizer(["a", "<bos>"])


# ---------------------------------------------------------------------------- LanguageWindows


def test_language_windows_pack_documents_with_the_language_tokenizer():
    task = LanguageWindows(n_ctx=24)
    ids = task.windows(6, seed=5)
    tok = task.tokenizer()
    assert ids.shape == (6, 24) and bool((ids[:, 0] == tok.bos_token_id).all())
    assert torch.equal(ids, task.windows(6, seed=5)) and not torch.equal(ids, task.windows(6, seed=6))
    # the same ids as the language's own tokenizer gives for the decoded text
    for row in ids:
        assert tok(tok.decode(row.tolist()))["input_ids"] == row.tolist()
    eos = tok.convert_tokens_to_ids("<eos>")
    assert bool((ids == eos).any()), "documents are separated by <eos>"
    assert not bool((ids == tok.unk_token_id).any())
    stream = task.windows(4, seed=5)[:, 1:].reshape(-1)  # consecutive windows continue one stream
    assert torch.equal(stream, ids[:4, 1:].reshape(-1))


def test_language_windows_evaluate_and_train_batches():
    task = LanguageWindows(n_ctx=16)
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=task.d_vocab, n_ctx=16, d_model=8, n_layers=2, n_heads=2, d_mlp=16)).eval()
    m = task.evaluate(model, task.eval_data(4))
    assert abs(m["val_loss"] - math.log(task.d_vocab)) < 0.5  # an untrained model is close to uniform
    assert len(m["previous_token"]) == 2 and len(m["previous_token"][0]) == 2
    assert m["previous_token_best"] == pytest.approx(max(max(r) for r in m["previous_token"]), abs=1e-4)
    a, _ = task.train_batch(3, gen(2))
    b = next(task.train_batches(3, gen(2)))
    assert torch.equal(a, b) and not torch.equal(a, task.eval_data(3))


# ---------------------------------------------------------------------------- recipes and checkpoints


def chapter_recipes():
    from deviating.training.recipes import CHAPTERS_1_2, RECIPES

    recipes = {name: r for name, r in RECIPES.items() if name.startswith(("two-relations-", "heads-"))}
    assert recipes == CHAPTERS_1_2  # the family holds exactly these
    return recipes


def test_chapter_recipes_match_their_tasks():
    recipes = chapter_recipes()
    assert len(recipes) == 60  # 40 two-relations + heads-1/2/4/8, each at seeds 0 to 4
    for name, r in recipes.items():
        assert r.config.d_vocab == r.task.d_vocab and r.config.n_ctx == r.task.n_ctx, name
    assert recipes["two-relations-1h-s0"].config.d_head == 32 and recipes["two-relations-2h-s0"].config.d_head == 16
    assert recipes["two-relations-2h-dh2-s1"].config.d_head == 2 and recipes["two-relations-2h-dh2-s1"].seed == 1
    assert [recipes[f"heads-{h}"].config.d_head for h in (1, 2, 4, 8)] == [64, 32, 16, 8]


def test_shipped_checkpoints_were_made_by_their_recipes():
    """Retraining a shipped checkpoint from its recipe reproduces it only if nothing drifted."""
    shipped = [name for name in chapter_recipes() if (CHECKPOINT_DIR / name / "provenance.json").is_file()]
    assert shipped, "no checkpoint of chapters 1-2 is shipped"
    recipes = chapter_recipes()
    for name in shipped:
        provenance = json.loads((CHECKPOINT_DIR / name / "provenance.json").read_text())
        recipe = recipes[name]
        assert provenance["config"] == recipe.config.to_dict(), name
        assert provenance["seed"] == recipe.seed and provenance["steps"] == recipe.steps, name
        assert {k: v for k, v in provenance["data"].items() if k not in ("eval_seed", "eval_size")} == \
            json.loads(json.dumps(recipe.task.describe())), name
        assert f"train {name} " in provenance["command"], name


def test_training_a_chapter_recipe_is_deterministic():
    from deviating.training.loop import train
    from deviating.training.recipes import RECIPES

    recipe = RECIPES["two-relations-2h-s0"]
    first = train(recipe, steps=15, progress=False)
    second = train(recipe, steps=15, progress=False)
    assert first.metrics == second.metrics
    assert first.curve[-1]["step"] == 15 and "accuracy" in first.metrics


# ---------------------------------------------------------------------------- one generator of repeated spans


def test_copy_span_known_answer_and_errors():
    from deviating.data.spans import copy_span

    tokens = torch.arange(10).repeat(2, 1)  # (2, 10): 0..9 twice
    out, predictable = copy_span(tokens, torch.tensor([1, 0]), torch.tensor([4, 3]), torch.tensor([3, 2]))
    assert out[0].tolist() == [0, 1, 2, 3, 4, 1, 2, 3, 8, 9]  # 1 2 3 copied 4 further on
    assert out[1].tolist() == [0, 1, 2, 0, 1, 5, 6, 7, 8, 9]  # 0 1 copied 3 further on
    assert predictable[0].nonzero().flatten().tolist() == [6, 7] and predictable[1].nonzero().flatten().tolist() == [4]
    assert tokens[0].tolist() == list(range(10))  # the input is not modified
    with pytest.raises(ValueError, match="must not overlap"):
        copy_span(tokens, torch.tensor([0, 0]), torch.tensor([2, 2]), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="run past the end"):
        copy_span(tokens, torch.tensor([5, 0]), torch.tensor([3, 3]), torch.tensor([3, 3]))


def test_repeated_tokens_are_distinct_spans_repeated_between_prefix_and_suffix():
    from deviating.data.spans import repeated_tokens

    ids = repeated_tokens([10, 11, 12, 13, 14, 15], 20, 4, gen(0), prefix=[1], suffix=[2, 3])
    assert ids.shape == (20, 1 + 8 + 2) and ids.dtype == torch.long
    assert (ids[:, 0] == 1).all() and ids[:, -2:].tolist() == [[2, 3]] * 20
    span = ids[:, 1:5]
    assert torch.equal(span, ids[:, 5:9])
    assert all(len(set(row)) == 4 and set(row) <= {10, 11, 12, 13, 14, 15} for row in span.tolist())
    assert len({tuple(r) for r in span.tolist()}) > 10  # the rows differ
    assert torch.equal(ids, repeated_tokens([10, 11, 12, 13, 14, 15], 20, 4, gen(0), prefix=[1], suffix=[2, 3]))
    with pytest.raises(ValueError, match=r"length must be in \[1, 6\]"):
        repeated_tokens(range(6), 2, 7, gen(0))



def test_evaluation_seeds_have_distinct_names_and_unchanged_values():
    from deviating.data.spans import SPANS_EVAL_SEED, RepeatedSpans
    from deviating.data.two_relations import TWO_RELATIONS_EVAL_SEED
    from deviating.data.windows import LANGUAGE_EVAL_SEED

    assert (SPANS_EVAL_SEED, TWO_RELATIONS_EVAL_SEED, LANGUAGE_EVAL_SEED) == (1234, 4321, -1)
    task = TwoRelations()
    assert torch.equal(task.eval_data(8).tokens, task.sample(8, gen(TWO_RELATIONS_EVAL_SEED)).tokens)
    spans = RepeatedSpans()
    assert torch.equal(spans.eval_data(8).tokens, spans.sample(8, gen(SPANS_EVAL_SEED)).tokens)
    assert torch.equal(LanguageWindows(n_ctx=16).eval_data(2), LanguageWindows(n_ctx=16).windows(2, seed=-1))


def test_run_with_patterns_leaves_the_model_mode_alone():
    from deviating.data.head_scores import run_with_patterns

    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=11, n_ctx=8, d_model=8, n_layers=2, n_heads=2, d_mlp=0)).train()
    tokens = torch.randint(0, 11, (3, 8), generator=gen(1))
    logits, patterns = run_with_patterns(model, tokens)
    assert model.training and logits.shape == (3, 8, 11) and len(patterns) == 2
    assert patterns[1].shape == (3, 2, 8, 8) and torch.allclose(patterns[1].sum(-1), torch.ones(3, 2, 8))
    with torch.no_grad():
        assert torch.allclose(logits, model(tokens), atol=1e-6)

