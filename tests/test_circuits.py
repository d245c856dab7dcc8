"""headlab.analysis.circuits: head matrices, composition scores, and the induction circuit found by ablation."""

from __future__ import annotations

import math

import pytest
import torch

from deviating.analysis.circuit_search import induction_circuit, pattern_change, read_by_later_layers
from headlab.analysis.circuits import (
    HeadWeights, circuit_ranks, circuit_singular_values, composition, composition_score, composition_scores,
    head_weights, random_composition_baseline,
)
from headlab.analysis.detect import induction_score, uniform_pattern
from deviating.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_model
from headlab.heads.model import HeadModel
from tiny_models import make_model


# --------------------------------------------------------------------------- composition_score


def test_aligned_rank_one_matrices_compose_fully() -> None:
    u, v, w = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.0, 3.0, 4.0]), torch.tensor([2.0, -1.0, 1.0])
    assert composition_score(torch.outer(u, v), torch.outer(v, w)) == pytest.approx(1.0)


def test_orthogonal_subspaces_do_not_compose() -> None:
    left = torch.zeros(4, 4)
    left[0, 0] = left[1, 1] = 1.0  # writes into coordinates 0, 1
    right = torch.zeros(4, 4)
    right[2, 2] = right[3, 3] = 5.0  # reads coordinates 2, 3
    assert composition_score(left, right) == 0.0


@pytest.mark.parametrize("k", [1, 3, 8])
def test_a_rank_k_projection_with_itself_scores_one_over_sqrt_k(k: int) -> None:
    P = torch.zeros(10, 10)
    P[:k, :k] = torch.eye(k)
    assert composition_score(P, P) == pytest.approx(1 / math.sqrt(k))


def test_score_ignores_scale_and_zero_matrices_score_zero() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 5, generator=g), torch.randn(5, 7, generator=g)
    assert composition_score(3.0 * a, 0.1 * b) == pytest.approx(composition_score(a, b))
    assert 0.0 < composition_score(a, b) < 1.0
    assert composition_score(torch.zeros(6, 5), b) == 0.0
    with pytest.raises(ValueError, match="product is defined"):
        composition_score(a, a)


def test_the_three_compositions_multiply_different_matrices() -> None:
    # the earlier head writes coordinate 1 from coordinate 0; the later head's query reads
    # coordinate 2 and its key coordinate 1; its value reads coordinate 3.
    e = torch.eye(4)
    earlier = HeadWeights(W_Q=e[:, :1] * 0, W_K=e[:, :1] * 0, W_V=e[:, [0]], W_O=e[[1]])
    later = HeadWeights(W_Q=e[:, [2]], W_K=e[:, [1]], W_V=e[:, [3]], W_O=e[[0]])
    assert composition("K", earlier, later) == pytest.approx(1.0)
    assert composition("Q", earlier, later) == 0.0
    assert composition("V", earlier, later) == 0.0
    with pytest.raises(ValueError, match="unknown composition"):
        composition("X", earlier, later)


# ------------------------------------------------------------------------------ head_weights


def test_planted_induction_head_k_composes_with_the_previous_token_head() -> None:
    d_vocab = 12
    hm = planted_model(d_vocab=d_vocab, n_ctx=16)
    (e, l) = PREVIOUS_TOKEN_HEAD[1], INDUCTION_HEAD[1]
    K = composition_scores(hm, "K", 0, 1)
    # W_QK of 1.0 maps the token block to the previous-token block, W_OV of 0.0 copies the
    # token block there: the product is c times the identity on d_vocab coordinates.
    assert K[e, l] == pytest.approx(1 / math.sqrt(d_vocab), rel=1e-6)
    assert float(K.sum() - K[e, l]) == 0.0  # 0.1 and 1.1 write nothing / read nothing
    assert float(composition_scores(hm, "Q", 0, 1).abs().sum()) == 0.0
    assert float(composition_scores(hm, "V", 0, 1).abs().sum()) == 0.0
    with pytest.raises(ValueError, match="earlier_layer < later_layer"):
        composition_scores(hm, "K", 1, 1)


