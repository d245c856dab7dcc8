"""Activation patching, path patching, direct logit attribution and the logit lens.

The batched grids equal one forward pass per patch; patching the last layer's residual stream at
the scored position restores (denoising) or breaks (noising) the metric exactly; a path patch of a
receiver's value equals the full patch of the sender with the receiver's pattern held clean; the
shares of direct logit attribution sum to the logit; the logit lens's last layer is the model's
logits. Bad inputs get errors that name them.
"""

from __future__ import annotations

import pytest
import torch

import headlab
from headlab.analysis.lens import direct_logit_attribution, logit_lens
from headlab.analysis.patching import activation_patch, path_patch, path_patched_z
from headlab.heads.model import HeadModel
from headlab.metrics import LogitMetric, Metric, next_token_loss
from headlab.models.gpt import GPT, GPTConfig
from tiny_models import make_model, random_batch

CAUSAL = ["headlab", "gpt2", "gpt_neox", "llama_gqa"]
DIFF = Metric(LogitMetric("logit_diff", (3, 5)))


def pair(hm, n=3, seq=7):
    return random_batch(hm, n=n, seq=seq, seed=0), random_batch(hm, n=n, seq=seq, seed=1)


def looped_z(hm, base, source, metric, positions=False):
    """One forward per (head[, position]) through patch_z: the slow reference."""
    _, src = hm.run_with_cache(source, names=("z",))
    n, pos = base["input_ids"].shape
    out = torch.empty(n, hm.n_layers, hm.n_heads, *([pos] if positions else []))
    for l in range(hm.n_layers):
        for h in range(hm.n_heads):
            for p in (range(pos) if positions else [slice(None)]):
                def fn(layer, z, h=h, p=p):
                    z = z.clone()
                    z[:, p, h] = src.z(layer)[:, p, h]
                    return z
                with torch.no_grad(), hm.patch_z(fn, layers=[l]):
                    value = metric.kind(hm.forward(base), base)
                out[(slice(None), l, h) + ((p,) if positions else ())] = value
    return out


@pytest.mark.parametrize("name", CAUSAL)
def test_z_grid_equals_the_loop_both_directions(name):
    hm = make_model(name)
    clean, corrupted = pair(hm)
    for direction, (base, source) in {"noising": (clean, corrupted), "denoising": (corrupted, clean)}.items():
        slow = looped_z(hm, base, source, DIFF)
        for per_pass in (None, 1, 3):
            fast = activation_patch(hm, clean, corrupted, metric=DIFF, direction=direction, per_pass=per_pass)
            torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
        assert (slow - DIFF.kind(hm.forward(base), base)[:, None, None]).abs().max() > 1e-4  # patches act
    assert hm.hooks_installed == 0


@pytest.mark.parametrize("name", ["headlab", "gpt2"])
def test_heads_by_positions_grid_equals_the_loop(name):
    hm = make_model(name)
    clean, corrupted = pair(hm, n=2, seq=5)
    slow = looped_z(hm, clean, corrupted, DIFF, positions=True)
    fast = activation_patch(hm, clean, corrupted, metric=DIFF, positions=True, per_pass=6)
    assert fast.shape == (2, 2, 4, 5)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    # z at a position after the scored one cannot change a causal model's logits there
    at = activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("logit_diff", (3, 5), pos=2)),
                          positions=True)
    base = LogitMetric("logit_diff", (3, 5), pos=2)(hm.forward(clean), clean)
    torch.testing.assert_close(at[..., 3:], base[:, None, None, None].expand(2, 2, 4, 2), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["headlab", "gpt2"])
def test_padded_inputs_and_the_default_loss(name):
    hm = make_model(name)
    clean, corrupted = pair(hm, n=3, seq=6)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 5 + [0]])
    clean, corrupted = ({**batch, "attention_mask": mask} for batch in (clean, corrupted))
    loss = Metric(lambda out, batch: next_token_loss(out, batch["input_ids"], batch["attention_mask"]))
    torch.testing.assert_close(activation_patch(hm, clean, corrupted, per_pass=3),  # the default: next-token loss
                               looped_z(hm, clean, corrupted, loss), atol=1e-5, rtol=0)
    last = activation_patch(hm, clean, corrupted, metric=DIFF, positions=True)  # scored at each last real token
    torch.testing.assert_close(last, looped_z(hm, clean, corrupted, DIFF, positions=True), atol=1e-5, rtol=0)
    base = DIFF.kind(hm.forward(clean), clean)
    torch.testing.assert_close(last[1, ..., 4:], base[1].expand(2, 4, 2), atol=1e-5, rtol=0)  # padding: no effect


