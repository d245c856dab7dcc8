"""Pruning orders and curves."""

from __future__ import annotations

import pytest
import torch

from headlab.analysis.importance import head_importance
from headlab.analysis.sweep import sweep
from headlab.metrics import Metric
from headlab.analysis.prune import EvalSet, PruningCurve, iterative_order, order_by, pruning_curve, random_order
from tiny_models import make_model, random_batch


def test_order_by_least_important_first():
    score = torch.tensor([[0.5, 0.1], [0.9, 0.1]])
    assert order_by(score) == [(0, 1), (1, 1), (0, 0), (1, 0)]
    assert order_by(score, ascending=False)[0] == (1, 0)
    with pytest.raises(ValueError, match="NaN"):
        order_by(torch.tensor([[float("nan"), 1.0]]))


def test_curve_points_are_real_ablations():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    order = random_order(hm, seed=1)
    curve = pruning_curve(hm, order, {"all": EvalSet(batch)}, counts=[0, 3, 8])
    with torch.no_grad():
        clean = Metric().bound(hm).score(hm(batch), batch)
        with hm.ablate(order[:3]):
            three = Metric().bound(hm).score(hm(batch), batch)
        with hm.ablate(order):
            everything = Metric().bound(hm).score(hm(batch), batch)
    torch.testing.assert_close(curve.values["all"][0], clean)
    torch.testing.assert_close(curve.values["all"][1], three, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(curve.values["all"][2], everything, atol=1e-5, rtol=1e-4)
    deg = curve.degradation("all")
    assert deg[0] == 0
    assert curve.first_failure("all", tolerance=float(deg.max()) + 1) is None
    known = PruningCurve([(0, 0), (0, 1), (1, 0)], [0, 1, 2, 3],
                         {"loss": torch.tensor([[2.0], [2.05], [2.3], [2.2]])})
    assert known.first_failure("loss", tolerance=0.1) == 2  # 2.3 - 2.0 > 0.1 first at 2 heads
    assert known.first_failure("loss", tolerance=0.5) is None
    with pytest.raises(ValueError, match="tolerance"):
        known.first_failure("loss", tolerance=-0.1)


def test_accuracy_sets_degrade_downwards():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=4, seq=6)

    def top1_correct(output, b):  # accuracy of predicting the last token
        return (output[:, -2].argmax(-1) == b["input_ids"][:, -1]).float()

    curve = pruning_curve(hm, hm.heads(), {"acc": EvalSet(batch, metric=top1_correct, higher_is_better=True)},
                          counts=[0, 8])
    m = curve.mean("acc")
    assert curve.degradation("acc")[1] == pytest.approx(float(m[0] - m[1]))


def test_iterative_order_starts_with_the_least_important_head():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=3, seq=6)
    order = iterative_order(hm, batch)
    assert sorted(order) == hm.heads()
    first = head_importance(hm, batch).ranking("mean")[-1]
    assert order[0] == first
    # the second choice is made with the first head already removed
    with hm.ablate([order[0]]):
        rest = [h for h in hm.heads() if h != order[0]]
        res = sweep(hm, batch, groups=[[h] for h in rest])
    assert order[1] == rest[int(res.effects.mean(1).argmin())]
    partial = iterative_order(hm, batch, stop_after=2, by="worst")
    assert len(partial) == 8 and sorted(partial) == hm.heads()


def test_bad_orders():
    hm = make_model("gpt2")
    batch = random_batch(hm, n=2, seq=5)
    with pytest.raises(ValueError, match="twice"):
        pruning_curve(hm, [(0, 0), (0, 0)], {"a": EvalSet(batch)})
    with pytest.raises(ValueError, match="counts"):
        pruning_curve(hm, [(0, 0)], {"a": EvalSet(batch)}, counts=[0, 5])
    with pytest.raises(TypeError, match="EvalSet"):
        pruning_curve(hm, [(0, 0)], {"a": batch})