def _residual_into(hm: HeadModel, layer: int, batch: dict) -> torch.Tensor:
    """The residual stream entering block ``layer`` (before its LayerNorm)."""
    seen = []
    def keep(module, args, kwargs):
        seen.append((args[0] if args else kwargs["hidden_states"]).detach())

    handle = hm.blocks[layer].register_forward_pre_hook(keep, with_kwargs=True)
    try:
        hm.run_with_cache(batch, names=("pattern",))
    finally:
        handle.remove()
    return seen[0]


def _zero_biases(hm: HeadModel, seed: int = 0) -> None:
    """Zero every bias (and LayerNorm shift); give the norms' scales random values to fold."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hm.model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ("ln" in name or "norm" in name.lower()) and name.endswith("weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))


def _norm_scale(hm: HeadModel, layer: int, x: torch.Tensor) -> torch.Tensor:
    """``(batch, pos)``: what the attention's input norm divides each position by (1: no norm)."""
    norm = hm.attn_norm(layer)
    if norm is None:
        return torch.ones(x.shape[:-1])
    eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon")
    if isinstance(norm, torch.nn.LayerNorm):
        return torch.sqrt(x.var(-1, unbiased=False) + eps)
    return torch.sqrt(x.pow(2).mean(-1) + eps)  # RMSNorm


@pytest.mark.parametrize("arch", ["headlab", "gpt2", "bert", "gpt_neox", "llama_gqa"])
def test_folded_matrices_reproduce_the_pattern_and_the_write(arch: str) -> None:
    """With biases zero, softmax(x_i W_QK x_j^T / (s_i s_j sqrt(d_head))) is the model's pattern and
    sum_j p_ij x_j W_OV / s_j the head's write, where s is the norm's per-position scale: folding
    the centring and gamma of a LayerNorm, gamma of an RMSNorm, nothing for a post-norm model.
    Rotary families (NeoX, Llama) rotate q and k by position, so only their write is checked."""
    hm = make_model(arch)
    _zero_biases(hm)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 61, (2, 9), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    layer = 1
    x = _residual_into(hm, layer, batch).float()  # (batch, pos, d_model)
    _, cache = hm.run_with_cache(batch)
    s = _norm_scale(hm, layer, x)  # (batch, pos)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    for head in range(hm.n_heads):
        w = head_weights(hm, layer, head)
        if not hm.arch.rotary:
            scores = x @ w.W_QK @ x.transpose(1, 2) / (s[:, :, None] * s[:, None, :] * math.sqrt(hm.d_head))
            if hm.causal:
                scores = scores.masked_fill(~causal, float("-inf"))
            torch.testing.assert_close(scores.softmax(-1), cache.pattern(layer)[:, head].float(),
                                       atol=1e-5, rtol=1e-4)
        pattern = cache.pattern(layer)[:, head].float()  # (batch, q_pos, k_pos)
        write = pattern @ ((x @ w.W_OV) / s[..., None])  # (batch, pos, d_model)
        torch.testing.assert_close(write, cache.result(layer)[:, :, head].float(), atol=1e-5, rtol=1e-4)


def test_unfolded_matrices_are_the_raw_slices() -> None:
    hm = make_model("headlab")
    w = head_weights(hm, 0, 2, fold_ln=False)
    attn = hm.model.blocks[0].attn
    dh = hm.d_head
    assert torch.equal(w.W_Q, attn.W_Q.weight.detach()[2 * dh:3 * dh].T)
    assert torch.equal(w.W_O, attn.W_O.weight.detach()[:, 2 * dh:3 * dh].T)
    assert w.W_QK.shape == (hm.d_model, hm.d_model) and w.W_OV.shape == (hm.d_model, hm.d_model)


def test_head_weights_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="out of range"):
        head_weights(make_model("gpt2"), 5, 0)
    with pytest.raises(TypeError, match="HeadModel"):
        head_weights(make_model("gpt2").model, 0, 0)


# ----------------------------------------------------------------------------------- ranks


