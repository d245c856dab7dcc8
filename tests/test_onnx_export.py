"""The ONNX exports the website's widgets run: the same numbers as PyTorch, gate included.

Each export is run with onnxruntime (the CPU build of the runtime whose wasm build
the site serves) and compared with headlab's PyTorch path for the same settings:
the clean model, zero ablation and mean ablation through HeadModel.ablate, on a
right-padded batch. About 3 s for the three model shapes.
"""

from __future__ import annotations

import pytest
import torch

import headlab
import headlab.models.checkpoints
from headlab.heads.ablation import Ablation
from headlab.heads.onnx import (EXPORT_VERSION, GatedGPT, export_gpt, export_organism, gate_inputs,
                                onnx_file_name)
from headlab.models.gpt import GPT, GPTConfig

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

# the three shapes the widgets use: attention-only, the heads-N family, the 4x8 organism
MODELS = ["attn-only-2l", "heads-2", "organism"]


def session(data: bytes):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def run(sess, batch, gate, replacement):
    feeds = {"input_ids": batch["input_ids"].numpy(), "attention_mask": batch["attention_mask"].numpy(),
             "gate": gate.numpy(), "replacement": replacement.numpy()}
    return [torch.from_numpy(x) for x in sess.run(None, feeds)]


@pytest.fixture(scope="module", params=MODELS)
def exported(request):
    hm = headlab.load(request.param)
    return hm, session(export_gpt(hm.model))


def batch_of(hm, seed: int = 0):
    """Two texts of different lengths (the second right-padded), longer than the export's example."""
    g = torch.Generator().manual_seed(seed)
    n = min(hm.model.config.n_ctx, 24)
    ids = torch.randint(0, hm.model.config.d_vocab - 3, (2, n), generator=g)
    mask = torch.ones_like(ids)
    mask[1, n - 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def close(got, want, atol, what):
    err = float((got - want).abs().max())
    assert err <= atol, f"{what}: ONNX differs from PyTorch by {err:.2e} (> {atol:.0e})"


def test_clean_model_matches(exported):
    hm, sess = exported
    batch = batch_of(hm)
    gate, replacement = gate_inputs(hm.model)
    logits, patterns, z = run(sess, batch, gate, replacement)
    out, cache = hm.run_with_cache(batch, names=("pattern", "z"))
    real = batch["attention_mask"].bool()
    close(logits[real], out[real], 1e-4, "logits")
    for layer in range(hm.n_layers):
        close(patterns[layer][0], cache.pattern(layer)[0], 1e-5, f"layer {layer} pattern")
        close(z[layer][real], cache.z(layer)[real], 1e-4, f"layer {layer} z")


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_gate_is_headmodel_ablation(exported, mode):
    """Several gate settings: what the export computes equals HeadModel.ablate."""
    hm, sess = exported
    batch = batch_of(hm, seed=1)
    real = batch["attention_mask"].bool()
    last = hm.n_layers - 1
    settings = [[(0, 0)], [(0, hm.n_heads - 1), (last, 0)], [(layer, 0) for layer in range(hm.n_layers)]]
    reference = hm.replacements(Ablation("mean", reference=batch), list(range(hm.n_layers))) if mode == "mean" else None
    for heads in settings:
        mean = torch.stack([reference[l] for l in range(hm.n_layers)]) if mode == "mean" else None
        gate, replacement = gate_inputs(hm.model, heads, mean)
        logits, patterns, _ = run(sess, batch, gate, replacement)
        with hm.ablate(heads, Ablation(mode, reference=batch if mode == "mean" else None)):
            out, cache = hm.run_with_cache(batch, names=("pattern",))
        with torch.no_grad():
            clean = hm(batch)
        assert float((out - clean)[real].abs().max()) > 1e-4, f"ablating {heads} changed nothing"
        close(logits[real], out[real], 1e-4, f"{mode} ablation of {heads}: logits")
        close(patterns[last][0], cache.pattern(last)[0], 1e-5, f"{mode} ablation of {heads}: last pattern")


def test_wrapper_checks_its_inputs():
    model = GPT(GPTConfig(d_vocab=10, n_ctx=8, d_model=8, n_layers=1, n_heads=2))
    ids = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"gate must have shape \(1, 2\)"):
        GatedGPT(model)(ids, torch.ones_like(ids), torch.ones(2, 1), torch.zeros(1, 2, 4))
    with pytest.raises(TypeError, match="wraps a headlab.models.gpt.GPT"):
        GatedGPT(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="head 1.0 is out of range"):
        gate_inputs(model, [(1, 0)])


def test_export_file_is_named_by_checkpoint_and_cached(tmp_path):
    name = onnx_file_name("attn-only-2l")
    provenance = headlab.models.checkpoints.verify_checkpoint(headlab.models.checkpoints.CHECKPOINT_DIR / "attn-only-2l")
    assert name == f"attn-only-2l-{provenance['sha256'][:12]}-v{EXPORT_VERSION}.onnx"
    path = export_organism("attn-only-2l", tmp_path)
    assert path.name == name and path.stat().st_size > 100_000
    stamp = path.stat().st_mtime_ns
    assert export_organism("attn-only-2l", tmp_path).stat().st_mtime_ns == stamp  # reused, not rewritten
    with pytest.raises(ValueError, match="unknown organism 'nope'"):
        export_organism("nope", tmp_path)


def test_export_leaves_the_model_as_it_found_it_and_checks_the_path_first(tmp_path):
    model = GPT(GPTConfig(d_vocab=11, n_ctx=8, d_model=16, n_layers=1, n_heads=2, d_mlp=0)).train()
    export_gpt(model, tmp_path / "m.onnx")
    assert model.training  # the export traces in eval mode, then puts the caller's mode back
    model.eval()
    export_gpt(model)
    assert not model.training
    with pytest.raises(ValueError, match="does not exist"):
        export_gpt(model, tmp_path / "missing" / "m.onnx")
    with pytest.raises(ValueError, match="is a folder"):
        export_gpt(model, tmp_path)
    with pytest.raises(ValueError, match="is not a folder"):
        export_organism("attn-only-1l", tmp_path, checkpoint_dir=tmp_path / "nonexistent")
    with pytest.raises(ValueError, match="is a file"):
        export_organism("attn-only-1l", tmp_path / "m.onnx")
