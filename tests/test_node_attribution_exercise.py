"""The node attribution patching exercise (deviating.exercises.ch05b_attribution): the check passes a
solution written with headlab's public interface, on its fixed cases and on cases drawn from three
secret seeds; reports a stub as not implemented; rejects every wrong solution of
tests/wrong_solutions/ch05b_attribution.py, naming the mistake; refuses the library's own tool.

Until the exercise is in the indirect-object chapter's notebook, its solution lives here."""

from __future__ import annotations

import pytest
import torch

from deviating.exercises import ExerciseFailed, ForbiddenCall, NotImplementedYet
from deviating.exercises.ch05b_attribution import check_node_attribution
from deviating.exercises.drawn import drawing
from wrong_solutions.ch05b_attribution import CATALOGUE


def node_attribution(hm, clean, corrupted, end, io_id, s_id):
    """The solution: one clean forward whose z stay in the graph, one backward, then the change of z
    times its gradient, summed over positions and d_head."""
    def batch(ids):
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    with torch.no_grad():
        _, cache = hm.run_with_cache(batch(corrupted), names=("z",))
    kept = {}

    def keep(layer, z):
        z.retain_grad()
        kept[layer] = z
        return z

    with hm.patch_z(keep):
        logits = hm(batch(clean))
    rows = torch.arange(len(end))
    (logits[rows, end, io_id] - logits[rows, end, s_id]).sum().backward()
    hm.model.zero_grad(set_to_none=True)
    return torch.stack([((cache.z(l) - kept[l].detach()) * kept[l].grad).sum(dim=(1, 3))
                        for l in range(hm.n_layers)], dim=1)


def test_the_solution_passes_fixed_and_drawn_cases_and_a_stub_is_not_implemented(capsys):
    torch.set_num_threads(1)
    check_node_attribution(node_attribution)
    for seed in (3, 17, 2024):
        with drawing(seed) as counts:
            check_node_attribution(node_attribution)
        assert counts == [1]
    assert capsys.readouterr().out.count("✓") == 4

    def node_attribution_stub(*args):
        raise NotImplementedError

    check_node_attribution(node_attribution_stub)
    assert "not implemented" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", CATALOGUE["ex-05b-node-attribution"], ids=lambda f: f.__name__)
def test_every_wrong_solution_is_rejected_with_its_mistake_named(wrong, capsys):
    torch.set_num_threads(1)
    with pytest.raises(ExerciseFailed) as failure:
        check_node_attribution(wrong)
    assert not isinstance(failure.value, (NotImplementedYet, ForbiddenCall))
    problem = next(line for line in str(failure.value).splitlines() if "problem:" in line)
    assert "entries are off" not in problem, problem  # the check names the mistake, not just a mismatch
    with drawing(5), pytest.raises(ExerciseFailed):
        check_node_attribution(wrong)
    capsys.readouterr()


def test_the_librarys_attribution_patching_is_refused():
    def uses_library(hm, clean, corrupted, end, io_id, s_id):
        from headlab.analysis.attribution import attribution_patch

        return attribution_patch(hm, clean, corrupted)

    with pytest.raises(ForbiddenCall):
        check_node_attribution(uses_library)