@pytest.mark.parametrize("arch", ["gpt2", "bert", "llama_gqa"])
def test_circuit_singular_values_are_those_of_the_full_product(arch: str) -> None:
    hm = make_model(arch)
    qk, ov = circuit_singular_values(hm, "QK"), circuit_singular_values(hm, "OV")
    assert qk.shape == ov.shape == (hm.n_layers, hm.n_heads, hm.d_head) and qk.dtype == torch.float64
    for layer, head in [(0, 0), (1, 3)]:
        w = head_weights(hm, layer, head, fold_ln=False)
        for mine, full in ((qk, w.W_QK), (ov, w.W_OV)):
            top = torch.linalg.svdvals(full.double())[:hm.d_head]  # the rest are ~0
            torch.testing.assert_close(mine[layer, head], top, rtol=1e-5, atol=1e-9)
    assert torch.equal(circuit_ranks(hm, "QK"), torch.full((hm.n_layers, hm.n_heads), hm.d_head))


def test_circuit_ranks_see_a_rank_deficient_head() -> None:
    hm = make_model("headlab")
    dh = hm.d_head
    with torch.no_grad():  # head 1.2's queries read only 3 directions of its d_head
        hm.model.blocks[1].attn.W_Q.weight[2 * dh + 3:3 * dh] = 0.0
        hm.model.blocks[0].attn.W_V.weight[:dh] *= torch.tensor([1.0] * (dh - 1) + [0.0])[:, None]
    qk, ov = circuit_ranks(hm, "QK"), circuit_ranks(hm, "OV")
    assert int(qk[1, 2]) == 3 and int(ov[0, 0]) == dh - 1
    assert int(qk.sum()) == hm.n_layers * hm.n_heads * dh - (dh - 3)
    assert int(ov.sum()) == hm.n_layers * hm.n_heads * dh - 1
    with pytest.raises(ValueError, match="unknown circuit 'VO'"):
        circuit_ranks(hm, "VO")
    with pytest.raises(ValueError, match="rtol"):
        circuit_ranks(hm, "QK", rtol=0)


def test_random_baseline_is_seeded_and_inside_0_1() -> None:
    a = random_composition_baseline(16, 4, "K", n=20, seed=3)
    assert torch.equal(a, random_composition_baseline(16, 4, "K", n=20, seed=3))
    assert not torch.equal(a, random_composition_baseline(16, 4, "K", n=20, seed=4))
    assert a.shape == (20,) and bool(((a > 0) & (a < 1)).all())
    with pytest.raises(ValueError, match="unknown composition"):
        random_composition_baseline(16, 4, "W")


# ------------------------------------------------------------------------- induction_circuit


