"""Tests of the book's minimal GPT (headlab.models.gpt) and the starter detectors (headlab.analysis.detect)."""

from __future__ import annotations

import math

import pytest
import torch

from headlab.analysis.detect import induction_score, previous_occurrence, previous_token_score
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT, GPTConfig


def make(seed: int = 0, **overrides) -> GPT:
    cfg = dict(d_vocab=23, n_ctx=16, d_model=24, n_layers=2, n_heads=3, d_mlp=40)
    cfg.update(overrides)
    torch.manual_seed(seed)
    return GPT(GPTConfig(**cfg)).eval()


def tokens(batch: int = 3, pos: int = 12, d_vocab: int = 23, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, d_vocab, (batch, pos), generator=torch.Generator().manual_seed(seed))


def capture_patterns(model: GPT, ids, mask=None) -> list[torch.Tensor]:
    out = []
    hs = [b.attn.hook_pattern.register_forward_hook(lambda m, i, o: out.append(o)) for b in model.blocks]
    try:
        model(ids, mask)
    finally:
        for h in hs:
            h.remove()
    return out


# ---------------------------------------------------------------------------- config and structure

def test_config_defaults_and_errors():
    cfg = GPTConfig(d_vocab=10, n_ctx=8, d_model=32, n_layers=1, n_heads=4)
    assert cfg.d_head == 8 and cfg.d_mlp == 128 and not cfg.attn_only
    assert cfg.init_std == pytest.approx(0.8 / math.sqrt(32))
    assert cfg.model_type == "headlab" and cfg.vocab_size == 10 and "model_type" not in cfg.to_dict()
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="not divisible"):
        GPTConfig(d_vocab=10, n_ctx=8, d_model=30, n_layers=1, n_heads=4)
    assert GPTConfig(d_vocab=10, n_ctx=8, d_model=30, n_layers=1, n_heads=4, d_head=5).d_head == 5
    with pytest.raises(ValueError, match="n_layers"):
        GPTConfig(d_vocab=10, n_ctx=8, d_model=32, n_layers=0, n_heads=4)
    with pytest.raises(ValueError, match="unknown GPTConfig fields"):
        GPTConfig.from_dict({**cfg.to_dict(), "n_experts": 2})


def test_module_names_and_shapes_are_the_contract():
    model = make(d_head=5)  # n_heads * d_head = 15 != d_model = 24
    assert isinstance(model.embed, torch.nn.Embedding) and model.embed.weight.shape == (23, 24)
    assert model.pos_embed.weight.shape == (16, 24)
    assert isinstance(model.unembed, torch.nn.Linear) and model.unembed.weight.shape == (23, 24)
    assert len(model.blocks) == 2
    attn = model.blocks[0].attn
    for name in ("W_Q", "W_K", "W_V"):
        assert getattr(attn, name).weight.shape == (15, 24)
    assert attn.W_O.weight.shape == (24, 15)
    assert isinstance(attn.hook_pattern, torch.nn.Identity)
    assert model.blocks[0].mlp is not None and model.ln_final is not None
    logits = model(tokens())
    assert logits.shape == (3, 12, 23) and torch.isfinite(logits).all()


def test_attention_only_config_has_no_mlp():
    model = make(d_mlp=0)
    assert model.config.attn_only
    for block in model.blocks:
        assert block.mlp is None and block.ln2 is None
    assert not any("mlp" in name for name, _ in model.named_parameters())


def test_init_is_deterministic_given_the_seed():
    a, b, c = make(seed=5), make(seed=5), make(seed=6)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n
    assert not torch.equal(a.embed.weight, c.embed.weight)
    ids = tokens()
    assert torch.equal(a(ids), b(ids))


def test_init_scales():
    model = make(seed=0, d_model=64, n_heads=4, n_layers=2)
    std = model.config.init_std
    assert model.embed.weight.std().item() == pytest.approx(std, rel=0.1)
    assert model.blocks[0].attn.W_O.weight.std().item() == pytest.approx(std / 2, rel=0.1)  # / sqrt(2 n_layers)
    assert model.blocks[0].attn.W_Q.bias.abs().max() == 0


# ---------------------------------------------------------------------------- causality and padding

def test_causal_future_tokens_never_change_earlier_logits():
    model = make()
    ids = tokens()
    base = model(ids)
    for t in range(ids.shape[1]):
        changed = ids.clone()
        changed[:, t] = (changed[:, t] + 1) % 23
        out = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t], base[:, t])  # the changed position itself does see it


def test_appending_padding_never_changes_real_positions():
    model = make()
    ids = tokens(pos=9)
    base = model(ids)
    padded = torch.cat([ids, torch.randint(0, 23, (3, 5))], dim=1)  # pads hold arbitrary token ids
    mask = torch.cat([torch.ones(3, 9), torch.zeros(3, 5)], dim=1).long()
    out = model(padded, mask)
    torch.testing.assert_close(out[:, :9], base, rtol=0, atol=1e-5)