@pytest.mark.parametrize("name", CAUSAL)
def test_resid_patch_at_the_last_layer_restores_or_breaks_exactly(name):
    hm = make_model(name)
    clean, corrupted = pair(hm)
    last = hm.n_layers - 1
    denoised = activation_patch(hm, clean, corrupted, "resid", metric=DIFF, direction="denoising", normalise=True)
    noised = activation_patch(hm, clean, corrupted, "resid", metric=DIFF, normalise=True)
    assert denoised.shape == noised.shape == (3, hm.n_layers, 7)
    torch.testing.assert_close(denoised[:, last, -1], torch.ones(3), atol=1e-4, rtol=0)  # the clean logits
    torch.testing.assert_close(noised[:, last, -1], torch.zeros(3), atol=1e-4, rtol=0)  # the corrupted ones
    torch.testing.assert_close(noised[:, last, :-1], torch.ones(3, 6), atol=1e-4, rtol=0)  # other positions: clean
    kl = activation_patch(hm, clean, corrupted, "resid", metric="kl")
    assert float(kl[:, last, :-1].abs().max()) < 1e-5 and float(kl[:, last, -1].min()) > 0


def test_pattern_patching_equals_the_loop_and_needs_a_replaceable_pattern():
    hm = make_model("headlab")
    clean, corrupted = pair(hm)
    _, src = hm.run_with_cache(corrupted, names=("pattern",))
    slow = torch.empty(3, 2, 4)
    for l in range(2):
        for h in range(4):
            def fn(layer, p, h=h):
                p = p.clone()
                p[:, h] = src.pattern(layer)[:, h]
                return p
            with torch.no_grad(), hm.patch_pattern(fn, layers=[l]):
                slow[:, l, h] = DIFF.kind(hm.forward(clean), clean)
    torch.testing.assert_close(activation_patch(hm, clean, corrupted, "pattern", metric=DIFF), slow,
                               atol=1e-5, rtol=0)
    gpt2 = make_model("gpt2")
    with pytest.raises(NotImplementedError, match="patch_pattern needs the pattern"):
        activation_patch(gpt2, *pair(gpt2), "pattern", metric=DIFF)


def test_logit_metrics_read_the_logits():
    logits = torch.randn(2, 4, 10)
    batch = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 1, 1],
                                                                                                [1, 1, 0, 0]])}
    diff = LogitMetric("logit_diff", (3, 5))(logits, batch)
    torch.testing.assert_close(diff, torch.stack([logits[0, 3, 3] - logits[0, 3, 5], logits[1, 1, 3] - logits[1, 1, 5]]))
    prob = LogitMetric("prob", (7,), pos=0)(logits, batch)
    torch.testing.assert_close(prob, logits[:, 0].softmax(-1)[:, 7])
    assert float(LogitMetric("kl", clean=logits)(logits, batch).abs().max()) < 1e-6
    assert float(LogitMetric("kl", clean=logits)(logits.flip(0), batch).min()) > 0
    with pytest.raises(ValueError, match="position 4 is out of range"):
        LogitMetric("prob", (7,), pos=4)(logits, batch)
    with pytest.raises(ValueError, match="'logit_diff' needs 2 token id"):
        LogitMetric("logit_diff", (3,))
    with pytest.raises(ValueError, match="outside the 10 logits"):
        LogitMetric("prob", (12,))(logits, batch)


def ln_gpt(attn_only=False, layer_norm=True) -> HeadModel:
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=61, n_ctx=32, d_model=32, n_layers=2, n_heads=4, d_mlp=0 if attn_only else 64,
                          layer_norm=layer_norm))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias") or "ln" in n:
                p.add_(torch.randn_like(p) * 0.1)  # LayerNorm gains and biases away from 1 and 0
    return HeadModel(model.eval())


@pytest.mark.parametrize("name", ["headlab-ln", "headlab-no-ln", "gpt2", "gpt_neox", "llama_gqa"])
def test_dla_shares_sum_to_the_logit(name):
    hm = {"headlab-ln": ln_gpt, "headlab-no-ln": lambda: ln_gpt(layer_norm=False)}.get(name, lambda: make_model(name))()
    batch = random_batch(hm)
    for tokens in ((3, 5), 7):
        att = direct_logit_attribution(hm, batch, tokens)
        assert att.heads.shape == (3, 7, 2, 4) and att.mlp.shape == (3, 7, 2)
        torch.testing.assert_close(att.total(), att.logits, atol=1e-5, rtol=0)
        assert float(att.heads.abs().max()) > 1e-3 and float(att.mlp.abs().max()) > 1e-3
    full, last = (direct_logit_attribution(hm, batch, (3, 5), pos=p) for p in (None, -1))
    assert last.heads.shape == (3, 2, 4)
    torch.testing.assert_close(last.heads, full.heads[:, -1])
    torch.testing.assert_close(last.total(), full.logits[:, -1], atol=1e-5, rtol=0)