def _planted_inputs(d_vocab: int, span: int, n: int = 3, seed: int = 0) -> torch.Tensor:
    """Token 0, then ``span`` distinct tokens from 1..d_vocab-1, then the same span again."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        s = torch.randperm(d_vocab - 1, generator=g)[:span] + 1
        rows.append(torch.cat([torch.tensor([0]), s, s]))
    return torch.stack(rows)


def test_induction_circuit_of_the_planted_model() -> None:
    hm = planted_model(d_vocab=20, n_ctx=32)
    ids = _planted_inputs(20, 12)
    circuit = induction_circuit(hm, ids)
    assert circuit.induction_head == INDUCTION_HEAD
    assert circuit.candidates == [(0, 0), (0, 1)]
    assert circuit.feeding_head == PREVIOUS_TOKEN_HEAD
    assert circuit.mean("induction")[INDUCTION_HEAD] == pytest.approx(1.0, abs=1e-4)
    assert circuit.top_heads("previous_token", 1)[0][0] == PREVIOUS_TOKEN_HEAD
    # without the previous-token head, the induction head's keys all look alike: it attends
    # uniformly, and its score is exactly that of uniform attention
    uniform = induction_score(uniform_pattern(torch.ones_like(ids), causal=True), ids)[:, 0]
    torch.testing.assert_close(circuit.ablated_induction[0, :, 1, 0], uniform, atol=1e-5, rtol=0)
    # the first-token head writes nothing: ablating it changes nothing
    torch.testing.assert_close(circuit.ablated_induction[1], circuit.induction)
    assert circuit.drop[0] == pytest.approx(1.0 - float(uniform.mean()), abs=1e-4)


def test_induction_circuit_runs_on_gpt2_with_its_default_inputs() -> None:
    hm = make_model("gpt2")
    circuit = induction_circuit(hm, n=3, length=6, seed=1)
    n = circuit.inputs["input_ids"].shape[0]
    assert n == 3 and circuit.induction.shape == (3, 2, 4) == circuit.previous_token.shape
    assert circuit.induction_head[0] == 1 and len(circuit.candidates) == 4
    assert circuit.ablated_induction.shape == (4, 3, 2, 4)
    # an ablation in layer 0 cannot change layer 0's own patterns
    torch.testing.assert_close(circuit.ablated_induction[:, :, 0], circuit.induction[None, :, 0].expand(4, -1, -1))


def test_a_one_layer_model_has_no_induction_circuit() -> None:
    from headlab.models.gpt import GPT, GPTConfig

    one = HeadModel(GPT(GPTConfig(d_vocab=10, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_mlp=0)), name="one")
    with pytest.raises(ValueError, match="one layer"):
        induction_circuit(one, torch.zeros(1, 4, dtype=torch.long))


# ---------------------------------------------------------------------------- pattern_change


def test_pattern_change_of_the_planted_induction_head() -> None:
    """Without the previous-token head, the induction head goes from (almost) one-hot on j + 1
    to uniform at every eligible query i: total variation i / (i + 1); elsewhere it was already
    uniform. Nothing else moves."""
    hm = planted_model(d_vocab=20, n_ctx=32)
    span = 12
    ids = _planted_inputs(20, span)
    change = pattern_change(hm, ids, [PREVIOUS_TOKEN_HEAD])
    pos = ids.shape[1]
    expected = sum(i / (i + 1) for i in range(span + 1, 2 * span + 1)) / pos
    torch.testing.assert_close(change[:, 1, 0], torch.full((3,), expected), atol=1e-4, rtol=0)
    assert float(change[:, 0].abs().max()) == 0.0  # layer 0 cannot move
    assert float(change[:, 1, 1].abs().max()) < 1e-6  # the uniform head reads nothing
    assert float(pattern_change(hm, ids, [(0, 1)]).abs().max()) < 1e-6  # 0.1 writes nothing


def test_pattern_change_ignores_padding() -> None:
    hm = make_model("gpt2")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 61, (2, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    padded = pattern_change(hm, {"input_ids": ids, "attention_mask": mask}, [(0, 1)])
    alone = pattern_change(hm, {"input_ids": ids[1:, :5], "attention_mask": mask[1:, :5]}, [(0, 1)])
    torch.testing.assert_close(padded[1], alone[0], atol=1e-5, rtol=1e-4)
    assert float(padded[:, 1].sum()) > 0  # a random layer 1 does read layer 0


def test_later_layers_read_the_previous_token_head_more_than_its_neighbour() -> None:
    """In the planted model the induction head reads 0.0 and not 0.1: removing 0.0 moves layer 1,
    removing 0.1 moves nothing. So 0.0's own change is the planted one and its neighbour's is 0."""
    hm = planted_model(d_vocab=20, n_ctx=32)
    ids = _planted_inputs(20, 12)
    own, rest = read_by_later_layers(hm, ids, [PREVIOUS_TOKEN_HEAD, (0, 1)])
    by_hand = pattern_change(hm, ids, [PREVIOUS_TOKEN_HEAD])[:, 1:].mean((1, 2))
    torch.testing.assert_close(own[0], by_hand)
    assert float(own[0].min()) > 0.05 and float(rest[0].abs().max()) < 1e-6  # 0.1 is read by nothing
    torch.testing.assert_close(rest[1], own[0])  # and 0.1's neighbour is 0.0
    with pytest.raises(ValueError, match="no later layer"):
        read_by_later_layers(hm, ids, [(1, 0)])
    with pytest.raises(ValueError, match="at least one"):
        read_by_later_layers(hm, ids, [])