def test_shared_curve_matches_one_set_at_a_time():
    """One forward per count for all metrics gives the same values as pruning_curve per set."""
    from headlab.analysis.prune import pruning_curve_shared, window_loss

    hm = make_model("gpt2")
    batch = random_batch(hm, n=4, seq=6)

    def top1_correct(output, b):
        return (output[:, -2].argmax(-1) == b["input_ids"][:, -1]).float()

    def only_first_two(output, b):  # scores inputs 0 and 1 only (NaN elsewhere, like an item metric)
        v = output[:, -2, 3] - output[:, -2, 5]
        v = v.clone()
        v[2:] = float("nan")
        return v

    order = random_order(hm, seed=1)
    counts = [0, 3, 8]
    shared = pruning_curve_shared(hm, order, batch, {"loss": (window_loss, False), "acc": (top1_correct, True),
                                                      "part": (only_first_two, True)}, counts=counts, batch_size=3)
    alone = pruning_curve(hm, order, {"loss": EvalSet(batch), "acc": EvalSet(batch, metric=top1_correct,
                                                                             higher_is_better=True)}, counts=counts)
    assert torch.allclose(shared.values["loss"], alone.values["loss"], atol=1e-5)
    assert torch.equal(shared.values["acc"], alone.values["acc"])
    assert shared.values["part"].shape == (3, 2)  # the NaN inputs are dropped
    assert shared.higher_is_better == {"loss": False, "acc": True, "part": True}
    # everything removed really changes the loss (the curve is not the clean model repeated)
    assert not torch.allclose(shared.values["loss"][0], shared.values["loss"][2])
    with pytest.raises(ValueError, match="NaN everywhere"):
        pruning_curve_shared(hm, order, batch, {"x": (lambda o, b: torch.full((4,), float("nan")), True)}, counts=[0])
    with pytest.raises(ValueError, match="twice"):
        pruning_curve_shared(hm, [(0, 0), (0, 0)], batch, {"loss": (window_loss, False)})


def test_first_failure_on_stored_curves():
    from headlab.analysis.prune import first_failure

    counts = [0, 2, 4, 8]
    assert first_failure([0.9, 0.88, 0.80, 0.5], counts, 0.05, higher_is_better=True) == 4  # accuracy falls
    assert first_failure([2.0, 2.01, 2.2, 3.0], counts, 0.05) == 4  # loss rises
    assert first_failure([2.0, 1.9, 1.5, 1.0], counts, 0.05) is None  # a falling loss never fails
    with pytest.raises(ValueError, match="3 curve values for 4 counts"):
        first_failure([1.0, 1.0, 1.0], counts, 0.1)


# ---------------------------------------------------------------- first failures with intervals (analysis.failure)

import numpy as np  # noqa: E402

from deviating.analysis.failure import (WindowTable, failure_bootstrap, failure_gap, first_failure_interval, last_passing,  # noqa: E402
                                      first_failures, never, pool_tables)


def test_first_failures_read_the_tolerance_strictly_and_censor_at_one_past_the_end():
    counts = [0, 2, 4, 6]
    assert first_failures(np.array([1.0, 1.02, 1.06, 1.2]), counts, 0.05, False) == 4
    assert first_failures(np.array([1.0, 1.04, 1.04, 1.04]), counts, 0.05, False) == never(counts) == 7
    assert first_failures(np.array([0.9, 0.9, 0.84, 0.5]), counts, 0.05, True) == 4  # an accuracy drop
    both = first_failures(np.array([[1.0, 1.1, 1.2, 1.3], [1.0, 1.0, 1.0, 1.0]]), counts, 0.05, False)
    assert both.tolist() == [2, 7]
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        first_failures(np.zeros(4), counts, -0.1, False)


def test_window_table_pools_items_over_windows():
    t = WindowTable((0, 2), [[2, 1], [1, 1]], [2, 1], True)  # 3 items: 3 right, then 2 right
    assert np.allclose(t.means(), [1.0, 2 / 3])
    assert np.allclose(t.means(np.array([[1, 1], [0, 0]])), [[1.0, 1.0], [1.0, 0.5]])
    with pytest.raises(ValueError, match="one count per item"):
        WindowTable((0, 2), [[2, 1], [1, 1]], [2], True)
    with pytest.raises(ValueError, match="strictly increasing"):
        WindowTable((2, 0), [[2, 1], [1, 1]], [2, 1], True)


def _identical_windows(n=8):
    """n identical windows: the loss rises 0.02 per two heads; the one tail item flips at 2 heads."""
    counts = (0, 2, 4, 6, 8)
    loss = WindowTable(counts, np.tile([[2.0], [2.02], [2.04], [2.06], [2.08]], n), np.ones(n), False)
    tail = WindowTable(counts, np.tile([[1], [0], [0], [0], [0]], n), np.ones(n), True)
    return {"loss": loss, "tail": tail}