def test_dla_components_are_what_the_model_computed():
    hm = make_model("gpt2")
    batch = random_batch(hm)
    att = direct_logit_attribution(hm, batch, (3, 5))
    readout = hm.readout()
    norm, W_U = readout.norm, readout.W_U
    with torch.no_grad(), hm.residual_stream() as stream, hm.capture(("z",)) as cache, \
            hm.outputs_of(hm.blocks[1].mlp) as mlp:
        hm.forward(batch)
    x = stream[-1].double()
    scale = (x.var(-1, unbiased=False) + norm.eps).sqrt()[..., None]
    u = (W_U[:, 3] - W_U[:, 5]).double() * norm.weight.double()

    def share(c):
        c = c.double()
        return ((c - c.mean(-1, keepdim=True)) / scale) @ u

    torch.testing.assert_close(att.mlp[..., 1], share(mlp[0]))
    result = hm.head_results(1, cache.z(1))[:, :, 2]  # head 1.2's write
    torch.testing.assert_close(att.heads[..., 1, 2], share(result))


@pytest.mark.parametrize("name", ["headlab-ln", "gpt2", "llama_gqa"])
def test_logit_lens_ends_at_the_logits(name):
    hm = ln_gpt() if name == "headlab-ln" else make_model(name)
    batch = random_batch(hm)
    lens = logit_lens(hm, batch)
    assert lens.shape == (2, 3, 7, 61)
    torch.testing.assert_close(lens[-1], hm.forward(batch), atol=1e-5, rtol=0)
    assert (lens[0] - lens[-1]).abs().max() > 1e-3
    torch.testing.assert_close(logit_lens(hm, batch, pos=2), lens[:, :, 2])


def test_path_patch_of_the_value_equals_the_sender_patched_with_the_receiver_pattern_clean():
    hm = ln_gpt(attn_only=True)  # layer 1 reads exactly the embeddings and layer 0's heads
    clean, corrupted = pair(hm)
    z = path_patched_z(hm, clean, corrupted, (0, 1), (1, 2), "v")
    _, cc = hm.run_with_cache(clean)
    _, cr = hm.run_with_cache(corrupted, names=("z",))

    def sender(layer, zl):
        zl = zl.clone()
        zl[:, :, 1] = cr.z(0)[:, :, 1]
        return zl

    with torch.no_grad(), hm.patch_z(sender, layers=[0]), \
            hm.patch_pattern(lambda layer, p: cc.pattern(1), layers=[1]), hm.capture(("z",), layers=[1]) as full:
        hm.forward(clean)
    torch.testing.assert_close(z, full.z(1)[:, :, 2], atol=1e-5, rtol=0)
    assert (z - cc.z(1)[:, :, 2]).abs().max() > 1e-3  # the receiver's output changed
    for channel in "qk":  # the other paths change it too, and differently
        assert (path_patched_z(hm, clean, corrupted, (0, 1), (1, 2), channel) - z).abs().max() > 1e-4
    torch.testing.assert_close(path_patched_z(hm, clean, clean, (0, 1), (1, 2), "k"), cc.z(1)[:, :, 2])


@pytest.mark.parametrize("name", ["headlab", "gpt2"])
def test_path_patch_scores_the_clean_run_with_the_receiver_patched(name):
    hm = make_model(name)
    clean, corrupted = pair(hm)
    values = path_patch(hm, clean, corrupted, (0, 0), (1, 3), "v", metric=DIFF)
    clean_value = DIFF.kind(hm.forward(clean), clean)
    assert values.shape == (3,) and (values - clean_value).abs().max() > 1e-5
    torch.testing.assert_close(path_patch(hm, clean, clean, (0, 0), (1, 3), "q", metric=DIFF), clean_value)
    for sender in [(1, 0), (1, 3)]:  # the same layer as the receiver, and a later one is impossible
        with pytest.raises(ValueError, match="must sit in a layer below receiver 1.3"):
            path_patch(hm, clean, corrupted, sender, (1, 3))
    with pytest.raises(ValueError, match="input must be 'q', 'k' or 'v'"):
        path_patch(hm, clean, corrupted, (0, 0), (1, 3), "o")
    rotary = make_model("llama_gqa")
    with pytest.raises(NotImplementedError, match="rotates queries and keys"):
        path_patched_z(rotary, *pair(rotary), (0, 0), (1, 0))


