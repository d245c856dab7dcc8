"""The width/depth family of chapter 8: the recipes equalise what they claim to, and the FLOPs
count matches a hand count; the sweep script's resume and merge keep every run exactly once."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from headlab.models.gpt import GPTConfig
from deviating.training.recipes.width_depth import WIDTH_DEPTH, WIDTH_DEPTH_STEPS, forward_flops_per_token

ROOT = Path(__file__).resolve().parent.parent


def test_width_family_has_equal_inner_width_steps_and_flops():
    width = [r for r in WIDTH_DEPTH.values() if r.config.n_layers == 2]
    assert sorted(r.config.n_heads for r in width) == [1, 2, 4, 8, 16, 32]
    for r in width:  # the same inner width, steps and FLOPs however the heads are split
        assert r.config.n_heads * r.config.d_head == r.config.d_model == 64
        assert r.steps == WIDTH_DEPTH_STEPS
    assert len({forward_flops_per_token(r.config) for r in width}) == 1


@pytest.mark.parametrize("name", ["wd-1l-4h-flops", "wd-4l-4h-flops"])
def test_depth_flops_recipes_cost_the_two_layer_models_flops(name):
    r, ref = WIDTH_DEPTH[name], WIDTH_DEPTH["wd-2l-4h"]
    ratio = r.steps * forward_flops_per_token(r.config) / (ref.steps * forward_flops_per_token(ref.config))
    assert ratio == pytest.approx(1.0, abs=2e-3)
    assert (r.steps > ref.steps) == (r.config.n_layers < 2)  # 1 layer trains longer, 4 layers shorter


def test_forward_flops_known_answer():
    # 1 layer, d_model 2, one head of 2, MLP 4, context 3 (mean context 2), vocabulary 5:
    # matrices 2 * (4 * 2 * 2 + 2 * 2 * 4) = 64, attention 2 * 2 * 2 * 2 = 16, unembedding 2 * 2 * 5 = 20
    config = GPTConfig(d_vocab=5, n_ctx=3, d_model=2, n_layers=1, n_heads=1, d_mlp=4)
    assert forward_flops_per_token(config) == 64 + 16 + 20
    two = GPTConfig(d_vocab=5, n_ctx=3, d_model=2, n_layers=2, n_heads=1, d_mlp=4)
    assert forward_flops_per_token(two) == 2 * (64 + 16) + 20  # the unembedding is counted once


def _fake_results(tmp_path: Path, name: str, runs: list[tuple[str, int]], fixed: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"command": f"make {name}", "fixed": fixed, "seeds": sorted({s for _, s in runs}),
                                "total_wall_seconds": 1.0, "total_cpu_seconds": 2.0,
                                "runs": [{"name": n, "seed": s} for n, s in runs]}))
    return path


def _script(*args: str) -> int:
    spec = importlib.util.spec_from_file_location("width_depth_script", ROOT / "scripts" / "width_depth.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(list(args))


def test_merge_combines_runs_and_records_sources(tmp_path):
    a = _fake_results(tmp_path, "a.json", [("wd-2l-1h", 0), ("wd-2l-2h", 0)], {"steps": 700})
    b = _fake_results(tmp_path, "b.json", [("wd-2l-1h", 2)], {"steps": 700})
    out = tmp_path / "out.json"
    assert _script("--merge", str(a), str(b), "--out", str(out)) == 0
    merged = json.loads(out.read_text())
    assert [(r["name"], r["seed"]) for r in merged["runs"]] == [("wd-2l-1h", 0), ("wd-2l-2h", 0), ("wd-2l-1h", 2)]
    assert merged["seeds"] == [0, 2]
    assert [s["command"] for s in merged["sources"]] == ["make a.json", "make b.json"]
    assert merged["total_cpu_seconds"] == 4.0


def test_merge_refuses_different_settings_and_duplicate_runs(tmp_path, capsys):
    a = _fake_results(tmp_path, "a.json", [("wd-2l-1h", 0)], {"steps": 700})
    b = _fake_results(tmp_path, "b.json", [("wd-2l-2h", 0)], {"steps": 100})
    c = _fake_results(tmp_path, "c.json", [("wd-2l-1h", 0)], {"steps": 700})
    out = tmp_path / "out.json"
    assert _script("--merge", str(a), str(b), "--out", str(out)) == 2
    assert "different fixed settings" in capsys.readouterr().err
    assert _script("--merge", str(a), str(c), "--out", str(out)) == 2
    assert "share" in capsys.readouterr().err
    assert not out.exists()