def test_failures_on_identical_windows_keep_the_grids_resolution():
    """Every resample fails at the same counts: no spread from the windows, but a curve read every
    2 heads places each failure between two counts, so no interval has zero width."""
    fb = failure_bootstrap(_identical_windows(), {"loss": 0.05, "tail": 0.05}, n_resamples=200)
    assert fb.point == {"loss": 6, "tail": 2}
    gap = failure_gap(fb, "loss", ["tail"])  # loss fails in (4, 6], the tail in (0, 2]
    assert (gap.value, gap.low, gap.high, gap.n) == (4.0, 2.0, 6.0, 8)
    first = first_failure_interval(fb, "loss")
    assert (first.value, first.low, first.high) == (6.0, 4.0, 6.0)
    assert last_passing(np.array([0, 2, 6, 7]), (0, 2, 4, 6)).tolist() == [0, 0, 4, 6]  # 7: never failed


def test_a_tail_failure_carried_by_one_window_gets_an_interval_that_spans_zero():
    counts = (0, 2, 4)
    n = 10
    loss = WindowTable(counts, np.tile([[2.0], [2.0], [2.1]], n), np.ones(n), False)  # fails at 4
    tail_sums = np.ones((3, n))
    tail_sums[1:, 0] = 0  # only window 0's item flips, at 2 heads: a 10-point drop on all windows
    tail = WindowTable(counts, tail_sums, np.ones(n), True)
    fb = failure_bootstrap({"loss": loss, "tail": tail}, {"loss": 0.05, "tail": 0.05}, n_resamples=2000)
    gap = failure_gap(fb, "loss", ["tail"])
    assert gap.value == 2.0  # on all windows the tail fails first ...
    assert gap.low < 0 < gap.high or gap.low <= 0  # ... but resamples without window 0 never see it fail
    assert failure_bootstrap({"loss": loss, "tail": tail}, {"loss": 0.05, "tail": 0.05},
                             n_resamples=2000).draws["tail"].tolist() == fb.draws["tail"].tolist()  # seeded


def test_failure_bootstrap_refuses_what_it_cannot_compare():
    tables = _identical_windows()
    with pytest.raises(ValueError, match="no tolerance"):
        failure_bootstrap(tables, {"loss": 0.05})
    other = dict(tables, tail=WindowTable((0, 2), np.ones((2, 8)), np.ones(8), True))
    with pytest.raises(ValueError, match="other counts or items"):
        failure_bootstrap(other, {"loss": 0.05, "tail": 0.05})
    fb = failure_bootstrap(tables, {"loss": 0.05, "tail": 0.05}, n_resamples=100)
    with pytest.raises(ValueError, match="unknown measure"):
        failure_gap(fb, "loss", ["rare"])


def test_pooled_tables_weigh_every_item_and_refuse_other_curves():
    a = WindowTable((0, 2), [[2, 0], [1, 0]], [2, 0], True)  # two items, both in window 0
    b = WindowTable((0, 2), [[0, 1], [0, 0]], [0, 1], True)  # one item, in window 1
    p = pool_tables([a, b])
    assert p.weights.tolist() == [2, 1] and np.allclose(p.means(), [1.0, 1 / 3])  # 3 of 3 right, then 1 of 3
    with pytest.raises(ValueError, match="at least one"):
        pool_tables([])
    with pytest.raises(ValueError, match="other counts or items"):
        pool_tables([a, WindowTable((0, 4), [[1, 1], [1, 1]], [1, 1], True)])
    with pytest.raises(ValueError, match="higher_is_better"):
        pool_tables([a, WindowTable((0, 2), [[1, 1], [1, 1]], [1, 1], False)])


def test_a_pooled_tail_is_not_the_earliest_of_its_parts():
    """Three tails, and the smallest flips one item at 2 heads: the earliest of the three fails first
    (a minimum of noisy numbers is early), the pooled tail only when the large ones fail too."""
    counts, n = (0, 2, 4, 6), 10
    loss = WindowTable(counts, np.tile([[2.0], [2.0], [2.06], [2.2]], n), np.ones(n), False)  # fails at 4
    big = np.tile([[5.0], [5.0], [5.0], [3.0]], n)  # 50 items, lose 20 at 6 heads
    small = np.ones((4, n))
    small[1:, 0] = 0  # one of 10 items flips at 2 heads: a 10-point drop
    tails = {"a": WindowTable(counts, big, np.full(n, 5.0), True),
             "b": WindowTable(counts, big, np.full(n, 5.0), True),
             "rare": WindowTable(counts, small, np.ones(n), True)}
    tables = {"loss": loss, **tails, "pooled": pool_tables(tails.values())}
    fb = failure_bootstrap(tables, {k: 0.05 for k in tables}, n_resamples=200)
    assert failure_gap(fb, "loss", ["a", "b", "rare"]).value == 2.0  # the minimum: "the tail fails first"
    assert fb.point["pooled"] == 6 and failure_gap(fb, "loss", ["pooled"]).value == -2.0  # pooled: after the loss
