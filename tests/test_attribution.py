"""Attribution patching (nodes and edges) against exact patching.

Where the metric is linear in the patched activation (a logit difference read from the last layer
of a model with no norm and no MLP), the first-order estimate is the exact patch, to float
rounding: heads, heads x positions, the residual stream, both directions, and every value edge into
the last layer. Elsewhere the gradient is checked against finite differences, integrated gradients
converge to the exact effect of patching a whole layer, and edges rank as path patching does.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import spearmanr

from headlab.analysis.attribution import attribution_patch, pair_run
from headlab.analysis.edges import edge_attribution
from headlab.analysis.patching import activation_patch, path_patch
from headlab.heads.model import HeadModel
from headlab.metrics import LogitMetric, Metric
from headlab.models.gpt import GPT, GPTConfig
from tiny_models import make_model, random_batch

DIFF = Metric(LogitMetric("logit_diff", (3, 5)))
PROB = Metric(LogitMetric("prob", (3,)))


def linear_model(n_layers: int) -> HeadModel:
    """Attention only, no LayerNorm: the logits are linear in the last layer's z and stream."""
    torch.manual_seed(0)
    return HeadModel(GPT(GPTConfig(d_vocab=61, n_ctx=32, d_model=32, n_layers=n_layers, n_heads=4, d_mlp=0,
                                   layer_norm=False)).eval(), name="linear")


def pair(hm, n=3, seq=7):
    return random_batch(hm, n=n, seq=seq, seed=0), random_batch(hm, n=n, seq=seq, seed=1)


@pytest.mark.parametrize("direction", ["noising", "denoising"])
def test_equals_exact_patching_where_the_metric_is_linear(direction):
    hm = linear_model(1)
    clean, corrupted = pair(hm)
    for kw in ({}, {"positions": True}, {"component": "resid"}):
        component = kw.pop("component", "z")
        exact = activation_patch(hm, clean, corrupted, component, metric=DIFF, direction=direction, **kw)
        estimate = attribution_patch(hm, clean, corrupted, component, metric=DIFF, direction=direction, **kw)
        assert estimate.shape == exact.shape
        torch.testing.assert_close(estimate, exact, atol=1e-5, rtol=0)
        base = DIFF.kind(hm.forward(clean if direction == "noising" else corrupted), clean)
        assert (exact - base.reshape(-1, *[1] * (exact.dim() - 1))).abs().max() > 1e-2  # the patches act
    norm = dict(metric=DIFF, direction=direction, normalise=True)
    torch.testing.assert_close(attribution_patch(hm, clean, corrupted, **norm),
                               activation_patch(hm, clean, corrupted, **norm), atol=1e-4, rtol=0)
    effect = attribution_patch(hm, clean, corrupted, metric=DIFF, direction=direction, effect=True)
    values = attribution_patch(hm, clean, corrupted, metric=DIFF, direction=direction)
    torch.testing.assert_close(values - effect, base[:, None, None].expand_as(values), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["headlab", "gpt2", "gpt_neox"])
def test_the_estimate_is_the_directional_derivative(name):
    """Non-linear models: (z_src - z_base) . grad equals the finite difference along z_src - z_base."""
    hm = make_model(name)
    clean, corrupted = pair(hm)
    effect = attribution_patch(hm, clean, corrupted, metric=PROB, effect=True)  # noising: base = clean
    _, src = hm.run_with_cache(corrupted, names=("z",))
    _, own = hm.run_with_cache(clean, names=("z",))
    eps = 1e-2
    for layer, head in [(0, 1), (1, 3)]:
        def moved(sign):
            def fn(l, z):
                z = z.clone()
                z[:, :, head] += sign * eps * (src.z(l) - own.z(l))[:, :, head]
                return z
            with torch.no_grad(), hm.patch_z(fn, layers=[layer]):
                return PROB.kind(hm.forward(clean), clean)
        derivative = (moved(1) - moved(-1)) / (2 * eps)
        torch.testing.assert_close(effect[:, layer, head], derivative, atol=2e-4, rtol=2e-2)