def test_errors_name_the_wrong_value():
    hm = make_model("headlab")
    clean, corrupted = pair(hm)
    with pytest.raises(ValueError, match=r"\(3, 7\).*\(3, 6\).*same number of tokens"):
        activation_patch(hm, clean, random_batch(hm, seq=6), metric=DIFF)
    with pytest.raises(ValueError, match="same number of tokens"):
        path_patch(hm, clean, random_batch(hm, seq=6), (0, 0), (1, 0))
    with pytest.raises(ValueError, match="unknown component 'mlp': choose from 'z', 'pattern', 'resid'"):
        activation_patch(hm, clean, corrupted, "mlp")
    with pytest.raises(ValueError, match="unknown component 'pattern' with positions=True"):
        activation_patch(hm, clean, corrupted, "pattern", positions=True)
    with pytest.raises(ValueError, match="direction must be"):
        activation_patch(hm, clean, corrupted, direction="forwards")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=f"per_pass must be a positive number.*not {bad!r}"):
            activation_patch(hm, clean, corrupted, metric=DIFF, per_pass=bad)
    with pytest.raises(ValueError, match="position 9 is out of range"):
        activation_patch(hm, clean, corrupted, metric=Metric(LogitMetric("prob", (3,), pos=9)))
    with pytest.raises(ValueError, match="position 7 is out of range"):
        direct_logit_attribution(hm, clean, 3, pos=7)
    with pytest.raises(ValueError, match="position -2 is out of range"):
        logit_lens(hm, clean, pos=-2)
    with pytest.raises(ValueError, match="tokens must be one token id or two"):
        direct_logit_attribution(hm, clean, (3, 99))
    with pytest.raises(ValueError, match="normalised metric is undefined"):
        activation_patch(hm, clean, clean, metric=DIFF, normalise=True)
    assert hm.hooks_installed == 0


def test_an_encoder_has_no_logits_to_score():
    hm = headlab.load("minilm")
    batch = {"input_ids": torch.tensor([[101, 2023, 2003, 102]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    other = {"input_ids": torch.tensor([[101, 2008, 2003, 102]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    for metric in (DIFF, "kl", "loss"):
        with pytest.raises(ValueError, match="no language-model head"):
            activation_patch(hm, batch, other, metric=metric)
    with pytest.raises(ValueError, match="no language-model head"):
        direct_logit_attribution(hm, batch, 3)
    with pytest.raises(ValueError, match="no language-model head"):
        logit_lens(hm, batch)
    cosine = activation_patch(hm, batch, other, "resid")  # its own metric, 1 - cos to the base run
    assert cosine.shape == (1, hm.n_layers, 4) and float(cosine.max()) > 0


def test_patch_resid_and_residual_stream():
    hm = make_model("gpt2")
    batch = random_batch(hm)
    with torch.no_grad(), hm.residual_stream() as stream:
        logits = hm.forward(batch)
    assert len(stream) == hm.n_layers + 1
    readout = hm.readout()
    norm, W_U = readout.norm, readout.W_U
    torch.testing.assert_close(norm(stream[-1]) @ W_U, logits)
    with torch.no_grad(), hm.patch_resid(lambda layer, x: torch.zeros_like(x), layers=[1]):
        zeroed = hm.forward(batch)
    torch.testing.assert_close(zeroed, norm(torch.zeros_like(stream[-1])) @ W_U)
    with pytest.raises(ValueError, match="must keep the residual stream's shape"):
        with torch.no_grad(), hm.patch_resid(lambda layer, x: x[:, :1]):
            hm.forward(batch)
    assert hm.hooks_installed == 0


def test_direct_logit_attribution_reads_each_input_own_pair():
    from headlab import direct_logit_attribution
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    pairs = [(1, 2), (5, 3), (7, 9)]
    each = direct_logit_attribution(hm, batch, pairs, pos=-1)
    for i, pair in enumerate(pairs):
        alone = direct_logit_attribution(hm, {k: v[i:i + 1] for k, v in batch.items()}, pair, pos=-1)
        torch.testing.assert_close(each.heads[i], alone.heads[0])
        torch.testing.assert_close(each.logits[i], alone.logits[0])
    torch.testing.assert_close(each.total(), each.logits, atol=1e-6, rtol=1e-6)
    for bad in (True, (True, 2), [(1, 2)] * 2, 1.5, torch.ones(3, 2)):
        with pytest.raises(ValueError, match="tokens must be"):
            direct_logit_attribution(hm, batch, bad, pos=-1)
