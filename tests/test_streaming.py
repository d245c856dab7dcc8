"""Streamed head statistics: the definition, the tiled torch kernel, a model's scores and the atlas.

The Triton kernel runs the same parity cases in ``test_triton.py`` (``fused_cases.py``).
"""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import headlab
from headlab.analysis.atlas import compute_atlas, default_texts, repeated_random_tokens
from headlab.analysis.detect import (
    duplicate_token_score, entropy_score, first_token_score, head_scores, induction_score, local_score,
    next_token_score, previous_occurrence, previous_token_score, punctuation_score, rare_token_score,
    separator_score, uniform_pattern,
)
from headlab.analysis.streaming import (
    label_changes, scores_from_statistics, streamed, streaming_head_scores, uniform_statistics,
)
from deviating.kernels import attention
from headlab.kernels.hf_attention import ATTENTION_NAME, key_padding_mask, register
from headlab.kernels.statistics import (
    STATISTICS, pattern_statistics, previous_occurrence_sorted, statistic_inputs,
)
from headlab.kernels.streaming import TritonUnavailable, fused_attention
from deviating.data.language import Language, corpus_for, synthetic_token_frequency
from fused_cases import CASES, judge, make_inputs, problems
from tiny_models import make_model

HYPOTHESIS = dict(deadline=None, max_examples=40)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------- the definition


def planted(targets: list[int]) -> torch.Tensor:
    """A one-head causal pattern ``(1, 1, n, n)`` whose row i puts all its weight on key targets[i]."""
    n = len(targets)
    p = torch.zeros(1, 1, n, n)
    p[0, 0, torch.arange(n), torch.tensor(targets)] = 1.0
    return p


def test_pattern_statistics_known_answers():
    """A planted previous-token head and uniform attention, whose statistics are known by construction."""
    n = 6
    tokens = torch.tensor([[7, 8, 9, 7, 8, 9]])  # repeated: induction targets 1, 2 at queries 3, 4, 5
    inputs = statistic_inputs(torch.ones(1, n), causal=True, tokens=tokens)
    stats, argmax = pattern_statistics(planted([0, 0, 1, 2, 3, 4]), inputs)
    col = {name: stats[0, 0, :, i] for i, name in enumerate(STATISTICS)}
    torch.testing.assert_close(col["previous_token"], torch.tensor([0.0, 1, 1, 1, 1, 1]))
    torch.testing.assert_close(col["self"], torch.tensor([1.0, 0, 0, 0, 0, 0]))
    torch.testing.assert_close(col["entropy"], torch.zeros(n))
    torch.testing.assert_close(col["max_weight"], torch.ones(n))
    torch.testing.assert_close(col["induction"], torch.zeros(n))  # i-1 is never j+1 of an earlier copy here
    assert argmax[0, 0].tolist() == [0, 0, 1, 2, 3, 4]
    assert inputs.induction_target[0].tolist() == [-1, -1, -1, 1, 2, 3]

    uniform, _ = pattern_statistics(uniform_pattern(torch.ones(1, n), causal=True), inputs)
    counts = torch.arange(1, n + 1, dtype=torch.float32)
    torch.testing.assert_close(uniform[0, 0, :, STATISTICS.index("entropy")], torch.log(counts))
    torch.testing.assert_close(uniform[0, 0, :, STATISTICS.index("max_weight")], 1 / counts)
    # query 3 (token 7) has one earlier copy (key 0) among its 4 keys
    assert float(uniform[0, 0, 3, STATISTICS.index("duplicate_token")]) == pytest.approx(0.25)


@settings(**HYPOTHESIS)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_previous_occurrence_in_n_log_n_equals_the_detector(tokens):
    ids = torch.tensor([tokens])
    torch.testing.assert_close(previous_occurrence_sorted(ids), previous_occurrence(ids))


def random_pattern(batch: int, heads: int, n: int, allowed: torch.Tensor, seed: int) -> torch.Tensor:
    """Rows that are distributions over the allowed keys (sharp and flat rows mixed)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, heads, n, n, generator=g) * 3
    return torch.softmax(scores.masked_fill(~allowed[:, None], -torch.inf), dim=-1).nan_to_num(0.0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_from_statistics_equal_the_detectors(causal, seed):
    """The per-query statistics, averaged over eligible queries, are the detectors' scores."""
    g = torch.Generator().manual_seed(seed)
    batch, heads, n = 3, 2, 14
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[1, 9:] = False
    mask[2, 1:] = False  # a one-token input: most scores undefined
    tokens = torch.randint(0, 4, (batch, n), generator=g)
    sep, punct = (torch.rand(batch, n, generator=g) < 0.25 for _ in range(2))
    freq = torch.randint(1, 4, (batch, n), generator=g).double()
    freq[torch.rand(batch, n, generator=g) < 0.2] = float("inf")
    inputs = statistic_inputs(mask, causal=causal, tokens=tokens, separator=sep, punctuation=punct, frequency=freq)
    pattern = random_pattern(batch, heads, n, inputs.allowed(), seed)
    stats, argmax = pattern_statistics(pattern, inputs)
    from headlab.kernels.streaming import HeadStatistics

    got = scores_from_statistics(HeadStatistics(stats, argmax), inputs)
    want = {
        "previous_token": previous_token_score(pattern, mask, on_empty="nan"),
        "next_token": next_token_score(pattern, mask, on_empty="nan"),
        "first_token": first_token_score(pattern, mask, on_empty="nan"),
        "local": local_score(pattern, 2, mask, on_empty="nan"),
        "entropy": entropy_score(pattern, mask, causal=causal, on_empty="nan"),
        "separator": separator_score(pattern, sep, mask, causal=causal, on_empty="nan"),
        "punctuation": punctuation_score(pattern, punct, mask, causal=causal, on_empty="nan"),
        "duplicate_token": duplicate_token_score(pattern, tokens, mask, on_empty="nan"),
        "induction": induction_score(pattern, tokens, mask, on_empty="nan"),
        "rare_token": rare_token_score(pattern, freq, mask, causal=causal, on_empty="nan"),
    }
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, equal_nan=True, msg=name)
    assert torch.isnan(got["previous_token"][2]).all()  # the one-token input has no previous token