def test_padded_keys_get_zero_weight_and_rows_sum_to_one():
    model = make()
    ids = tokens(pos=10)
    lengths = torch.tensor([10, 6, 1])
    mask = (torch.arange(10)[None] < lengths[:, None]).long()
    patterns = capture_patterns(model, ids, mask)
    assert len(patterns) == 2
    for p in patterns:
        assert p.shape == (3, 3, 10, 10)
        torch.testing.assert_close(p.sum(-1), torch.ones(3, 3, 10))
        assert (p * (1 - mask)[:, None, None, :]).abs().max() == 0  # padded keys
        assert torch.triu(p, diagonal=1).abs().max() == 0  # future keys
        assert torch.isfinite(p).all()
    # a one-token sequence: position 0 attends to itself only, everywhere (no NaN row)
    torch.testing.assert_close(patterns[0][2, :, :, 0], torch.ones(3, 10))


def test_bad_inputs_get_clear_errors():
    model = make()
    with pytest.raises(ValueError, match="longer than the model's n_ctx=16"):
        model(tokens(pos=17))
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 23\)"):
        model(torch.tensor([[1, 23]]))
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="right-padded"):
        model(tokens(pos=4), torch.tensor([[1, 0, 1, 1]] * 3))
    with pytest.raises(ValueError, match="start with a real token"):
        model(tokens(pos=4), torch.tensor([[0, 0, 0, 0]] * 3))
    with pytest.raises(ValueError, match="only 0"):
        model(tokens(pos=4), torch.full((3, 4), 2))
    with pytest.raises(ValueError, match="shape"):
        model(tokens(pos=4), torch.ones(3, 5))


# ---------------------------------------------------------------------------- the head interface

def test_W_O_input_is_the_concatenated_per_head_outputs():
    """Recompute block 0's attention by hand, head by head, and compare with what W_O receives."""
    model = make(d_head=5)
    ids = tokens(pos=7)
    seen = {}
    handle = model.blocks[0].attn.W_O.register_forward_pre_hook(lambda m, args: seen.setdefault("z", args[0]))
    try:
        model(ids)
    finally:
        handle.remove()
    attn = model.blocks[0].attn
    with torch.no_grad():
        x = model.blocks[0].ln1(model.embed(ids) + model.pos_embed.weight[:7])  # (batch, pos, d_model)
        heads = []
        for h in range(3):
            cols = slice(5 * h, 5 * (h + 1))
            q = x @ attn.W_Q.weight[cols].T + attn.W_Q.bias[cols]  # (batch, pos, d_head)
            k = x @ attn.W_K.weight[cols].T + attn.W_K.bias[cols]
            v = x @ attn.W_V.weight[cols].T + attn.W_V.bias[cols]
            scores = q @ k.transpose(1, 2) / math.sqrt(5)  # (batch, q_pos, k_pos)
            future = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
            heads.append(scores.masked_fill(future, -math.inf).softmax(-1) @ v)
        expected = torch.cat(heads, dim=-1)  # (batch, pos, n_heads * d_head)
    assert seen["z"].shape == (3, 7, 15)
    torch.testing.assert_close(seen["z"], expected, rtol=1e-5, atol=1e-6)


def test_hook_pattern_can_replace_the_pattern():
    """A forward hook that returns a new pattern changes the output: the hook sits before pattern @ V."""
    model = make()
    ids = tokens()
    base = model(ids)
    uniform = lambda m, i, out: torch.tril(torch.ones_like(out)) / torch.tril(torch.ones_like(out)).sum(-1, keepdim=True)
    handle = model.blocks[1].attn.hook_pattern.register_forward_hook(uniform)
    try:
        changed = model(ids)
    finally:
        handle.remove()
    assert not torch.allclose(changed, base)
    torch.testing.assert_close(model(ids), base)


# ---------------------------------------------------------------------------- loss

