"""The claim rows of chapters 1 and 2 (C1, C2, C16, C17) follow from planted numbers as the rule says
(seeds as the unit, Holm across conditions, the band table, zero-width intervals refused)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from headlab import stats
from deviating.data.two_relations import TwoRelations
from deviating.experiments.head_count import NO_LOSS_GAP, c16_row, window_losses
from deviating.experiments.head_split import (
    NO_LEAD, c1_row, error_rate, lead, narrow_heads_row, order_blind_ceiling,
)
from deviating.experiments.split_cost import NEAR, attention_work, c2_row, round_ratio
from headlab.metrics import next_token_loss
from headlab.models.gpt import GPT, GPTConfig
from deviating.verdicts import judge


# ------------------------------------------------------------------ planted answers


class Planted:
    """A stand-in for TwoRelations whose 'models' are their own per-answer outcomes."""

    n_letters = 32

    def answers(self, model, data):
        return {"correct": torch.as_tensor(model, dtype=torch.bool)}


class Data:
    """Sequences of 4 answers each: ``query`` marks them, ``tokens`` gives the sequence count."""

    def __init__(self, n_seq: int, per_seq: int = 4):
        self.query = torch.zeros(n_seq, 3 * per_seq, dtype=torch.bool)
        self.query[:, 1::3] = True
        self.tokens = torch.zeros(n_seq, 3 * per_seq, dtype=torch.long)


def noisy(n_answers: int, p_wrong: float, seed: int) -> np.ndarray:
    """Answers that are wrong with probability ``p_wrong``, independently (sequences then differ)."""
    return np.random.default_rng(seed).random(n_answers) >= p_wrong


def outcomes(n_answers: int, wrong_every: int | None, offset: int = 0) -> np.ndarray:
    right = np.ones(n_answers, dtype=bool)
    if wrong_every:
        right[offset::wrong_every] = False
    return right


def test_the_lead_resamples_sequences_and_pairs_the_answers():
    data = Data(200)
    n = int(data.query.sum())
    perfect, flawed = outcomes(n, None), outcomes(n, 5)
    est = lead(Planted(), perfect, flawed, data)
    assert est.n == 200 and math.isclose(est.value, 0.2) and est.low < 0.2 < est.high
    tie = lead(Planted(), perfect, perfect, data)  # an exact tie: its Clopper-Pearson bound, not [0, 0]
    assert tie.value == 0.0 and tie.low == -tie.high and tie.high == pytest.approx(1 - 0.025 ** (1 / 200))
    assert math.isclose(error_rate(Planted(), flawed, data).value, 0.2)


def test_c1_holds_only_where_two_heads_lead_across_the_seeds():
    data = Data(2048)
    n = int(data.query.sum())
    models = {}
    for s in range(3):
        models["two-relations-2h", s] = outcomes(n, None)
        models["two-relations-1h", s] = noisy(n, 0.2 + 0.05 * s, seed=s)  # one head errs, more or less
        models["two-relations-2h-ln", s] = outcomes(n, None)
        models["two-relations-1h-ln", s] = outcomes(n, None)  # with LayerNorm: no lead at all
    row = c1_row(Planted(), models, data, [0, 1, 2])
    verdict = judge(row)
    assert verdict.kind == "holds with conditions" and verdict.held == 1 and verdict.tested == 2
    assert verdict.holds_under == ("no LayerNorm",) and verdict.fails_under == ("LayerNorm",)
    assert row.seeds == (0, 1, 2) and row.no_effect == (-NO_LEAD, NO_LEAD) and row.headline.n == 3
    # a lead on two seeds but none on the third: the seeds do not show it, and not every network has it
    models["two-relations-1h", 2] = outcomes(n, None)
    verdict = judge(c1_row(Planted(), models, data, [0, 1, 2]))
    assert verdict.kind == "inconclusive" and verdict.open_under == ("no LayerNorm",)


def test_narrow_heads_fail_only_where_their_errors_exceed_the_band():
    data = Data(2048)
    n = int(data.query.sum())
    models = {(1, s): noisy(n, 0.5 + 0.02 * s, seed=s) for s in range(3)}  # half wrong
    models |= {(8, s): outcomes(n, None) for s in range(3)}  # solved: 0 errors, an exact bound inside the band
    models |= {(2, 0): outcomes(n, None), (2, 1): noisy(n, 1 / 3, 1), (2, 2): noisy(n, 1 / 3, 2)}  # seeds differ
    verdict = judge(narrow_heads_row(Planted(), models, data, [0, 1, 2]))
    assert verdict.kind == "holds with conditions"
    assert verdict.holds_under == ("d_head 1",) and verdict.fails_under == ("d_head 8",)
    assert verdict.open_under == ("d_head 2",)


def test_exact_estimates_have_no_width_and_refuse_nonsense():
    e = stats.exact(32, 72, "largest rank")
    assert (e.value, e.low, e.high, e.n) == (32.0, 32.0, 32.0, 72) and e.method.startswith("exact")
    with pytest.raises(ValueError, match="finite"):
        stats.exact(float("nan"), 3, "x")
    with pytest.raises(ValueError, match="positive count"):
        stats.exact(1.0, 0, "x")


@pytest.mark.parametrize("n_letters", [4, 6, 10, 32, 52])
def test_the_order_blind_ceiling_by_enumeration_matches_the_count_by_hand(n_letters):
    # mixed case: always right (1/2); the same letter twice (1/n); the rest a coin flip
    by_hand = 0.5 + 1 / n_letters + (0.5 - 1 / n_letters) / 2
    assert math.isclose(order_blind_ceiling(TwoRelations(n_letters=n_letters)), by_hand)


# ------------------------------------------------------------------ cost


def test_attention_work_counts_by_hand():
    assert attention_work(2, 4, 1) == {"projections": 128, "scores": 16, "mixing": 16, "softmax_exps": 4}
    assert attention_work(2, 4, 2)["softmax_exps"] == 8 and attention_work(2, 4, 2)["scores"] == 16
    with pytest.raises(ValueError, match="does not split"):
        attention_work(4, 10, 3)
    with pytest.raises(ValueError, match="positive integer"):
        attention_work(0, 8, 2)


def test_round_ratio_is_a_geometric_mean_with_an_interval():
    est = round_ratio([2.0, 8.0, 2.0, 8.0])
    assert math.isclose(est.value, 4.0) and est.low <= 4.0 <= est.high and est.n == 4
    with pytest.raises(ValueError, match="positive"):
        round_ratio([1.0, -1.0])


def benchmark(times_64: dict[str, list[float]]) -> dict:
    base = {k: [1.0, 1.1, 0.9, 1.0, 1.05] for k in times_64}
    return {"machine": {"device": "cpu", "torch_threads": 1},
            "heads": {"times": {"8": {k: {"times_s": v} for k, v in base.items()},
                                "64": {k: {"times_s": [t * b for t, b in zip(v, base[k])]}
                                       for k, v in times_64.items()}}}}


def test_c2_exact_counts_are_refused_and_the_timings_judged():
    row = c2_row(benchmark({"sdpa": [1.0, 1.1, 0.95, 1.05, 1.0], "torch_ref": [3.8, 4.0, 4.2, 3.9, 4.1]}),
                 n=512, d_model=512, heads=64, base=8)
    assert row.null == NEAR
    # a count is arithmetic, not a measurement: only the times are conditions
    assert all(m.condition.startswith("wall time") for m in row.measurements)
    work = attention_work(512, 512, 64)["softmax_exps"] / attention_work(512, 512, 8)["softmax_exps"]
    assert work == 8.0
    verdict = judge(row)
    assert verdict.kind == "holds with conditions"
    assert verdict.holds_under == ("wall time, fused kernel (SDPA)",)
    assert verdict.fails_under == ("wall time, reference kernel (torch)",)


# ------------------------------------------------------------------ head count


def test_window_losses_are_each_windows_mean_loss():
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=11, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_mlp=16)).eval()
    ids = torch.randint(0, 11, (5, 8))
    got = window_losses(model, ids, batch_size=2)
    with torch.no_grad():
        want = next_token_loss(model(ids), ids, reduction="input").double().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="n_windows"):
        window_losses(model, ids[0])


def test_c16_does_not_hold_when_every_gap_sits_inside_the_band():
    rng = np.random.default_rng(0)
    base = {s: rng.normal(2.77, 0.3, 400) for s in range(3)}
    losses = {(2, s): base[s] for s in range(3)}
    losses |= {(8, s): base[s] + rng.normal(0.0, 0.01, 400) for s in range(3)}  # no real gap
    row = c16_row(losses, d_model=64, seeds=[0, 1, 2], reference=2, narrow=[8], model="toy")
    assert judge(row).kind == "does not hold here" and row.no_effect == (-NO_LOSS_GAP, NO_LOSS_GAP)
    losses |= {(8, s): base[s] + 0.1 + rng.normal(0.0, 0.01, 400) for s in range(3)}  # clearly worse
    assert judge(c16_row(losses, 64, [0, 1, 2], 2, [8], "toy")).kind == "holds"
