"""A new architecture is one entry (issue 35): a model family headlab has never seen, added in this
file only, through the public :func:`headlab.heads.adapters.register_architecture`.

The toy family is not Hugging Face's: a small pre-LayerNorm transformer with one fused ``qkv``
projection stacked ``q | k | v``, its pattern passed through an ``nn.Identity`` of its own, its own
names for everything. Its :class:`Architecture` below is all a newcomer writes; then the gate,
capture, activation patching, the readout and (once merged) attribution patching run on it
unchanged, each checked against plain PyTorch. Files a newcomer touches: this one.
"""

from __future__ import annotations

import contextlib
import copy
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from headlab.analysis.lens import direct_logit_attribution, logit_lens
from headlab.analysis.patching import activation_patch
from headlab.analysis.streaming import streamed
from headlab.heads.adapters import QKV, Architecture, UnsupportedModelError, register_architecture
from headlab.heads.model import HeadModel
from headlab.metrics import LogitMetric, Metric
from tiny_models import reference_attribution, reference_patch

D, H, V, N_CTX = 24, 3, 29, 16


class ToyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.qkv, self.out, self.seen = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D), nn.Identity()
        self.ff = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x, mask):
        b, p, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, p, 3, H, D // H).unbind(2)  # (b, p, head, d_head)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // H)
        allowed = torch.ones(p, p, dtype=torch.bool).tril() & mask.bool()[:, None, None, :]
        pattern = self.seen(scores.masked_fill(~allowed, float("-inf")).softmax(-1))
        x = x + self.out(torch.einsum("bhqk,bkhd->bqhd", pattern, v).reshape(b, p, D))
        return x + self.ff(x)


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(model_type="toy", heads=H, width=D, vocab=V, context=N_CTX)
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(N_CTX, D)
        self.stack = nn.ModuleList(ToyBlock() for _ in range(2))
        self.final, self.to_vocab = nn.LayerNorm(D), nn.Linear(D, V)

    def forward(self, ids, mask):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.stack:
            x = block(x, mask)
        return self.to_vocab(self.final(x))


TOY = Architecture(  # everything a newcomer writes
    name="toy", model_types=("toy",), causal=True,
    blocks=lambda m: m.stack,
    pattern_module=lambda b: b.seen, pattern_index=None, pattern_replaceable=True,
    out_proj=lambda b: b.out, conv1d=False,
    qkv=lambda b: QKV(*(w.T for w in b.qkv.weight.chunk(3)), *b.qkv.bias.chunk(3)),
    attn_norm=lambda b: b.norm, norm_centres=True, rotary=False,
    n_heads=lambda c: c.heads, n_kv_heads=lambda c: c.heads, d_head=lambda c: c.width // c.heads,
    run=lambda m, ids, mask: m(ids, mask),
    eager_attention=lambda m: contextlib.nullcontext(),  # its pattern is always computed
    max_positions=lambda c: c.context, vocab_size=lambda c: c.vocab,
    final_norm=lambda m: m.final, unembed=lambda m: m.to_vocab,
)


@pytest.fixture(scope="module")
def hm():
    torch.manual_seed(0)
    model = Toy().eval()
    with pytest.raises(UnsupportedModelError, match="register_architecture"):
        HeadModel(model)
    remove = register_architecture(TOY)
    try:
        yield HeadModel(model, name="toy")
    finally:
        remove()
    with pytest.raises(UnsupportedModelError):
        HeadModel(model)


def batch(seed: int) -> dict:
    ids = torch.randint(0, V, (3, 9), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_a_model_type_is_served_once(hm):
    with pytest.raises(ValueError, match=r"\['toy'\] are served by the 'toy' adapter"):
        register_architecture(TOY)
    with pytest.raises(TypeError, match="needs an Architecture"):
        register_architecture({"name": "toy"})
    assert (hm.n_layers, hm.n_heads, hm.d_head, hm.d_model) == (2, H, D // H, D)


def test_the_gate_is_zeroing_the_heads_columns_of_W_O(hm):
    b = batch(0)
    with torch.no_grad(), hm.ablate([(1, 2)]):
        gated = hm(b)
    surgery = copy.deepcopy(hm.model)
    with torch.no_grad():
        surgery.stack[1].out.weight[:, 2 * (D // H):] = 0.0
        torch.testing.assert_close(gated, surgery(**{"ids": b["input_ids"], "mask": b["attention_mask"]}))
        assert (gated - hm(b)).abs().max() > 1e-3


def test_capture_reads_the_models_own_pattern(hm):
    b = batch(1)
    seen = []
    handle = hm.model.stack[0].seen.register_forward_hook(lambda m, a, out: seen.append(out))
    with torch.no_grad():
        hm.model(b["input_ids"], b["attention_mask"])
    handle.remove()
    _, cache = hm.run_with_cache(b)
    torch.testing.assert_close(cache.pattern(0), seen[0])
    with torch.no_grad():  # the weights the entry reads are the ones the model uses
        x = hm.model.stack[0].norm(hm.model.tok(b["input_ids"]) + hm.model.pos(torch.arange(9)))
        k = hm.model.stack[0].qkv(x)[..., D:2 * D].unflatten(-1, (H, D // H))  # (b, p, head, d_head)
    torch.testing.assert_close(x @ hm.W_K(0)[1] + hm.b_K(0)[1], k[..., 1, :])


def test_activation_and_attribution_patching_equal_plain_pytorch(hm):
    clean, corrupted = batch(2), batch(3)
    score = LogitMetric("logit_diff", (3, 5))
    values = activation_patch(hm, clean, corrupted, metric=Metric(score))
    for layer, head in [(0, 0), (1, 2)]:
        torch.testing.assert_close(values[:, layer, head], reference_patch(hm, clean, corrupted, layer, head, score))
    attribution = pytest.importorskip("headlab.analysis.attribution", reason="attribution patching not merged yet")
    ours = attribution.attribution_patch(hm, clean, corrupted, metric=Metric(score))
    torch.testing.assert_close(ours.float(), reference_attribution(hm, clean, corrupted, score), atol=1e-4, rtol=1e-4)


def test_the_readout_comes_from_the_entry(hm):
    b = batch(4)
    with torch.no_grad():
        logits = hm(b)
    torch.testing.assert_close(logit_lens(hm, b)[-1], logits)
    att = direct_logit_attribution(hm, b, (3, 5))
    torch.testing.assert_close(att.total(), att.logits, atol=1e-5, rtol=0)
    with pytest.raises(NotImplementedError, match="give its Architecture a fused_attention"):
        with streamed(hm):
            pass