# ------------------------------------------------------------------- the tiled torch kernel


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_tiled_kernel_parity(case):
    result = judge(case, "tiled")
    assert not problems(case, result), problems(case, result)


def test_tiled_kernel_float64_and_block_sizes():
    case = CASES[0]
    (q, k, v), stats = make_inputs(case)
    q, k, v = (x.double() for x in (q, k, v))
    outs = [fused_attention(q, k, v, causal=True, statistics=stats, backend="tiled", block_size=b)
            for b in (1, 5, 16, 64)]
    for out, s in outs[1:]:
        torch.testing.assert_close(out, outs[0][0], rtol=0, atol=1e-12)
        torch.testing.assert_close(s.values, outs[0][1].values, rtol=0, atol=1e-6)
        assert torch.equal(s.argmax, outs[0][1].argmax)
    assert outs[0][0].dtype == torch.float64


def test_outputs_match_sdpa_without_statistics():
    (q, k, v), stats = make_inputs(CASES[0])
    out, none = fused_attention(q, k, v, causal=True, backend="tiled", block_size=8)
    assert none is None
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)


def test_fully_padded_input_gives_zero_rows():
    q = k = v = torch.randn(1, 1, 4, 8)
    inputs = statistic_inputs(torch.zeros(1, 4), causal=False)
    out, stats = fused_attention(q, k, v, statistics=inputs, backend="tiled")
    assert torch.equal(out, torch.zeros_like(out)) and torch.equal(stats.values, torch.zeros_like(stats.values))
    assert (stats.argmax == -1).all()


def test_bad_inputs_say_what_is_wrong():
    q, k = torch.randn(1, 3, 5, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match="multiple of kv_head"):
        fused_attention(q, k, k)
    with pytest.raises(ValueError, match=r"\(batch, head, n, d\)"):
        fused_attention(q[0], k[0], k[0])
    with pytest.raises(ValueError, match="unknown backend"):
        fused_attention(k, k, k, backend="cuda")
    with pytest.raises(ValueError, match="causal=True but the StatInputs"):
        fused_attention(k, k, k, causal=True, statistics=statistic_inputs(torch.ones(1, 5), causal=False))
    with pytest.raises(ValueError, match="self-attention"):
        fused_attention(k, torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8),
                        statistics=statistic_inputs(torch.ones(1, 6), causal=False))
    with pytest.raises(KeyError, match="unknown statistic"):
        fused_attention(k, k, k, statistics=statistic_inputs(torch.ones(1, 5), causal=False))[1]["bogus"]


def test_triton_backend_without_triton_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now fails
    monkeypatch.delitem(sys.modules, "headlab.kernels.triton_attention", raising=False)
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(TritonUnavailable, match=r"pip install headlab\[kernels\]"):
        fused_attention(q, q, q, backend="triton")
    out, _ = fused_attention(q, q, q, backend="auto")  # on the CPU: the tiled path, no triton needed
    torch.testing.assert_close(out, attention(q, q, q, backend="torch")[0])


