"""The one registry of head scores: a score added in one place reaches every path, with equal values.

A toy score, "mass two tokens back" (:func:`score_registry_cases.toy_score`, one
:class:`~headlab.analysis.detect.registry.Score` entry and nothing else), must appear in the
materialized atlas, the streamed atlas and the Triton path (Triton's interpreter on the CPU,
in a subprocess), with the values its definition gives; and the three paths must agree on
every registered score.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from headlab.analysis.atlas import ATLAS_SCORES, atlas_scores, compute_atlas
from headlab.analysis.detect import PATTERN_SCORES, head_scores, label_heads
from headlab.analysis.detect.registry import (
    BUILTIN_NAMES, Score, families, has_key_at, pattern_scores, register_score, unregister_score,
)
from headlab.analysis.streaming import streaming_head_scores
from headlab.kernels.keysets import KeySet, statistic_names
from headlab.viz.atlas import label_colours
from score_registry_cases import TOY, every_path, texts_and_frequency, tiny_language_model, toy_score

HERE = Path(__file__).resolve().parent
ATOL = 1e-5


@pytest.fixture
def toy():
    register_score(toy_score())
    yield TOY
    unregister_score(TOY)


@pytest.fixture(scope="module")
def model():
    hm = tiny_language_model()
    return hm, *texts_and_frequency(hm)


def _two_back_by_hand(hm, texts) -> torch.Tensor:
    """``(n_inputs, n_layers, n_heads)``: the toy's definition read straight off the patterns."""
    out = []
    for batch in hm.batches(texts, 32):
        _, cache = hm.run_with_cache(batch, names=("pattern",))
        mask = cache.attention_mask.bool().cpu()
        eligible = mask[:, 2:] & mask[:, :-2]  # real queries i >= 2 whose key i - 2 is real
        layers = []
        for layer in range(hm.n_layers):
            p = cache.pattern(layer).float().cpu()  # (batch, head, q, k)
            back = p.diagonal(offset=-2, dim1=-2, dim2=-1)  # (batch, head, n - 2): p[i, i - 2]
            layers.append((back * eligible[:, None]).sum(-1) / eligible.sum(-1, keepdim=True))
        out.append(torch.stack(layers, dim=1))
    return torch.cat(out)


def test_a_toy_score_registered_once_is_in_the_materialized_and_the_streamed_atlas(toy, model):
    hm, texts, frequency = model
    assert toy in pattern_scores() and toy in statistic_names() and toy in families()
    assert toy in atlas_scores() and toy not in ATLAS_SCORES and toy not in PATTERN_SCORES  # built-ins stay
    assert label_colours()[toy] == "#000000"

    by_hand = _two_back_by_hand(hm, texts)
    materialized = head_scores(hm, texts, scores=[toy])
    streamed = streaming_head_scores(hm, texts, scores=[toy], backend="tiled")
    torch.testing.assert_close(materialized.per_input[toy], by_hand, rtol=0, atol=ATOL, equal_nan=True)
    torch.testing.assert_close(streamed.per_input[toy], by_hand, rtol=0, atol=ATOL, equal_nan=True)
    torch.testing.assert_close(streamed.uniform[toy], materialized.uniform[toy], rtol=0, atol=ATOL, equal_nan=True)

    a = compute_atlas(hm, texts, effect="none", token_frequency=frequency)
    b = compute_atlas(hm, texts, effect="none", token_frequency=frequency, streaming=True)
    assert a["definitions"][toy] == "weight on key i-2, over real queries i >= 2" == b["definitions"][toy]
    for x, y, want in zip(a["heads"], b["heads"], by_hand.nanmean(0).flatten()):
        assert abs(x["scores"][toy] - float(want)) <= 1e-4 and abs(y["scores"][toy] - float(want)) <= 1e-4
        assert toy in x["lift"] and toy in y["lift"]  # a named family: the labelling rule weighs it
    assert toy in a["uniform"] and a["uniform"][toy] == pytest.approx(b["uniform"][toy], abs=1e-4)


def test_a_registered_named_family_can_label_a_head(toy):
    scores = {"previous_token": torch.tensor([[0.1, 0.1]]), toy: torch.tensor([[0.9, 0.1]])}
    uniform = {name: torch.zeros(1, 2) for name in scores}
    labels = label_heads(scores, None, uniform=uniform)
    assert labels.labels == [[toy, "unlabelled"]]


def test_unregistering_removes_the_score_everywhere(model):
    hm, texts, _ = model
    register_score(toy_score())
    unregister_score(TOY)
    assert TOY not in pattern_scores() and TOY not in statistic_names() and TOY not in label_colours()
    atlas = compute_atlas(hm, texts[:2], effect="none")
    assert TOY not in atlas["heads"][0]["scores"] and TOY not in atlas["definitions"]
    assert pattern_scores() == BUILTIN_NAMES


def test_bad_entries_are_refused_with_what_to_do(toy):
    with pytest.raises(ValueError, match="registered already"):
        register_score(toy_score())
    with pytest.raises(ValueError, match="not both"):
        Score("x", "d", has_key_at(-1), statistic="previous_token", keys=KeySet(lo=-1, hi=-1))
    with pytest.raises(ValueError, match="not both"):
        Score("x", "d", has_key_at(-1))
    with pytest.raises(ValueError, match="needs a colour"):
        Score("x", "d", has_key_at(-1), keys=KeySet(lo=-3, hi=-3), family="named")
    with pytest.raises(ValueError, match="no streamed statistic 'nope'"):
        register_score(Score("x", "d", has_key_at(-1), statistic="nope"))
    with pytest.raises(ValueError, match="lo=2 > hi=1"):
        KeySet(lo=2, hi=1)
    with pytest.raises(ValueError, match="match must be"):
        KeySet(match=("tokens", "colour"))
    with pytest.raises(ValueError, match="built-in score"):
        unregister_score("induction")


@pytest.fixture(scope="module")
def three_paths(tmp_path_factory) -> dict:
    """The toy registered, every score on the materialized, tiled and Triton paths (interpreter)."""
    out = tmp_path_factory.mktemp("registry") / "scores.json"
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(HERE / "score_registry_cases.py"), str(out)], env=env, cwd=HERE,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


def test_the_toy_score_reaches_the_triton_path(three_paths, model):
    hm, texts, _ = model
    assert three_paths["names"] == list(BUILTIN_NAMES) + [TOY]
    triton = torch.tensor(three_paths["scores"][TOY]["triton"])
    torch.testing.assert_close(triton, _two_back_by_hand(hm, texts), rtol=0, atol=ATOL, equal_nan=True)


def test_the_three_paths_agree_on_every_registered_score(three_paths):
    for name in three_paths["names"]:
        values = {path: torch.tensor(v) for path, v in three_paths["scores"][name].items()}
        assert set(values) == {"materialized", "tiled", "triton"}, name
        assert bool((~torch.isnan(values["materialized"])).any()), f"{name} is undefined on every input"
        for path in ("tiled", "triton"):
            torch.testing.assert_close(values[path], values["materialized"], rtol=0, atol=ATOL, equal_nan=True,
                                       msg=f"{name}: {path} differs from the materialized path")


def test_in_process_paths_agree_on_every_builtin_score(model):
    """The same comparison for the torch paths, in this process (no subprocess, no Triton)."""
    hm, texts, frequency = model
    for name, values in every_path(hm, texts, frequency, backends=("tiled",)).items():
        torch.testing.assert_close(torch.tensor(values["tiled"]), torch.tensor(values["materialized"]),
                                   rtol=0, atol=ATOL, equal_nan=True, msg=name)
