"""The ledger's rows on ioi-gpt (deviating.experiments.ioi_rows): judged by the rule, the answer key
refused as a baseline, the statistics on cases with known answers, the measurement at a tiny size
against the chapters' own functions, and the stored rows rebuilt from the stored record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deviating.analysis.ioi_roles import ROLES
from deviating.claim_rows import Refused
from deviating.experiments import ioi_rows as R
from deviating.experiments import ioi_rows_measure as M
from deviating.ledger import markdown_table, model_key
from deviating.verdicts import judge, verdict

N, W, HEADS = 40, 24, 16


def _seed(seed: int, *, interaction: float, writers_rank_like_task: bool, rng) -> dict:
    task = rng.normal(0, 0.2, (HEADS, N)) + np.linspace(3, 0, HEADS)[:, None]  # a clear ranking of the task
    text = rng.normal(0, 0.2, (HEADS, W)) + rng.permutation(np.linspace(3, 0, HEADS))[:, None]  # another one
    end_io = task + rng.normal(0, 0.1, task.shape) if writers_rank_like_task else rng.uniform(0, 1, task.shape)
    roles = {}
    for role in ROLES:
        right = (rng.uniform(size=N) < 0.9).astype(int).tolist()
        base = {"first name": [i % 2 for i in range(N)], "previous token": [0] * N,
                M.LABELLING_RULES[role]: [1] * N}
        found = role in ("name mover", "S-inhibition") or (role, seed) == ("induction", 0)
        roles[role] = {"heads": ["3.0"], "by_definition": found,
                       "head_right": right, "baselines": base}
    counts = list(range(HEADS + 1))
    loss = np.array([[4.0 + (0.3 if k >= 14 else 0.0)] * W for k in counts]) + rng.normal(0, 0.01, (len(counts), W))
    right = np.array([[1 if k < 2 + seed or i % 4 else 0 for i in range(N)] for k in counts])  # fails at 2 + seed
    return {"seed": seed, "D": 10.0, "n_prompts": N, "n_windows": W, "negative_writers": [], "pair": ["3.0", "3.3"],
            "interaction": {k: (interaction + rng.normal(0, 0.05, N)).tolist() for k in ("zero", "mean", "resample")},
            "roles": roles, "task": task.tolist(), "text": text.tolist(), "end_io": end_io.tolist(),
            "order": [], "pruning": {"counts": counts, "text_loss": loss.tolist(), "task_right": right.tolist()}}


def _record(seeds=(0, 1, 2), **kw) -> dict:
    rng = np.random.default_rng(0)
    kw = {"interaction": 0.3, "writers_rank_like_task": False, **kw}
    return {"n_prompts": N, "n_windows": W, "models": {f"m{s}": _seed(s, rng=rng, **kw) for s in seeds}}


@pytest.fixture(scope="module")
def synthetic_rows():
    return {r.claim: r for r in R.rows(_record())}


def test_each_row_is_judged_by_the_rule_on_three_seeds(synthetic_rows):
    assert sorted(synthetic_rows) == ["C10", "C11", "C14", "C18", "C20", "C9"]
    kinds = {c: judge(r).kind for c, r in synthetic_rows.items()}
    # built to support every claim: a large interaction, leads of 0.4, unrelated rankings, the task failing first
    assert set(kinds.values()) == {"holds"}, kinds
    assert all(r.seeds == (0, 1, 2) and model_key(r.model) == "ioi-gpt" for r in synthetic_rows.values())
    c10 = synthetic_rows["C10"].by_condition["text order, mean ablation, tolerance 0.05"]
    assert [m.effect for m in c10] == [12.0, 11.0, 10.0]  # text fails at 14 heads, the task at 2, 3, 4


def test_a_row_that_contradicts_its_claim_does_not_hold_and_two_seeds_are_refused():
    against = {r.claim: r for r in R.rows(_record(interaction=-0.3, writers_rank_like_task=True))}
    assert judge(against["C11"]).kind == "does not hold here"
    assert judge(against["C18"]).kind in ("does not hold here", "inconclusive")
    assert judge(against["C18"]).kind != "holds"
    two = R.c11_row(_record(seeds=(0, 1)))
    assert verdict(two).kind == "cannot be judged" and "at least 3 training seeds" in verdict(two).reason


def test_the_answer_key_is_never_the_c14_baseline(synthetic_rows):
    cells, refused, roles, required = R.c14_cells(_record())
    assert roles == ["name mover", "S-inhibition", "induction"] and required == ["name mover", "S-inhibition"]
    for (role, _), by in cells.items():
        assert M.LABELLING_RULES[role] not in by  # the rule that made the ground truth, refused
    assert "name mover: the name said once" in refused
    row = synthetic_rows["C14"]
    assert row.required == ("name mover role", "S-inhibition role") and row.primary == "name mover role"
    assert "found on no seed, so not tested: negative name mover, backup name mover, duplicate token" in row.note
    assert "refused as answer keys" in row.note
    assert "stands in: induction at seed 1 (3.0); induction at seed 2" in row.note
    lead = row.by_condition["name mover role"][0]
    assert lead.effect == pytest.approx(np.mean(_record()["models"]["m0"]["roles"]["name mover"]["head_right"]) - 0.5)


def test_a_baseline_that_scores_every_prompt_is_refused_even_when_not_named():
    record = _record()
    for m in record["models"].values():
        for entry in m["roles"].values():
            entry["baselines"] = {"nearest earlier name": [1] * N, M.LABELLING_RULES["name mover"]: [1] * N}
    with pytest.raises(Refused, match="every baseline .* is the answer key"):
        R.c14_row(record)


def test_c18_says_when_no_head_writes_against_the_answer(synthetic_rows):
    note = synthetic_rows["C18"].note
    assert "no seed has a head that attends like a name mover and writes against the answer" in note
    record = _record()
    record["models"]["m1"]["negative_writers"] = ["3.2"]
    assert "3.2 (seed 1)" in R.c18_row(record).note


def test_statistics_on_known_cases():
    rng = np.random.default_rng(1)
    task = rng.normal(0, 0.1, (HEADS, 64)) + np.arange(HEADS)[:, None]
    same = R.task_text_gap(task, task[:, :32] + rng.normal(0, 0.1, (HEADS, 32)), n_resamples=200)
    assert abs(same.value) < 0.05  # text ranks the heads as the task does: no gap
    other = R.task_text_gap(task, task[::-1, :32], n_resamples=200)
    assert other.value == pytest.approx(2.0, abs=0.05) and other.low > 1.5  # reversed: reliability 1 minus -1
    text = np.zeros((HEADS, 32)) + np.arange(HEADS)[:, None]  # the text keeps heads 15..12
    missed = R.missed_task_share(text, task[::-1], keep=4, n_resamples=200)
    # outside the text's top 4: 114 of 120 of the task's importance, 66 of 120 of the text's
    assert missed.value == pytest.approx(114 / 120 - 66 / 120, abs=1e-3) and missed.low > 0.35
    with pytest.raises(ValueError, match="keep must be between 1 and 15"):
        R.missed_task_share(text, task, keep=16)
    counts = list(range(5))
    loss = np.array([[4.0], [4.0], [4.0], [4.2], [4.3]]) + np.zeros((5, 30))
    right = np.array([[1], [0], [0], [0], [0]]) + np.zeros((5, 30))
    gap = R.pruning_gap(loss, right, counts, 0.05, n_resamples=200)
    assert (gap.value, gap.low, gap.high) == (2.0, 1.0, 3.0)  # the task at 1, the text at 3; the grid's step
    with pytest.raises(ValueError, match="one row per count"):
        R.pruning_gap(loss[:4], right, counts, 0.05)
    with pytest.raises(ValueError, match="not installed: ioi-gpt-s9"):
        M.run(["ioi-gpt-s9"], circuit={"models": {}})


@pytest.fixture(scope="module")
def tiny():
    import headlab
    from deviating.data.ioi.prompts import corrupt_abc
    from deviating.data.ioi.windows import IoiSplit
    from deviating.experiments.ioi_circuit import load_results

    torch.manual_seed(0)
    hm = headlab.load("ioi-gpt", device="cpu")
    prompts = M.task_prompts(hm, 8)
    abc = corrupt_abc(hm.tokenizer, prompts, IoiSplit.from_provenance(hm.provenance).heldout_names, M.TASK_SEED + 1)
    windows = torch.randint(1, 500, (6, 12))  # token ids of the first 500, not Brown: no corpus needed
    circuit = load_results()["models"]["ioi-gpt"]
    return hm, prompts, windows, circuit, M.measure_seed(hm, circuit, prompts, abc, windows)


def test_measure_seed_at_a_tiny_size_agrees_with_the_chapters_functions(tiny):
    from deviating.experiments.ioi_tail import prune_by_text, text_importance, text_order

    hm, prompts, windows, circuit, got = tiny
    movers = circuit["roles"]["name mover"]
    assert got["pair"] == (movers[:2] if len(movers) >= 2 else []) and got["seed"] == 0  # a pair needs two
    assert np.asarray(got["task"]).shape == (16, 8) and np.asarray(got["text"]).shape == (16, 6)
    order = text_order(text_importance(hm, windows))
    assert got["order"] == [f"{l}.{h}" for l, h in order]
    want = prune_by_text(hm, prompts, windows, order, [0, 5, 16])
    for w in want:
        k = w["removed"]
        assert np.mean(got["pruning"]["task_right"][k]) == pytest.approx(w["task_accuracy"], abs=1e-5)
        assert np.mean(got["pruning"]["text_loss"][k]) == pytest.approx(w["text_loss"], abs=1e-4)
    q, right, base = M.role_positions(prompts, "name mover")
    assert torch.equal(q, prompts.pos["END"]) and right[torch.arange(8), prompts.pos["IO"]].all()
    assert right.sum() == 8 and torch.equal(base["nearest earlier name"], prompts.pos["S2"])
    assert got["roles"]["previous token"]["baselines"]["previous token"] == [1] * 8  # the answer key, by construction


def test_the_stored_rows_are_rebuilt_from_the_stored_record():
    record = M.load()
    stored = json.loads(R.CLAIMS_FILE.read_text(encoding="utf-8"))
    assert stored["chapter"] == R.CHAPTER
    assert markdown_table(R.rows(record)) == markdown_table(stored["rows"])
    assert set(record["models"]) == set(M.installed())  # every installed seed, none hard-coded