def test_uniform_statistics_are_those_of_uniform_attention():
    inputs = make_inputs(CASES[0])[1]
    want, _ = pattern_statistics(uniform_pattern(inputs.key_real, causal=True), inputs)
    torch.testing.assert_close(uniform_statistics(inputs).values, want, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------ models


def _compare(a, b, atol=1e-5):
    assert set(a.names) - {"copying_dla"} == set(b.names)
    for name in b.names:
        tol = atol * (1 + float(a.per_input[name].abs().nan_to_num(0).max())) if name == "write_norm" else atol
        torch.testing.assert_close(b.per_input[name], a.per_input[name], rtol=0, atol=tol, equal_nan=True, msg=name)
        if name in a.uniform:
            torch.testing.assert_close(b.uniform[name], a.uniform[name], rtol=0, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", ["attn-only-2l", "organism", "minilm"])
def test_streamed_scores_equal_materialized_scores_on_the_books_models(name):
    hm = headlab.load(name)
    texts, _ = default_texts(hm, corpus=corpus_for(hm))  # texts, or a batch of random tokens for attn-only-2l
    texts = {k: v[:40] for k, v in texts.items()} if isinstance(texts, dict) else texts[:40]
    freq = None
    if name == "organism":
        freq = synthetic_token_frequency(Language(), hm.tokenizer)
    _compare(head_scores(hm, texts, token_frequency=freq), streaming_head_scores(hm, texts, token_frequency=freq))
    repeats = repeated_random_tokens(hm)
    _compare(head_scores(hm, repeats, scores=["induction"]), streaming_head_scores(hm, repeats, scores=["induction"]))


@pytest.mark.parametrize("arch", ["headlab", "gpt2", "bert", "gpt_neox", "llama_gqa"])
def test_registered_attention_runs_every_architecture(arch):
    hm = make_model(arch)
    ids = torch.randint(1, 60, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        want = hm.forward(batch)
        with streamed(hm):
            got = hm.forward(batch)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)
    _compare(head_scores(hm, batch), streaming_head_scores(hm, batch, block_size=4))


def test_ablation_and_streaming_together():
    """The gate before W_O still works: the ablated model's statistics are those of its patterns."""
    hm = headlab.load("attn-only-2l")
    batch = repeated_random_tokens(hm, n=2, length=12)
    inputs = statistic_inputs(batch["attention_mask"], causal=True, tokens=batch["input_ids"])
    with hm.ablate([(0, 1), (0, 3)]):
        out, cache = hm.run_with_cache(batch)
        with torch.no_grad(), streamed(hm, inputs) as recorded:
            streamed_out = hm.forward(batch)
    torch.testing.assert_close(streamed_out, out, rtol=0, atol=1e-5)
    want, want_argmax = pattern_statistics(cache.pattern(1), inputs)
    torch.testing.assert_close(recorded[1].values, want, rtol=0, atol=1e-5)
    assert torch.equal(recorded[1].argmax, want_argmax)
    with torch.no_grad():
        clean = hm.forward(batch)
    assert not torch.allclose(clean, out, atol=1e-3)  # the ablation did something


def test_models_are_restored_after_streaming_even_on_error():
    for hm in (make_model("bert"), make_model("headlab")):
        before = getattr(hm.model.config, "_attn_implementation", None)
        with contextlib.suppress(RuntimeError), streamed(hm):
            raise RuntimeError("boom")
        assert getattr(hm.model.config, "_attn_implementation", None) == before
        assert not any("attention_function" in vars(m) for m in hm.model.modules())
        hm.run_with_cache(torch.tensor([[1, 2, 3]]))  # patterns are captured again


def test_mask_builder_refuses_what_the_kernel_cannot_express():
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    register()
    assert key_padding_mask(2, 5, 5, mask_function=causal_mask_function, attention_mask=torch.ones(2, 5)) is None
    with pytest.raises(NotImplementedError, match="sliding window"):
        key_padding_mask(2, 5, 5, mask_function=sliding_window_causal_mask_function(3))
    with pytest.raises(NotImplementedError, match="use_cache=False"):
        key_padding_mask(2, 1, 5, q_offset=4, mask_function=causal_mask_function)
    assert ATTENTION_NAME == "headlab_fused"


# ---------------------------------------------------------------------------- the atlas


@pytest.mark.parametrize("name", ["organism", "minilm"])
def test_streaming_atlas_equals_the_materialized_atlas(name):
    hm = headlab.load(name)
    corpus = corpus_for(hm)  # the synthetic language for the organism (rare_token too), None for MiniLM
    texts, _ = default_texts(hm, corpus=corpus)
    texts = texts[:48]
    a = compute_atlas(hm, texts, effect="write_norm", corpus=corpus)
    b = compute_atlas(hm, texts, effect="write_norm", streaming=True, corpus=corpus)
    assert label_changes(a, b) == []
    for x, y in zip(a["heads"], b["heads"]):
        for key, value in x["scores"].items():  # rounded to 4 decimals: at most one step apart
            assert (value is None) == (y["scores"][key] is None)
            if value is not None:
                assert abs(value - y["scores"][key]) <= 1e-4 + 1e-9, (x["head"], key)
    assert a["uniform"].keys() == b["uniform"].keys() and a["label_counts"] == b["label_counts"]


def test_label_changes_lists_each_changed_head():
    a = {"n_layers": 1, "n_heads": 2, "heads": [{"head": [0, 0], "label": "local"},
                                                {"head": [0, 1], "label": "diffuse"}]}
    b = {"n_layers": 1, "n_heads": 2, "heads": [{"head": [0, 0], "label": "local"},
                                                {"head": [0, 1], "label": "induction"}]}
    assert label_changes(a, b) == [{"head": "0.1", "before": "diffuse", "after": "induction"}]
    with pytest.raises(ValueError, match="different shapes"):
        label_changes(a, {**b, "n_heads": 3})
