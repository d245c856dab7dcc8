"""Head averaging (deviating.analysis.averaging) and attention-transfer distillation (deviating.training.distill)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from deviating.analysis.averaging import average_heads, layer_mean_pattern, layer_mean_z
from deviating.training.distill import attention_transfer_loss, distill, transfer_targets
from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT, GPTConfig


def _gpt(seed: int = 0, n_heads: int = 4, d_vocab: int = 31, n_ctx: int = 16) -> HeadModel:
    torch.manual_seed(seed)
    return HeadModel(GPT(GPTConfig(d_vocab=d_vocab, n_ctx=n_ctx, d_model=32, n_layers=2, n_heads=n_heads,
                                   d_mlp=64)).eval(), name=f"gpt-s{seed}")


def _copy_head_zero(hm: HeadModel, layer: int, what: str) -> None:
    """Make every head of ``layer`` a copy of head 0 in ``what`` ("QK": same patterns, "QKV": same z)."""
    attn = hm.model.blocks[layer].attn
    d = attn.d_head
    with torch.no_grad():
        for name in {"QK": ("W_Q", "W_K"), "QKV": ("W_Q", "W_K", "W_V")}[what]:
            lin = getattr(attn, name)
            for h in range(1, attn.n_heads):
                lin.weight[h * d:(h + 1) * d] = lin.weight[:d]
                lin.bias[h * d:(h + 1) * d] = lin.bias[:d]


def _ids(n=3, pos=12, d_vocab=31, seed=0):
    return torch.randint(1, d_vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ averaging


def test_layer_mean_z_replaces_every_head_by_the_mean():
    z = torch.zeros(1, 2, 3, 2)  # (batch, pos, head, d_head)
    z[0, :, 0] = 3.0
    z[0, :, 1] = 0.0
    z[0, :, 2] = -6.0  # mean over heads: -1
    out = layer_mean_z(0, z)
    assert out.shape == z.shape
    assert torch.equal(out, torch.full_like(z, -1.0))
    assert z[0, 0, 0, 0] == 3.0  # the input is not modified
    with pytest.raises(ValueError, match="batch, pos, head, d_head"):
        layer_mean_z(0, z[0])


def test_layer_mean_pattern_is_the_mean_distribution():
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])[None]  # (1, head=2, 2, 2)
    out = layer_mean_pattern(1, p)
    assert torch.equal(out[0, 0], torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    assert torch.equal(out[0, 0], out[0, 1])
    assert torch.allclose(out.sum(-1), torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match="q_pos, k_pos"):
        layer_mean_pattern(0, p[0])


@pytest.mark.parametrize("what, copied", [("z", "QKV"), ("pattern", "QK")])
def test_averaging_changes_nothing_when_heads_are_identical(what, copied):
    """Heads with identical z (or identical patterns) are their own mean: averaging is a no-op there,
    and not elsewhere."""
    hm, ids = _gpt(), _ids()
    with torch.no_grad():
        before = hm.forward(ids)
        with average_heads(hm, [0], what=what):
            changed = hm.forward(ids)
    assert not torch.allclose(before, changed, atol=1e-4)  # distinct heads: averaging matters
    _copy_head_zero(hm, 0, copied)
    with torch.no_grad():
        before = hm.forward(ids)
        with average_heads(hm, [0], what=what):
            same = hm.forward(ids)
        after = hm.forward(ids)
    assert torch.allclose(before, same, atol=1e-5)
    assert torch.equal(before, after)  # the patch is removed on exit


def test_average_heads_pattern_gives_every_head_the_layer_mean():
    hm, ids = _gpt(), _ids()
    _, clean = hm.run_with_cache(ids, names=("pattern",))
    with average_heads(hm, [1], what="pattern"):
        _, cache = hm.run_with_cache(ids, names=("pattern",))
    mean = clean.pattern(1).mean(1, keepdim=True)
    # layer 0 is untouched, so layer 1's input, hence its own patterns, are the clean ones
    for h in range(hm.n_heads):
        assert torch.allclose(cache.pattern(1)[:, h], mean[:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="'z'.*'pattern'"):
        with average_heads(hm, [0], what="values"):
            pass


# ------------------------------------------------------------ transfer loss


def _softmax_rows(n_heads, seed, batch=2, pos=5):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, n_heads, pos, pos, generator=g)
    causal = torch.tril(torch.ones(pos, pos, dtype=torch.bool))
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


def test_transfer_loss_is_the_kl_of_the_rows():
    # one layer, one head, one row: KL([1/2, 1/2] || [1/4, 3/4]) = 1/2 ln 2 + 1/2 ln(2/3)
    t = torch.tensor([0.5, 0.5]).view(1, 1, 1, 2)
    s = torch.tensor([0.25, 0.75]).view(1, 1, 1, 2)
    expected = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    assert attention_transfer_loss([s], [t]) == pytest.approx(expected, rel=1e-6)
    assert attention_transfer_loss([t], [t]) == pytest.approx(0.0, abs=1e-7)


def test_transfer_targets_and_their_zeros():
    teacher = [_softmax_rows(4, seed=l) for l in range(2)]
    student = [_softmax_rows(4, seed=10 + l) for l in range(2)]
    assert attention_transfer_loss(teacher, teacher, "per_head") == pytest.approx(0.0, abs=1e-6)
    assert attention_transfer_loss(student, teacher, "per_head") > 0.05
    # every student head equal to the teacher's layer mean: zero loss for "mean", not for "per_head"
    means = transfer_targets(teacher, "mean")
    assert means[0].shape == (2, 1, 5, 5)
    flat = [m.expand(-1, 4, -1, -1).clone() for m in means]
    assert attention_transfer_loss(flat, teacher, "mean") == pytest.approx(0.0, abs=1e-6)
    assert attention_transfer_loss(flat, teacher, "per_head") > 0.01
    # heads that differ but average to the teacher's mean: zero only for "mean_to_mean"
    perm = [t[:, [1, 0, 3, 2]] for t in teacher]  # same mean, heads swapped
    assert attention_transfer_loss(perm, teacher, "mean_to_mean") == pytest.approx(0.0, abs=1e-6)
    assert attention_transfer_loss(perm, teacher, "mean") > 0.01
    # a student with fewer heads can learn the mean, not per-head patterns
    two = [s[:, :2] for s in student]
    assert attention_transfer_loss(two, teacher, "mean") > 0
    with pytest.raises(ValueError, match="as many student heads"):
        attention_transfer_loss(two, teacher, "per_head")


def test_transfer_loss_errors():
    t = [_softmax_rows(2, 0)]
    with pytest.raises(ValueError, match="unknown transfer target"):
        attention_transfer_loss(t, t, "average")
    with pytest.raises(ValueError, match="no transfer loss"):
        attention_transfer_loss(t, t, "none")
    with pytest.raises(ValueError, match="1 layers and the teacher 2"):
        attention_transfer_loss(t, t + t)
    with pytest.raises(ValueError, match="batch or positions"):
        attention_transfer_loss([t[0][:, :, :4, :4]], t)


# ---------------------------------------------------------------- training


@pytest.fixture(scope="module")
def tiny_recipe():
    from deviating.training.recipes import RECIPES

    base = RECIPES["distill-student"]
    config = dataclasses.replace(base.config, d_model=16, n_heads=2, d_head=8, d_mlp=32)
    return dataclasses.replace(base, name="tiny-student", config=config, steps=6, batch_size=2, warmup=2,
                               eval_every=100, eval_size=8)


def test_distill_without_transfer_is_the_plain_training_run(tiny_recipe):
    from deviating.training.loop import train

    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    plain = train(tiny_recipe, seed=3, steps=4, progress=False)
    res = distill(tiny_recipe, teacher, target="none", weight=0.0, seed=3, steps=4, progress=False)
    for (name, a), (_, b) in zip(plain.model.named_parameters(), res.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert res.info["target"] == "none" and res.info["steps"] == 4
    assert res.curve[0]["step"] == 0 and res.curve[-1]["step"] == 4


def test_per_head_transfer_pulls_the_patterns_towards_the_teacher(tiny_recipe):
    torch.manual_seed(7)
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    with torch.no_grad():  # a teacher with sharp, distinctive patterns
        for block in teacher.model.blocks:
            block.attn.W_Q.weight.mul_(20.0)
    ids = next(tiny_recipe.task.train_batches(4, torch.Generator().manual_seed(99)))

    def kl_to_teacher(model):
        student = HeadModel(model)
        _, s = student.run_with_cache(ids, names=("pattern",))
        _, t = teacher.run_with_cache(ids, names=("pattern",))
        return float(attention_transfer_loss([s.pattern(l) for l in range(2)], [t.pattern(l) for l in range(2)]))

    fast = dataclasses.replace(tiny_recipe, lr=0.03)  # a few steps must move the patterns
    kw = dict(seed=0, steps=30, progress=False)
    none = distill(fast, teacher, target="none", weight=0.0, **kw)
    per_head = distill(fast, teacher, target="per_head", weight=5.0, **kw)
    assert kl_to_teacher(per_head.model) < 0.8 * kl_to_teacher(none.model)
    assert per_head.curve[-1]["train_transfer_loss"] is not None


def test_distill_rejects_bad_settings(tiny_recipe):
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    with pytest.raises(ValueError, match="weight 0 transfers nothing"):
        distill(tiny_recipe, teacher, target="mean", weight=0.0, steps=1, progress=False)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        distill(tiny_recipe, teacher, target="mean", weight=-1.0, steps=1, progress=False)
    wide = HeadModel(GPT(dataclasses.replace(tiny_recipe.config, n_heads=4, d_head=4)).eval())
    with pytest.raises(ValueError, match="per-head transfer needs as many heads"):
        distill(tiny_recipe, wide, target="per_head", steps=1, progress=False)


# Recorded with distill as it was before it ran on the one training loop (its own copy of the loop,
# commit 10ebb64): (val_loss, train_lm_loss, train_transfer_loss at the end, sum of the embedding, sum
# of layer 1's W_Q). Moving it onto deviating.training.loop changed no number.
BEFORE_THE_LOOP = {
    "mean": (6.446476459503174, 6.658520796308665, 1.3646122476275262, -3.076869180999438, -1.1040488844300853),
    "mean_to_mean": (6.447791576385498, 6.658720136308072, 1.359745013444498, -3.1161812029445173, -1.079944065597374),
    "per_head": (6.45529842376709, 6.659884707973152, 1.9122521376775203, -3.017496174225471, -1.145478589402046),
}


@pytest.mark.parametrize("target, weight", [("mean", 1.0), ("mean_to_mean", 2.0), ("per_head", 5.0)])
def test_distill_on_the_loop_gives_the_numbers_recorded_before_it(tiny_recipe, target, weight):
    torch.manual_seed(7)
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    with torch.no_grad():
        for block in teacher.model.blocks:
            block.attn.W_Q.weight.mul_(20.0)
    res = distill(tiny_recipe, teacher, target=target, weight=weight, seed=1, steps=6, eval_every=3, progress=False)
    last = res.curve[-1]
    got = (res.metrics["val_loss"], last["train_lm_loss"], last["train_transfer_loss"],
           float(res.model.embed.weight.detach().double().sum()),
           float(res.model.blocks[1].attn.W_Q.weight.detach().double().sum()))
    assert [r["step"] for r in res.curve] == [0, 3, 6]
    assert got == pytest.approx(BEFORE_THE_LOOP[target], rel=1e-4, abs=1e-5)


def test_distill_curve_has_both_terms_and_the_control_only_one(tiny_recipe):
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    none = distill(tiny_recipe, teacher, target="none", weight=0.0, seed=0, steps=2, progress=False)
    mean = distill(tiny_recipe, teacher, target="mean", weight=1.0, seed=0, steps=2, progress=False)
    for run in (none, mean):  # one schema for every target, the organisms' curve columns included
        assert list(run.curve[0])[:4] == ["step", "seconds", "train_lm_loss", "train_transfer_loss"]
        assert run.curve[0]["train_lm_loss"] is None and "induction_best_head" in run.curve[0]
    assert none.curve[-1]["train_transfer_loss"] is None and mean.curve[-1]["train_transfer_loss"] > 0
    assert none.curve[-1]["train_lm_loss"] != mean.curve[-1]["train_lm_loss"]


def test_distill_refuses_a_teacher_on_another_device(tiny_recipe):
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    with pytest.raises(ValueError, match="teacher is on cpu but the student trains on cuda"):
        distill(tiny_recipe, teacher, target="mean", device="cuda", steps=1, progress=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_distill_on_cuda_matches_the_cpu_run(tiny_recipe):
    """The student trains on the GPU with the teacher there too; the run is the CPU run up to float noise."""
    torch.manual_seed(7)
    teacher = HeadModel(GPT(tiny_recipe.config).eval())
    cpu = distill(tiny_recipe, teacher, target="per_head", weight=1.0, seed=0, steps=4, progress=False)
    teacher.model.to("cuda")
    gpu = distill(tiny_recipe, teacher, target="per_head", weight=1.0, seed=0, steps=4, device="cuda", progress=False)
    assert gpu.model.device.type == "cpu"  # returned on the CPU, as train() returns its models
    assert gpu.metrics["val_loss"] == pytest.approx(cpu.metrics["val_loss"], abs=1e-3)
    assert gpu.curve[-1]["train_transfer_loss"] == pytest.approx(cpu.curve[-1]["train_transfer_loss"], abs=1e-3)
