"""The experiments behind the stored results of chapters 7 and 8 (deviating.experiments), at a tiny size:
each runs, is deterministic, and writes the keys and value types of the shipped file it regenerates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from deviating.training.recipes import RECIPES

RESULTS = Path(__file__).resolve().parent.parent / "lib" / "deviating" / "results"
# written by every run, different every time
TIMINGS = {"seconds", "train_seconds", "cpu_seconds", "wall_seconds", "total_wall_seconds", "total_cpu_seconds",
           "written_utc", "computed_at", "iterative_seconds", "importance_seconds", "curve_seconds"}


def schema(x):
    """The shape of a JSON value: dict keys, the first item of each list, the kind of each leaf."""
    if isinstance(x, dict):
        return {k: schema(v) for k, v in x.items()}
    if isinstance(x, list):
        return [schema(x[0])] if x else []
    if x is None:
        return None  # null is where a number may be (a loss before the first step): matches anything
    return "bool" if isinstance(x, bool) else "number" if isinstance(x, (int, float)) else type(x).__name__


def differences(got, shipped, path: str = "") -> list[str]:
    """Where the schemas ``got`` and ``shipped`` differ (``None`` matches any leaf; empty lists match any list)."""
    if got is None or shipped is None:
        return []
    if isinstance(got, dict) and isinstance(shipped, dict):
        out = [f"{path}/{k}: missing" for k in shipped if k not in got]
        out += [f"{path}/{k}: not in the shipped file" for k in got if k not in shipped]
        return out + [d for k in got if k in shipped for d in differences(got[k], shipped[k], f"{path}/{k}")]
    if isinstance(got, list) and isinstance(shipped, list):
        return differences(got[0], shipped[0], path + "[0]") if got and shipped else []
    return [] if got == shipped else [f"{path}: {got} vs {shipped}"]


def without_timings(x):
    if isinstance(x, dict):
        return {k: without_timings(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [without_timings(v) for v in x]
    return x


def test_schema_comparison_catches_a_missing_key_and_a_changed_type():
    shipped = schema({"a": 1, "b": [{"c": "x", "d": None}], "e": {"f": True}})
    assert differences(schema({"a": 2.5, "b": [{"c": "y", "d": 3}], "e": {"f": False}}), shipped) == []
    assert sorted(differences(schema({"a": "1", "b": [{"c": "y"}], "e": {"f": False, "g": 1}}), shipped)) == [
        "/a: str vs number", "/b[0]/d: missing", "/e/g: not in the shipped file"]


# ---------------------------------------------------------------------------- chapter 7: what breaks


TINY = dict(models=("organism",), eval_windows=6, prune_eval_windows=6, counts=(0, 2, 4), selection_windows=4,
            iterative_windows=2, iterative_steps=2, specialist_windows=4, adversarial_windows=16,
            adversarial_targets=8, random_trigger_draws=2, minilm_counts=(0, 2), minilm_sentences=60)


AGAIN = ("pruning", "averaging", "adversarial")  # run twice: the determinism check


@pytest.fixture(scope="module")
def what_breaks(tmp_path_factory):
    """Every part at a tiny size (big enough that the trigger search succeeds at least once, so that
    every key of the shipped file is written), and the parts that draw random numbers on the organism
    once more (MiniLM's part draws only its seeded random orders, and costs as much as the others)."""
    from deviating.experiments.what_breaks import WhatBreaksSizes, run_what_breaks

    sizes = WhatBreaksSizes(**TINY)
    out = tmp_path_factory.mktemp("what_breaks") / "what_breaks.json"
    first = run_what_breaks(out=out, sizes=sizes, command="tiny", progress=False)
    second = run_what_breaks(AGAIN, out=None, sizes=sizes, command="tiny", progress=False)
    return sizes, out, first, second


@pytest.mark.slow
def test_what_breaks_writes_the_shipped_schema(what_breaks):
    sizes, out, first, _ = what_breaks
    written = json.loads(out.read_text())
    assert written == json.loads(json.dumps(first))
    shipped = json.loads((RESULTS / "what_breaks.json").read_text())
    for part in ("pruning", "averaging", "adversarial"):  # one record per organism seed: compare one of them
        assert list(shipped[part]["models"]) == ["organism", "organism-s1", "organism-s2"]
        shipped[part]["models"] = {"organism": shipped[part]["models"]["organism"]}
    assert differences(schema(written), schema(shipped)) == []
    pruning = written["pruning"]
    assert pruning["settings"]["counts"] == [0, 2, 4] and list(pruning["models"]) == ["organism"]
    record = pruning["models"]["organism"]
    assert len(record["curves"]["mean (iterative)"]["order"]) == 32  # every head, the first 2 iteratively
    assert record["curves"]["mean (one-shot), resample ablation"]["ablation"] == "resample"
    for curve in record["curves"].values():  # per window: 3 counts x 6 windows, item counts whole numbers
        assert all(len(v) == 3 and all(len(r) == 6 for r in v) for v in curve["sums"].values())
        assert all(float(x).is_integer() for x in curve["sums"]["pronoun, distractor"][0])
    assert record["item_counts"]["pronoun, distractor"] == sum(record["items_per_window"]["pronoun, distractor"])
    assert written["averaging"]["models"]["organism"]["specialist_windows"] == 4
    adv = written["adversarial"]["models"]["organism"]["agreement"]
    assert adv["n_attacked"] <= 8 and len(adv["inspectors"]["before, per_head"]["search"]) == adv["n_attacked"]
    assert written["minilm"]["n_sentences"] == 60 and written["minilm"]["counts"] == [0, 2]


@pytest.mark.slow
def test_what_breaks_is_deterministic(what_breaks):
    _, _, first, second = what_breaks
    assert set(second) >= set(AGAIN)
    assert without_timings({p: first[p] for p in AGAIN}) == without_timings({p: second[p] for p in AGAIN})


@pytest.mark.slow
def test_the_claim_rows_are_built_from_the_run_and_judged_by_the_rule(what_breaks):
    from deviating.experiments import what_breaks_rows as rows
    from deviating.verdicts import KINDS, verdict  # verdict: a refused row reads "cannot be judged"

    _, _, first, _ = what_breaks
    c10 = rows.c10_organism_row(first["pruning"], n_resamples=200)
    pair = "agreement, attractor vs all agreement"  # like for like: hard cases against the whole task
    assert c10.primary == f"{pair}, mean order, zero ablation, tolerance 0.05" and c10.seeds == (0,)
    assert {m.condition for m in c10.measurements} >= {f"{pair}, worst-case order, zero ablation, tolerance 0.05",
                                                       f"{pair}, mean order, resample ablation, tolerance 0.05"}
    c12 = rows.c12_averaging_row(first["averaging"])  # the primary endpoint is named before the data
    layers = [m.effect for m in c12.measurements if m.condition.endswith("mean pattern: loss")]
    assert c12.headline.condition.startswith("mean pattern: loss, mean over the layers")
    assert c12.headline.effect == pytest.approx(sum(layers) / len(layers)) and len(layers) == 4
    for row in (c10, c12, rows.c13_row(first["adversarial"]),
                rows.c19_minilm_row(first["minilm"], n_resamples=200)):
        assert verdict(row).kind in KINDS


def test_runs_split_over_processes_merge_into_one_file(tmp_path):
    from deviating.experiments.what_breaks import merge_results

    settings = {"counts": [0, 2], "models": ["organism"]}
    a = {"command": "a", "pruning": {"settings": settings, "models": {"organism": {"x": 1}}, "seconds": 1.0}}
    b = {"command": "b", "pruning": {"settings": {**settings, "models": ["organism-s1"]},
                                     "models": {"organism-s1": {"x": 2}}, "seconds": 2.0}, "minilm": {"y": 3}}
    for name, data in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    merged = merge_results([tmp_path / "a.json", tmp_path / "b.json"], out=tmp_path / "m.json")
    assert merged["pruning"]["models"] == {"organism": {"x": 1}, "organism-s1": {"x": 2}}
    assert merged["pruning"]["settings"]["models"] == ["organism", "organism-s1"]
    assert merged["pruning"]["seconds"] == 3.0 and merged["minilm"] == {"y": 3} and merged["command"] == "a ; b"
    assert json.loads((tmp_path / "m.json").read_text()) == merged
    b["pruning"]["settings"]["counts"] = [0, 4]
    (tmp_path / "b.json").write_text(json.dumps(b))
    with pytest.raises(ValueError, match="other settings"):
        merge_results([tmp_path / "a.json", tmp_path / "b.json"], out=None)


def test_results_files_keep_lists_of_numbers_on_one_line():
    from deviating.experiments.records import dumps

    x = {"a": [1, 2.5, None], "b": {"c": [[1, 2], [3]], "d": {}}, "e": []}
    text = dumps(x)
    assert json.loads(text) == x
    assert '"a": [1, 2.5, null]' in text and "[1, 2]" in text and len(text.splitlines()) == 11


def test_what_breaks_rejects_an_unknown_part_or_model():
    from deviating.experiments.what_breaks import WhatBreaksSizes, run_what_breaks

    with pytest.raises(ValueError, match=r"unknown part\(s\) \['pruned'\]"):
        run_what_breaks(["pruned"], out=None)
    with pytest.raises(ValueError, match=r"unknown model\(s\) \['organism-s9'\]"):
        run_what_breaks(["pruning"], out=None, sizes=WhatBreaksSizes(models=("organism-s9",)))


def test_window_difference_pools_items_over_windows():
    from deviating.experiments.what_breaks_rows import window_difference

    est = window_difference([2, 0, 1], [1, 0, 1], [2, 2, 1])  # 5 items: 3 right vs 2 right
    assert est.value == pytest.approx(0.2) and est.n == 3
    with pytest.raises(ValueError, match="paired per window"):
        window_difference([1, 2], [1], [1, 1])


def test_the_students_row_compares_targets_over_seeds():
    from deviating.experiments.what_breaks_rows import c12_students_row

    def run(target, seed, loss, acc):
        return {"target": target, "seed": seed,
                "metrics": {"val_loss": loss, "pronoun_by": {"distractor": {"True": {"acc": acc}}}}}

    d = {"teacher": "t", "runs": [run("mean", s, 2.8 + 0.01 * s, 0.6) for s in range(3)]
         + [run("per_head", s, 2.7, 0.7 + 0.01 * s) for s in range(3)]}
    row = c12_students_row(d)
    loss, acc = row.measurements
    assert loss.effect == pytest.approx(0.11) and loss.n == 3 and loss.low > 0
    assert acc.effect == pytest.approx(0.11)
    with pytest.raises(ValueError, match="three seeds or more"):
        c12_students_row({"teacher": "t", "runs": d["runs"][:1]})


# ---------------------------------------------------------------------------- chapter 7: students


@pytest.fixture(scope="module")
def tiny_student():
    """The distillation student's recipe with 32 evaluation windows (enough for every kind of item to occur)."""
    return dataclasses.replace(RECIPES["distill-student"], eval_size=32)


def _students(out: Path, recipe, checkpoints=None) -> dict:
    from deviating.experiments.students import distill_students

    return distill_students(["none", "per_head"], [0], steps=2, out=out, checkpoints=checkpoints, command="tiny",
                            recipe=recipe, specialist_windows=4, progress=False)


@pytest.mark.slow
def test_students_write_the_shipped_schema_deterministically(tmp_path, tiny_student):
    from headlab.models.checkpoints import load_checkpoint

    first = _students(tmp_path / "a.json", tiny_student, checkpoints=tmp_path)
    second = _students(tmp_path / "b.json", tiny_student)
    runs = [without_timings({k: v for k, v in r.items() if k != "checkpoint"}) for r in first["runs"]]
    assert runs == [without_timings(r) for r in json.loads((tmp_path / "b.json").read_text())["runs"]]
    assert without_timings(first["teacher_metrics"]) == without_timings(second["teacher_metrics"])
    assert [(r["target"], r["seed"], r["weight"]) for r in first["runs"]] == [("none", 0, 0.0), ("per_head", 0, 1.0)]
    shipped = json.loads((RESULTS / "distillation.json").read_text())
    written = json.loads((tmp_path / "a.json").read_text())
    for run in written["runs"]:
        run.pop("checkpoint")
        for row in run["curve"]:  # the one loop's curve also names the best heads, as the organisms' curves do
            assert len(row.pop("induction_best_head")) == len(row.pop("previous_token_best_head")) == 2
    assert differences(schema(written), schema(shipped)) == []
    model, _, prov = load_checkpoint(tmp_path / "distill-per_head-s0")
    assert prov["target"] == "per_head" and model.config.d_model == tiny_student.config.d_model


def test_students_resume_and_refuse_unknown_targets(tmp_path, tiny_student, capsys):
    from deviating.experiments.students import distill_students

    out = tmp_path / "d.json"
    _students(out, tiny_student)
    again = distill_students(["none"], [0], steps=2, out=out, checkpoints=None, recipe=tiny_student,
                             specialist_windows=4, progress=True)
    assert "skip none seed 0" in capsys.readouterr().out and len(again["runs"]) == 2
    with pytest.raises(ValueError, match="unknown targets"):
        distill_students(["average"], [0], out=out, recipe=tiny_student)


# ---------------------------------------------------------------------------- chapter 8: width and depth


def test_width_depth_sweep_writes_the_shipped_schema_deterministically_and_resumes(tmp_path):
    from deviating.experiments.width_depth import run_sweep
    from deviating.training.recipes.width_depth import WIDTH_DEPTH

    tiny = {n: dataclasses.replace(WIDTH_DEPTH[n], eval_size=8) for n in ("wd-2l-1h", "wd-1l-4h-flops")}
    a = run_sweep(None, [0], steps=2, out=tmp_path / "a.json", progress=False, command="tiny", recipes=tiny)
    b = run_sweep(None, [0], steps=2, out=tmp_path / "b.json", progress=False, command="tiny", recipes=tiny)
    assert without_timings(a["runs"]) == without_timings(b["runs"])
    assert [(r["name"], r["steps"], [c["step"] for c in r["curve"]]) for r in a["runs"]] == [
        ("wd-2l-1h", 2, [0, 2]), ("wd-1l-4h-flops", 2, [0, 2])]
    shipped = json.loads((RESULTS / "width_depth.json").read_text())  # merged by hand: sources and a note
    written = json.loads((tmp_path / "a.json").read_text())
    assert differences(schema(written), schema({k: v for k, v in shipped.items() if k not in ("sources", "resumed_by", "note")})) == []
    resumed = run_sweep(None, [0, 1], steps=2, out=tmp_path / "a.json", resume=True, progress=False, command="more",
                        recipes={"wd-2l-1h": tiny["wd-2l-1h"]})
    assert [(r["name"], r["seed"]) for r in resumed["runs"]] == [("wd-2l-1h", 0), ("wd-1l-4h-flops", 0), ("wd-2l-1h", 1)]
    assert resumed["resumed_by"] == ["more"] and resumed["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="unknown recipe"):
        run_sweep(["wd-9l-1h"], [0], out=tmp_path / "c.json", recipes=tiny)


# ---------------------------------------------------------------------------- chapter 8: sparse autoencoders


def test_saes_write_the_shipped_schema_deterministically(tmp_path):
    from deviating.experiments.saes import train_saes

    kwargs = dict(model="organism", windows=4, eval_windows=2, features=16, k=2, l1=0.01, seeds=[0],
                  head_features=4, head_steps=5, steps=10, batch_size=64, command="tiny", progress=False)
    first = train_saes(2, out=tmp_path / "a", **kwargs)
    second = train_saes(2, out=tmp_path / "b", **kwargs)
    assert [r["sha256"] for r in first] == [r["sha256"] for r in second]
    names = sorted(p.stem for p in (tmp_path / "a").glob("*.json"))
    assert names == sorted(["organism-L2-topk-s0", "organism-L2-l1-s0", *[f"organism-L2-head{h}-topk-s0" for h in range(8)]])
    for name in ("organism-L2-topk-s0", "organism-L2-l1-s0", "organism-L2-head3-topk-s0"):
        written = json.loads((tmp_path / "a" / f"{name}.json").read_text())
        shipped = json.loads((RESULTS / "saes" / f"{name}.json").read_text())
        assert differences(schema(written), schema(shipped)) == [], name
        assert written["training"]["steps"] == (5 if "head" in name else 10)
    from deviating.analysis.sae.model import load_sae  # the weights load back, their sha256 checked

    sae, record = load_sae(tmp_path / "a" / "organism-L2-topk-s0")
    assert record["config"]["n_features"] == sae.n_features == 16