def test_integrated_gradients_converge_to_patching_a_whole_layer():
    hm = make_model("headlab")
    clean, corrupted = pair(hm)
    _, src = hm.run_with_cache(corrupted, names=("z",))
    base = PROB.kind(hm.forward(clean), clean)
    for layer in range(hm.n_layers):
        def whole(l, z):
            return src.z(l)
        with torch.no_grad(), hm.patch_z(whole, layers=[layer]):
            exact = PROB.kind(hm.forward(clean), clean) - base
        errors = []
        for steps in (1, 4, 64):
            ig = attribution_patch(hm, clean, corrupted, metric=PROB, effect=True, positions=True, steps=steps)
            errors.append(float((ig[:, layer].sum((1, 2)) - exact).abs().max()))
        assert errors[0] > 1e-3, errors  # the first-order estimate misses (the metric is not linear)
        assert errors[2] < errors[1] < errors[0] and errors[2] < 0.05 * errors[0], errors
    # the residual stream after a layer carries everything: its positions sum to the corrupted run's metric
    ig = attribution_patch(hm, clean, corrupted, "resid", metric=PROB, effect=True, steps=64)
    total = PROB.kind(hm.forward(corrupted), clean) - PROB.kind(hm.forward(clean), clean)
    torch.testing.assert_close(ig.sum(-1), total[:, None].expand(-1, hm.n_layers), atol=5e-3, rtol=0)


def test_one_step_is_plain_attribution_and_steps_change_the_estimate():
    hm = make_model("gpt2")
    clean, corrupted = pair(hm)
    plain = attribution_patch(hm, clean, corrupted, metric=PROB)
    assert torch.equal(attribution_patch(hm, clean, corrupted, metric=PROB, steps=1), plain)
    assert not torch.allclose(attribution_patch(hm, clean, corrupted, metric=PROB, steps=3), plain, atol=1e-7)


def test_head_gradients_take_a_logit_metric():
    hm = make_model("gpt2")
    clean, corrupted = pair(hm)
    grads = hm.head_gradients(clean, DIFF)  # d metric / d gate = z . d metric / d z
    run = pair_run(hm, clean, corrupted, DIFF)
    expected = torch.stack([(g * z).sum((1, 3)) for g, z in zip(run.grad_z, run.z_base)], 1)
    torch.testing.assert_close(grads, expected, atol=1e-6, rtol=1e-4)
    assert grads.abs().max() > 1e-4
    with pytest.raises(ValueError, match="language-model head"):
        make_model("bert").head_gradients(random_batch(make_model("bert")), DIFF)
    with pytest.raises(TypeError, match="effect must be True or False, not 'no'"):
        attribution_patch(hm, clean, corrupted, effect="no")
    with pytest.raises(TypeError, match="needs a HeadModel"):
        attribution_patch(hm.model, clean, corrupted)


def test_value_edges_into_the_last_layer_equal_path_patching():
    hm = linear_model(2)
    clean, corrupted = pair(hm)
    edges = edge_attribution(hm, clean, corrupted, metric=DIFF)
    assert edges.heads.shape == (3, 2, 4, 2, 4, 3) and edges.logits.shape == (3, 2, 4)
    for hs in range(4):
        for hr in range(4):
            exact = path_patch(hm, clean, corrupted, (0, hs), (1, hr), "v", metric=DIFF)
            torch.testing.assert_close(edges.heads[:, 0, hs, 1, hr, 2], exact, atol=1e-5, rtol=0)
    # sender -> logits: the sender's change added to the final stream only
    _, src = hm.run_with_cache(corrupted, names=("result",))
    _, own = hm.run_with_cache(clean, names=("result",))
    for layer, head in [(0, 2), (1, 0)]:
        delta = (src.result(layer) - own.result(layer))[:, :, head]
        with torch.no_grad(), hm.patch_resid(lambda l, x: x + delta, layers=[1]):
            exact = DIFF.kind(hm.forward(clean), clean)
        torch.testing.assert_close(edges.logits[:, layer, head], exact, atol=1e-5, rtol=0)
    assert torch.equal(edges.heads[:, 1, :, 0], edges.base[:, None, None, None].expand(3, 4, 4, 3))  # no edge


