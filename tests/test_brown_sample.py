"""The held-out Brown sample that ships with the book (deviating.data.brown_sample)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import brown_or_skip
from deviating.data.brown_sample import held_out, load_eval, sample_path, save_eval
from deviating.data.brown_windows import BrownEval
from deviating.training.recipes import RECIPES
import headlab
from headlab.models.checkpoints import available_organisms

# a copy: preparing the registry's own task would load the corpus into RECIPES for the tests after this one
TASK = dataclasses.replace(RECIPES["brown-attn-2l"].task)
N = RECIPES["brown-attn-2l"].eval_size


def _toy() -> BrownEval:
    g = torch.Generator().manual_seed(0)
    return BrownEval(torch.randint(0, 1024, (4, 16), generator=g), torch.randint(0, 1024, (2, 15), generator=g),
                     torch.randint(0, 1024, (2, 15), generator=g), 7, {"induction": 0.1, "previous_token": 0.2},
                     {"unigram": 6.5, "bigram": 5.25})


def test_a_sample_reads_back_as_it_was_written(tmp_path):
    data = _toy()
    back = load_eval(save_eval(data, tmp_path / "s.safetensors"))
    for name in ("windows", "text_repeats", "random_repeats"):
        assert torch.equal(getattr(back, name), getattr(data, name))
        assert getattr(back, name).dtype == torch.int64  # ready for an embedding lookup
    assert (back.half, back.chance, back.baselines) == (data.half, data.chance, data.baselines)


def test_a_missing_or_foreign_file_says_how_to_write_the_sample(tmp_path):
    with pytest.raises(FileNotFoundError, match="scripts/brown_sample.py"):
        load_eval(tmp_path / "absent.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a Brown sample"):
        load_eval(tmp_path / "junk.safetensors")
    from safetensors.torch import save_file

    save_file({"windows": torch.zeros(2, 2, dtype=torch.int16)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a Brown sample"):
        load_eval(tmp_path / "other.safetensors")


def test_ids_that_do_not_fit_int16_are_refused(tmp_path):
    data = _toy()
    data.windows[0, 0] = 40_000
    with pytest.raises(ValueError, match="32767"):
        save_eval(data, tmp_path / "s.safetensors")


def test_the_shipped_sample_is_the_recipe_evaluation_data():
    path = sample_path(TASK, N)
    assert path.is_file(), f"{path} is missing: python scripts/brown_sample.py"
    shipped = held_out(TASK, N)
    assert shipped.windows.shape == (N, TASK.n_ctx) and bool((shipped.windows[:, 0] == 0).all())  # EOT first
    h = shipped.half
    assert torch.equal(shipped.text_repeats[:, 1:h + 1], shipped.text_repeats[:, h + 1:])  # span, then again
    brown_or_skip()  # the comparison with a fresh eval_data needs the corpus
    fresh = TASK.eval_data(N)
    for name in ("windows", "text_repeats", "random_repeats"):
        assert torch.equal(getattr(shipped, name), getattr(fresh, name)), name
    assert shipped.baselines == pytest.approx(fresh.baselines, rel=1e-6)
    assert shipped.chance == pytest.approx(fresh.chance, rel=1e-6)


BROWN_SHIPPED = [n for n in available_organisms() if n.startswith("brown-attn-2l")]


def test_the_brown_seeds_ship_together():
    assert BROWN_SHIPPED == ["brown-attn-2l"] + [f"brown-attn-2l-s{s}" for s in range(1, 5)], BROWN_SHIPPED


@pytest.mark.parametrize("name", BROWN_SHIPPED)
def test_each_shipped_brown_model_scores_on_the_sample_as_its_provenance_records(name):
    hm = headlab.load(name, device="cpu")
    assert hm.provenance["seed"] == RECIPES[name].seed
    got = TASK.evaluate(hm.model, held_out(TASK, N))
    recorded = hm.provenance["final_metrics"]
    assert recorded["loss_text_second"] < 0.5 * recorded["loss_text_first"]  # the phase change happened
    for key, value in recorded.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
    assert got["induction"] == recorded["induction"] and got["induction_best_head"] == recorded["induction_best_head"]
