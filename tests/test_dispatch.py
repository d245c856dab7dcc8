"""``headlab.load(name, device_map=...)``: a model dispatched by accelerate across the CPU and disk
offload gives the undispatched model's results (issue 25, "models bigger than one device").

``max_memory`` (MiniLM) or an explicit ``device_map`` (a small GPT-2 saved to a folder) forces the
split, so the later layers, the final norm and the unembedding live on disk and come to the CPU
one module at a time, during the pass. On a machine with GPUs the same code splits across them.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("accelerate", reason="the dispatch extra: pip install accelerate")

import headlab  # noqa: E402
from headlab.analysis.lens import direct_logit_attribution, logit_lens  # noqa: E402
from headlab.analysis.patching import activation_patch, path_patch  # noqa: E402
from headlab.analysis.sweep import sweep  # noqa: E402
from headlab.heads.head import Head  # noqa: E402
from headlab.heads.loading import ModelUnavailable, offline_models  # noqa: E402
from headlab.heads.offload import is_offloaded  # noqa: E402
from headlab.metrics import LogitMetric, Metric  # noqa: E402

TEXTS = ["The cat sat on the mat.", "A dog ran in the park today."]
OTHER = ["The dog sat on the mat.", "A cat ran in the park today."]

needs_minilm = pytest.mark.skipif("minilm" not in offline_models(), reason="all-MiniLM-L6-v2 is not installed")


@pytest.fixture(scope="module")
def minilm_pair(tmp_path_factory):
    plain = headlab.load("minilm", device="cpu")
    # 70 MB holds the embeddings (47 MB) and two layers: layers 2-5 and the pooler go to disk
    split = headlab.load("minilm", device_map="auto", max_memory={"cpu": "70MB"},
                         offload_folder=tmp_path_factory.mktemp("offload"))
    return plain, split


@needs_minilm
def test_minilm_is_split_across_the_cpu_and_the_disk(minilm_pair):
    _, split = minilm_pair
    places = set(split.model.hf_device_map.values())
    assert places == {"cpu", "disk"}, split.model.hf_device_map
    assert is_offloaded(split.model) and split.device == torch.device("cpu")


@needs_minilm
def test_minilm_dispatched_ablates_sweeps_and_patches_as_undispatched(minilm_pair):
    plain, split = minilm_pair
    batch, other = plain.tokenize(TEXTS), plain.tokenize(OTHER)
    with torch.no_grad():
        torch.testing.assert_close(split.forward(batch), plain.forward(batch), rtol=0, atol=1e-6)
        with plain.ablate([Head(4, 3)]):
            want = plain.forward(batch)
        with split.ablate([Head(4, 3)]):  # layer 4 is on disk
            got = split.forward(batch)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert (got - split.forward(batch)).abs().max() > 1e-4  # the ablation did something
    a, b = sweep(plain, TEXTS), sweep(split, TEXTS)
    torch.testing.assert_close(b.effects, a.effects, rtol=0, atol=1e-6)
    torch.testing.assert_close(activation_patch(split, batch, other, "resid"),
                               activation_patch(plain, batch, other, "resid"), rtol=0, atol=1e-6)
    with torch.no_grad(), plain.capture(("pattern",), layers=[5]) as c1, split.capture(("pattern",), layers=[5]) as c2:
        plain.forward(batch)
        split.forward(batch)
    torch.testing.assert_close(c2.pattern(5), c1.pattern(5), rtol=0, atol=1e-6)
    torch.testing.assert_close(split.W_O(5), plain.W_O(5), rtol=0, atol=0)  # a weight read from disk
    torch.testing.assert_close(split.W_Q(5), plain.W_Q(5), rtol=0, atol=0)
    assert split.hooks_installed == 0


def _tiny_gpt2_folder(path):
    """A small random GPT-2 with its own word-level tokenizer, saved as a Hugging Face folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["<|endoftext|>"] + [f"w{i}" for i in range(60)]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_head=4, n_embd=32, vocab_size=61, n_positions=32,
                                       bos_token_id=0, eos_token_id=0, tie_word_embeddings=False))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def gpt2_pair(tmp_path_factory):
    folder = str(_tiny_gpt2_folder(tmp_path_factory.mktemp("gpt2")))
    plain = headlab.load(folder, device="cpu")
    on_disk = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu",
               "transformer.h.1": "disk", "transformer.h.2": "disk", "transformer.ln_f": "disk", "lm_head": "disk"}
    split = headlab.load(folder, device_map=on_disk, offload_folder=tmp_path_factory.mktemp("offload"))
    return plain, split


def test_a_causal_lm_on_disk_patches_and_attributes_as_undispatched(gpt2_pair):
    plain, split = gpt2_pair
    assert set(split.model.hf_device_map.values()) == {"cpu", "disk"}
    clean = plain.tokenize(["w1 w2 w3 w4 w1 w2 w3", "w5 w6 w7 w8 w5 w6 w7"])
    corrupted = plain.tokenize(["w9 w2 w3 w4 w9 w2 w3", "w10 w6 w7 w8 w10 w6 w7"])
    diff = Metric(LogitMetric("logit_diff", (4, 9)))
    for component in ("z", "resid"):  # (a Hugging Face GPT-2 computes its pattern inside the kernel)
        want = activation_patch(plain, clean, corrupted, component, metric=diff)
        got = activation_patch(split, clean, corrupted, component, metric=diff)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
        assert want.abs().max() > 1e-4  # the grid is not trivially zero
    torch.testing.assert_close(path_patch(split, clean, corrupted, Head(0, 1), Head(2, 0), "k", metric=diff),
                               path_patch(plain, clean, corrupted, Head(0, 1), Head(2, 0), "k", metric=diff),
                               rtol=0, atol=1e-5)
    a, b = direct_logit_attribution(plain, clean, (4, 9)), direct_logit_attribution(split, clean, (4, 9))
    torch.testing.assert_close(b.heads, a.heads, rtol=0, atol=1e-5)  # ln_f and lm_head read from disk
    torch.testing.assert_close(logit_lens(split, clean), logit_lens(plain, clean), rtol=0, atol=1e-5)
    assert split.hooks_installed == 0


def test_dispatch_options_are_checked_before_anything_loads(tmp_path):
    with pytest.raises(ValueError, match=r"device_map='everywhere': use one of 'auto'"):
        headlab.load("minilm", device_map="everywhere")
    with pytest.raises(ValueError, match=r"device='cpu' and device_map='auto': pass one"):
        headlab.load("minilm", device="cpu", device_map="auto")
    with pytest.raises(ValueError, match=r"max_memory=\{'cpu': '1GB'\} needs device_map"):
        headlab.load("minilm", max_memory={"cpu": "1GB"})
    with pytest.raises(ValueError, match="offload_folder=.* needs device_map"):
        headlab.load("minilm", offload_folder=str(tmp_path))
    with pytest.raises(TypeError, match="max_memory must be a dict"):
        headlab.load("minilm", device_map="auto", max_memory="1GB")


def test_the_books_small_models_refuse_a_device_map():
    from headlab.models.checkpoints import available_organisms

    name = next(iter(available_organisms()))
    with pytest.raises(ValueError, match=f"{name!r} is one of the book's small models"):
        headlab.load(name, device_map="auto")


def test_a_missing_accelerate_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "accelerate" else real(n, *a))
    with pytest.raises(ModelUnavailable, match="pip install accelerate"):
        headlab.load("minilm", device_map="auto")