def test_a_heads_edges_sum_to_its_node_estimate():
    """Attention only, with LayerNorms: the stream after a head is read only by later heads' q, k, v and by
    the logits, so the chain rule splits the head's node estimate exactly into its edges' estimates."""
    torch.manual_seed(0)
    hm = HeadModel(GPT(GPTConfig(d_vocab=61, n_ctx=32, d_model=32, n_layers=3, n_heads=4, d_mlp=0)).eval())
    clean, corrupted = pair(hm)
    for direction in ("noising", "denoising"):
        nodes = attribution_patch(hm, clean, corrupted, metric=PROB, direction=direction, effect=True)
        edges = edge_attribution(hm, clean, corrupted, metric=PROB, direction=direction, effect=True)
        summed = edges.heads.sum((3, 4, 5)) + edges.logits
        torch.testing.assert_close(summed, nodes, atol=1e-6, rtol=1e-4)
        assert edges.heads[:, 0].abs().sum() > 10 * (summed - nodes).abs().sum()


@pytest.mark.parametrize("name, agreement", [("headlab", 0.85), ("gpt2", 0.95)])
def test_edges_rank_as_path_patching_does(name, agreement):
    """The random headlab GPT has large, saturating effects; GPT-2's small init keeps them near-linear."""
    hm = make_model(name)
    clean, corrupted = pair(hm, n=4)
    edges = edge_attribution(hm, clean, corrupted, metric=DIFF, effect=True)
    with torch.no_grad():
        base = DIFF.kind(hm.forward(clean), clean)
    exact, estimate = [], []
    for hs in range(4):
        for hr in range(4):
            for c, inp in enumerate("qkv"):
                patched = path_patch(hm, clean, corrupted, (0, hs), (1, hr), inp, metric=DIFF)
                exact.append(float((patched - base).mean()))
                estimate.append(float(edges.heads[:, 0, hs, 1, hr, c].mean()))
    assert spearmanr(exact, estimate)[0] > agreement
    top = edges.top(3)
    assert len(top) == 3 and abs(top[0][3]) >= abs(top[1][3]) >= abs(top[2][3])


def test_bad_inputs_name_the_value():
    hm = make_model("gpt2")
    clean, corrupted = pair(hm)
    with pytest.raises(ValueError, match="'pattern'"):
        attribution_patch(hm, clean, corrupted, "pattern")
    with pytest.raises(ValueError, match="positions=True"):
        attribution_patch(hm, clean, corrupted, "resid", positions=True)
    with pytest.raises(ValueError, match="'sideways'"):
        attribution_patch(hm, clean, corrupted, direction="sideways")
    for steps in (0, 2.5, True):
        with pytest.raises(ValueError, match="steps"):
            attribution_patch(hm, clean, corrupted, steps=steps)
    with pytest.raises(ValueError, match="differ in length"):
        attribution_patch(hm, clean, random_batch(hm, n=3, seq=6))
    with pytest.raises(ValueError, match="language-model head"):
        bert = make_model("bert")
        attribution_patch(bert, random_batch(bert), random_batch(bert, seed=1), metric=DIFF)
    with pytest.raises(NotImplementedError, match="rotates"):
        llama = make_model("llama_gqa")
        edge_attribution(llama, random_batch(llama), random_batch(llama, seed=1), metric=DIFF)
    with pytest.raises(ValueError, match="positive int"):
        edge_attribution(hm, clean, corrupted, metric=DIFF).top(0)

    def scalar(output, batch):
        return output[:, -1, 3].sum()
    with pytest.raises(ValueError, match=r"'scalar' returned shape \(\) for a batch of 3 rows"):
        attribution_patch(hm, clean, corrupted, metric=Metric(scalar))

    def undefined(output, batch):
        return output[:, -1, 3] / (batch["index"] != 1).float() * 0
    with pytest.raises(ValueError, match=r"NaN or infinite for inputs \[1\]"):
        attribution_patch(hm, clean, corrupted, metric=Metric(undefined))
    assert hm.hooks_installed == 0