def test_model_loss_is_next_token_loss_of_its_logits_and_gradients_flow():
    model = make().train()
    ids = tokens()
    loss = model.loss(ids)
    torch.testing.assert_close(loss, next_token_loss(model(ids), ids, reduction="mean"))
    manual = torch.nn.functional.cross_entropy(model(ids)[:, :-1].reshape(-1, 23), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, manual)
    padded = torch.cat([ids, ids[:, :3]], dim=1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros(3, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model.loss(padded, mask), loss)  # padding does not count
    assert abs(loss.item() - math.log(23)) < 0.5  # near-uniform at init
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.blocks[0].attn.W_Q.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------- detectors

def planted(kind: str, ids: torch.Tensor) -> torch.Tensor:
    """A (batch, 1, pos, pos) pattern: previous-token, induction (fallback BOS), or uniform causal."""
    batch, pos = ids.shape
    p = torch.zeros(batch, 1, pos, pos)
    if kind == "uniform":
        return torch.tril(torch.ones(pos, pos)).div(torch.arange(1, pos + 1)[:, None]).expand(batch, 1, pos, pos).clone()
    prev = previous_occurrence(ids)
    for b in range(batch):
        for i in range(pos):
            if kind == "prev":
                p[b, 0, i, max(i - 1, 0)] = 1
            else:
                p[b, 0, i, prev[b, i] + 1 if prev[b, i] >= 0 else 0] = 1
    return p


def test_previous_occurrence_is_the_most_recent_earlier_match_excluding_i_minus_1():
    ids = torch.tensor([[5, 1, 2, 1, 1, 5, 2, 9]])
    #                    0  1  2  3  4  5  6  7
    assert previous_occurrence(ids).tolist() == [[-1, -1, -1, 1, 1, 0, 2, -1]]
    # position 4 (token 1): candidates 1 and 3; 3 = i-1 is excluded, so 1


def test_detectors_on_planted_patterns():
    ids = torch.tensor([[9, 1, 2, 3, 4, 1, 2, 3, 4, 8], [9, 5, 6, 7, 5, 6, 7, 2, 3, 4]])
    prev = planted("prev", ids)
    induct = planted("induction", ids)
    uni = planted("uniform", ids)
    torch.testing.assert_close(previous_token_score(prev), torch.ones(2, 1))
    torch.testing.assert_close(induction_score(induct, ids), torch.ones(2, 1))
    expected_uniform_prev = torch.tensor([1 / (i + 1) for i in range(1, 10)]).mean()
    torch.testing.assert_close(previous_token_score(uni), expected_uniform_prev.expand(2, 1))
    # a previous-token head on a sequence with repeats: row 0's eligible queries 5..8 attend to 4..7, not 2..5
    assert induction_score(prev, ids).tolist() == [[0.0], [0.0]]
    # per input: mixing inputs does not average them
    mixed = torch.cat([induct[:1], prev[1:]])
    scores = induction_score(mixed, ids)
    assert scores.tolist() == [[1.0], [0.0]]


def test_detectors_respect_padding_and_empty_inputs():
    ids = torch.tensor([[9, 1, 2, 1, 2, 0, 0], [9, 3, 4, 5, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0]])
    p = planted("prev", ids)
    torch.testing.assert_close(previous_token_score(p, mask), torch.ones(2, 1))
    ind = planted("induction", ids)
    ind[:, :, 5:] = 0
    ind[:, :, 5:, 0] = 1  # padded queries attend to BOS: they must not count
    ids[0, 5:] = 1  # padded positions holding a repeated token id
    # row 1's real tokens never repeat; its padding (0 at 4, 5, 6) would repeat if it counted
    with pytest.raises(ValueError, match=r"inputs \[1\] have no repeated token"):
        induction_score(ind, ids, mask)
    s = induction_score(ind, ids, mask, on_empty="nan")
    assert s[0, 0] == 1 and torch.isnan(s[1, 0])
    assert induction_score(ind, ids)[0, 0] < 1  # without the mask, the padded repeats count
    with pytest.raises(ValueError, match="on_empty"):
        induction_score(ind, ids, mask, on_empty="zero")
    with pytest.raises(ValueError, match="pattern must be"):
        previous_token_score(torch.zeros(2, 7, 7))
    with pytest.raises(ValueError, match="tokens must be"):
        induction_score(p, ids[:, :5])


# ---------------------------------------------------------------------------- the planted model

def test_planted_model_is_the_books_gpt_with_hand_set_weights():
    from deviating.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, PlantedModel, planted_model

    state = torch.get_rng_state()
    hm = planted_model(d_vocab=10, n_ctx=12)
    assert torch.equal(torch.get_rng_state(), state)  # building it draws no random number
    model = hm.model
    assert isinstance(model, PlantedModel) and isinstance(model, GPT)
    cfg = model.config
    assert (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_model) == (2, 2, 12, 3 * 10 + 12)
    assert cfg.attn_only and not cfg.layer_norm and cfg.model_type == "headlab"
    assert all(float(p.detach().abs().sum()) == 0 for n, p in model.named_parameters() if n.endswith("bias"))
    # 10 random tokens after a <bos> (token 0), then the same 10 again
    span = torch.randperm(9, generator=torch.Generator().manual_seed(0)) + 1
    ids = torch.cat([torch.tensor([0]), span, span])[None, :12]
    _, cache = hm.run_with_cache(ids)
    prev = cache.pattern(PREVIOUS_TOKEN_HEAD[0])[0, PREVIOUS_TOKEN_HEAD[1]]  # (q_pos, k_pos)
    assert torch.all(prev[torch.arange(1, 12), torch.arange(0, 11)] > 0.99)
    induct = cache.pattern(INDUCTION_HEAD[0])[0, INDUCTION_HEAD[1]]
    assert all(float(induct[i, i - 9 + 1]) > 0.99 for i in range(10, 12))  # the token after the earlier copy
    with pytest.raises(ValueError, match="d_vocab >= 2"):
        PlantedModel(d_vocab=1)
