"""The ledger's rows on ``ioi-gpt`` (issue 36, item 4): C9, C10, C11, C14, C18 and C20 on every
installed training seed of the indirect-object model, each judged by :mod:`deviating.verdicts`.

:mod:`deviating.experiments.ioi_rows_measure` measures each seed once on held-out names in
training templates (the prompts of :func:`deviating.experiments.ioi_tail.task_prompts`, a different
draw from the prompts on which chapter 5b's roles were found) and on held-out Brown windows, and
stores the per-item numbers in ``results/ioi_rows.json``. The rows are built from that record
(:func:`rows`), cheaply, so the ledger chapter shows them without a model. The roles come from the
stored circuit
(``results/ioi_circuit.json``, :mod:`deviating.experiments.ioi_circuit`), found by the book's one
definition of each role (:mod:`deviating.analysis.ioi_roles`)::

    python -m deviating.experiments.ioi_rows        # writes results/ioi_rows.json and claims/ch10.json
    python -m deviating.experiments.ioi_rows --rows-only   # the claims file again, from the stored record

The first takes about 85 CPU-seconds for three seeds on one thread (preparing the Brown windows
included); the second about 1 CPU-second.

**Headlines, written before any row's number was computed** (:data:`HEADLINES`; the per-item
numbers of two seeds' stored circuit and tail results had been read while the data were learnt):

* C11: removing the two name movers together costs more logit difference than the two single
  removals (the interaction, in units of the seed's mean logit difference ``D``, is above +0.01 across
  seeds, mean ablation the primary endpoint). Refuted if it is inside the band or negative.
* C14: each role the definition finds on every seed is played, on other prompts, by that seed's
  own head, whose attention picks the role's ground-truth token more often than the strongest
  baseline that did not make the labels. Refuted if a required role's lead is inside the band.
* C18: the answer-writer's pattern (attention from END to the indirect object) ranks the heads
  worse than the task's ablation ranks itself on other prompts. The case the brief names, a head
  that attends like a name mover but writes against the answer (a negative name mover), is looked
  for first; where no seed has one, the row says so and tests the general claim.
* C20: importance on Brown text ranks the task's heads worse than the task's own split-half
  reliability. Refuted if the gap is inside ±0.05 or negative.
* C9: the top quarter of heads by text importance carry less of the task's importance than of
  the text's: the share outside them is larger for the task (above +0.01).
* C10: pruning in the order of text importance fails the task (accuracy down by the tolerance)
  before the text (loss up by the tolerance): the count gap is above 0.5 head.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from scipy.stats import rankdata

from headlab import stats
from headlab.stats.results import Estimate
from deviating.analysis.failure import first_failures, last_passing
from deviating.analysis.importance_stats import rank_gap
from deviating.analysis.ioi_circuit import ABLATIONS
from deviating.analysis.ioi_roles import ROLES
from deviating.claim_rows import ClaimRow, Measurement, Refused
from deviating.experiments.ioi_rows_measure import COMMAND, LABELLING_RULES, OUT, load, run
from deviating.experiments.records import dumps
from deviating.experiments.syntactic_rows import answer_keys
from deviating.experiments.what_breaks_rows import PRIMARY, TOLERANCES

__all__ = ["CHAPTER", "CLAIMS_FILE", "HEADLINES", "KEEP", "task_text_gap", "missed_task_share", "pruning_gap",
           "c14_cells", "c9_row", "c10_row", "c11_row", "c14_row", "c18_row", "c20_row", "rows", "main"]

CHAPTER = "ch10"  # the ledger chapter shows these rows (chapter 5b, which found the roles, records none)
CLAIMS_FILE = Path(__file__).resolve().parents[1] / "results" / "claims" / f"{CHAPTER}.json"
KEEP = 4  # C9: the top quarter of the 16 heads, as chapter 6 keeps the top quarter of the organism's 32
HEADLINES = {
    "C11": "supports: the name-mover pair's interaction > +0.01 D across seeds (mean ablation); refutes: inside "
           "the band or negative",
    "C14": "supports: every role found on every seed leads the strongest admissible baseline by > 0.01 accuracy "
           "across seeds; refutes: a required role's lead inside the band or negative",
    "C18": "supports: END->IO attention ranks heads worse than ablation's split-half reliability by > 0.05 rank "
           "correlation; refutes: inside the band or negative",
    "C20": "supports: text importance ranks the task's heads worse than the task's split-half reliability by > 0.05; "
           "refutes: inside the band or negative",
    "C9": "supports: the share of task importance outside the text's top quarter exceeds the text's own by > 0.01; "
          "refutes: inside the band or negative",
    "C10": "supports: pruning by text importance fails the task more than half a head before the text; refutes: "
           "inside the band or the text first",
}
_NOTE = "roles from results/ioi_circuit.json (the book's one definition), measured on another draw of prompts"


# ---------------------------------------------------------------------------------------- statistics


def _corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x - x.mean(0), y - y.mean(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(0) / np.sqrt((x * x).sum(0) * (y * y).sum(0))


def _interval(draws: np.ndarray, value: float, n: int, level: float, method: str) -> Estimate:
    draws = draws[np.isfinite(draws)]
    if draws.size < 100:
        raise ValueError("most resamples left the statistic undefined: too few items, or constant effects")
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return Estimate(float(value), float(lo), float(hi), n, level, method)


def task_text_gap(task, text, *, seed: int = 0, n_resamples: int = 1000, level: float = 0.95) -> Estimate:
    """``spearman(task_A, task_B) - spearman(text, task_B)`` over heads: how much worse the text's
    ranking (``text``, ``(heads, windows)``) predicts the task's on half B of the prompts (``task``,
    ``(heads, prompts)``) than the task's own ranking on half A does (its split-half reliability).
    Percentile bootstrap: prompts within each half and windows resampled together."""
    task, text = np.asarray(task, float), np.asarray(text, float)
    if task.ndim != 2 or text.ndim != 2 or task.shape[0] != text.shape[0] or min(task.shape[1], text.shape[1]) < 4:
        raise ValueError(f"task (heads, prompts) and text (heads, windows) need the same heads and >= 4 items; "
                         f"got {task.shape} and {text.shape}")
    split = stats.split_items(task.shape[1], seed=seed)
    a, b, w = np.asarray(split.select), np.asarray(split.measure), np.arange(text.shape[1])

    def gap(ia, ib, iw):  # (draws, items) index arrays
        ra, rb = rankdata(task[:, ia].mean(-1), axis=0), rankdata(task[:, ib].mean(-1), axis=0)
        return _corr(ra, rb) - _corr(rankdata(text[:, iw].mean(-1), axis=0), rb)

    rng = np.random.default_rng(seed)
    draws = gap(rng.choice(a, (n_resamples, a.size)), rng.choice(b, (n_resamples, b.size)),
                rng.choice(w, (n_resamples, w.size)))
    return _interval(draws, float(gap(a[None], b[None], w[None])[0]), task.shape[1], level,
                     "percentile bootstrap, prompts within halves and windows (split-half reliability minus text)")


def missed_task_share(text, task, *, keep: int = KEEP, seed: int = 0, n_resamples: int = 1000,
                      level: float = 0.95) -> Estimate:
    """The top ``keep`` heads by text importance, chosen on one half of the windows: the share of the
    task's positive importance outside them minus the share of the text's (on the other half).
    Positive: the text's ranking leaves more of the task's work outside than of its own."""
    text, task = np.asarray(text, float), np.asarray(task, float)
    if text.shape[0] != task.shape[0] or not 1 <= keep < text.shape[0]:
        raise ValueError(f"keep must be between 1 and {text.shape[0] - 1} with the same heads; got keep={keep}, "
                         f"text {text.shape}, task {task.shape}")
    split = stats.split_items(text.shape[1], seed=seed)
    a, b, p = np.asarray(split.select), np.asarray(split.measure), np.arange(task.shape[1])

    def share(ia, ib, ip):
        out = np.ones(text.shape[0], bool)
        out[np.argsort(-text[:, ia].mean(1), kind="stable")[:keep]] = False
        got = []
        for e in (task[:, ip].mean(1), text[:, ib].mean(1)):
            m = np.clip(e, 0, None)
            got.append(m[out].sum() / m.sum() if m.sum() > 0 else np.nan)
        return got[0] - got[1]

    rng = np.random.default_rng(seed)
    draws = np.array([share(rng.choice(a, a.size), rng.choice(b, b.size), rng.choice(p, p.size))
                      for _ in range(n_resamples)])
    return _interval(draws, share(a, b, p), task.shape[1], level,
                     f"percentile bootstrap, top {keep} chosen on half the windows")


def pruning_gap(text_loss, task_right, counts, tolerance: float, *, n_resamples: int = 2000, seed: int = 0,
                level: float = 0.95) -> Estimate:
    """Heads removed by which the text's loss first rises by more than ``tolerance`` (nats) after the
    task's accuracy first falls by more than ``tolerance`` (points): positive when the task fails
    first. ``text_loss`` ``(counts, windows)``, ``task_right`` ``(counts, prompts)``; windows and
    prompts resampled; the interval at the counts' resolution, as
    :func:`deviating.analysis.failure.failure_gap`."""
    loss, right = np.asarray(text_loss, float), np.asarray(task_right, float)
    if loss.ndim != 2 or right.ndim != 2 or not loss.shape[0] == right.shape[0] == len(counts):
        raise ValueError(f"text_loss {loss.shape} and task_right {right.shape} need one row per count "
                         f"({len(counts)} counts)")
    fail = lambda m, better: first_failures(m, counts, tolerance, better)  # noqa: E731
    value = int(fail(loss.mean(1), False)) - int(fail(right.mean(1), True))
    rng = np.random.default_rng(seed)
    ft = fail(loss[:, rng.integers(0, loss.shape[1], (n_resamples, loss.shape[1]))].mean(-1).T, False)
    fk = fail(right[:, rng.integers(0, right.shape[1], (n_resamples, right.shape[1]))].mean(-1).T, True)
    q = lambda x, at: float(np.quantile(x, at, method="inverted_cdf"))  # noqa: E731
    low, high = q(last_passing(ft, counts) - fk, (1 - level) / 2), q(ft - last_passing(fk, counts), (1 + level) / 2)
    return Estimate(float(value), low, high, right.shape[1], level, "percentile bootstrap over windows and prompts")


# ---------------------------------------------------------------------------------------- rows


def _models(record: dict) -> list[tuple[str, dict]]:
    return list(record["models"].items())


def _what(record: dict) -> str:
    seeds = [m["seed"] for _, m in _models(record)]
    return (f"ioi-gpt, {len(seeds)} training seeds ({', '.join(map(str, seeds))}), {record['n_prompts']} held-out "
            f"prompts")


def c11_row(record: dict, *, n_resamples: int = 2000) -> ClaimRow:
    """C11: per seed and ablation, the mean over prompts of ``effect(a+b) - effect(a) - effect(b)`` for
    the seed's two name movers (units of ``D``; null 0, additive; the claim predicts > 0). Primary:
    mean ablation over the ABC twins (the circuit's backup test). A seed with fewer than two name
    movers has no pair: it is not measured, and the rule then refuses a row on too few seeds."""
    ms, pairs = [], []
    for name, m in _models(record):
        if not m["pair"]:
            continue
        pairs.append(f"{' and '.join(m['pair'])} (seed {m['seed']})")
        for kind in ABLATIONS:
            est = stats.bootstrap_mean(m["interaction"][kind], n_resamples=n_resamples, seed=0)
            ms.append(Measurement.from_estimate(est, f"name-mover pair, {kind} ablation", m["seed"]))
    if not ms:
        raise Refused("C11 on ioi-gpt: no seed has two name movers, so there is no pair to remove")
    return ClaimRow("C11", _what(record), "pair interaction of the name movers (share of D)", 0.0,
                    "additive effects (the pair costs the two singles)", "greater", tuple(ms), unit="share",
                    primary="name-mover pair, mean ablation",
                    note=f"pairs: {'; '.join(pairs)}; {_NOTE}")


def c14_cells(record: dict) -> tuple[dict, dict[str, str], list[str], list[str]]:
    """``(cells, refused, roles, required)`` for C14: per ``(role, seed)``, each baseline's accuracy
    and the role heads' lead over it (0/1 per prompt, paired); the baselines refused as answer keys
    (per role); the roles the definition found on some seed; those found on every seed."""
    found = {r: [m["roles"][r]["by_definition"] for _, m in _models(record)] for r in ROLES}
    roles = [r for r in ROLES if any(found[r])]
    cells, refused = {}, {}
    for role in roles:
        mine = {}
        for _, m in _models(record):
            entry = m["roles"][role]
            n = len(entry["head_right"])
            mine[role, m["seed"]] = {k: (stats.proportion(int(sum(v)), n),
                                         stats.paired_difference(entry["head_right"], v, n_resamples=2000, seed=0))
                                     for k, v in entry["baselines"].items()}
        keys = answer_keys(mine, (LABELLING_RULES[role],))
        refused.update({f"{role}: {k}": why for k, why in keys.items()})
        cells.update({c: {k: v for k, v in by.items() if k not in keys} for c, by in mine.items()})
    return cells, refused, roles, [r for r in roles if all(found[r])]


def c14_row(record: dict) -> ClaimRow:
    """C14: per role and seed, the lead of the seed's own role heads (their attention summed; the
    first token excluded) in picking the role's ground-truth token, over the strongest baseline
    that is not the answer key. Required: the roles found on every seed; the first is primary. A
    role the definition finds on some seeds only is judged, not required; on a seed without it, the
    head with the most of the role's attention stands in (the note names it)."""
    cells, refused, roles, required = c14_cells(record)
    ms = []
    for (role, seed), by in cells.items():
        if not by:
            raise Refused(f"C14 on ioi-gpt: every baseline of {role!r} at seed {seed} is the answer key")
        _, lead = max(by.values(), key=lambda v: v[0].value)
        ms.append(Measurement.from_estimate(lead, f"{role} role", seed))
    stand_in = [f"{r} at seed {m['seed']} ({', '.join(m['roles'][r]['heads'])})" for r in roles
                for _, m in _models(record) if not m["roles"][r]["by_definition"]]
    note = [f"refused as answer keys (the rule that made the ground truth, or right on every prompt): "
            f"{', '.join(sorted(refused))}"]
    absent = [r for r in ROLES if r not in roles]
    if absent:
        note.append(f"found on no seed, so not tested: {', '.join(absent)}")
    if stand_in:
        note.append(f"no head meets the definition, so the head with the most of the role's attention stands in: "
                    f"{'; '.join(stand_in)}")
    return ClaimRow("C14", _what(record), "lead of each seed's own role heads over the strongest baseline", 0.0,
                    "strongest baseline", "greater", tuple(ms), required=tuple(f"{r} role" for r in required),
                    primary=f"{required[0] if required else roles[0]} role", unit="accuracy",
                    note="; ".join(note + [_NOTE]))


def c18_row(record: dict, *, n_resamples: int = 1000) -> ClaimRow:
    """C18: per seed, :func:`~deviating.analysis.importance_stats.rank_gap` of the answer-writer's
    pattern (attention END -> IO) against the task's ablation effects (mean ablation). The note
    says whether any seed has a head that attends like a name mover and writes against the answer."""
    ms = [Measurement.from_estimate(rank_gap(m["task"], m["end_io"], seed=0, n_resamples=n_resamples),
                                    "END->IO attention vs task ablation, mean", m["seed"]) for _, m in _models(record)]
    against = [f"{h} (seed {m['seed']})" for _, m in _models(record) for h in m["negative_writers"]]
    case = (f"heads that attend like a name mover and write against the answer: {', '.join(against)}" if against
            else "no seed has a head that attends like a name mover and writes against the answer (no negative "
                 "name mover by the definition), so that case cannot be tested; the row tests the general claim")
    return ClaimRow("C18", _what(record), "rank gap of the answer-writer's pattern", 0.0,
                    "split-half reliability of the ablation ranking", "greater", tuple(ms), unit="rank",
                    note=f"{case}; {_NOTE}")


def c20_row(record: dict, *, n_resamples: int = 1000) -> ClaimRow:
    """C20: per seed, :func:`task_text_gap` (mean ablation; null 0, the claim predicts > 0)."""
    ms = [Measurement.from_estimate(task_text_gap(m["task"], m["text"], n_resamples=n_resamples),
                                    "Brown text vs the task, mean ablation", m["seed"]) for _, m in _models(record)]
    return ClaimRow("C20", f"{_what(record)}, {record['n_windows']} Brown windows",
                    "rank gap of text importance against the task", 0.0,
                    "split-half reliability of the task's ranking", "greater", tuple(ms), unit="rank")


def c9_row(record: dict, *, n_resamples: int = 1000) -> ClaimRow:
    """C9: per seed, :func:`missed_task_share` of the top quarter by text importance (null 0)."""
    ms = [Measurement.from_estimate(missed_task_share(m["text"], m["task"], n_resamples=n_resamples),
                                    f"top {KEEP} by text, mean ablation", m["seed"]) for _, m in _models(record)]
    return ClaimRow("C9", f"{_what(record)}, {record['n_windows']} Brown windows",
                    f"task share missed by the text's top {KEEP}", 0.0, "the same share as of the text", "greater",
                    tuple(ms), unit="share")


def c10_row(record: dict, *, n_resamples: int = 2000) -> ClaimRow:
    """C10: per seed and tolerance (:data:`~deviating.experiments.what_breaks_rows.TOLERANCES`,
    chapter 7's; primary :data:`~deviating.experiments.what_breaks_rows.PRIMARY`), :func:`pruning_gap`
    of the curve that removes heads least important on text first."""
    ms = []
    for _, m in _models(record):
        p = m["pruning"]
        for t in TOLERANCES:
            est = pruning_gap(p["text_loss"], p["task_right"], p["counts"], t, n_resamples=n_resamples)
            ms.append(Measurement.from_estimate(est, f"text order, mean ablation, tolerance {t:g}", m["seed"]))
    return ClaimRow("C10", f"{_what(record)}, {record['n_windows']} Brown windows",
                    "heads removed by which the task fails before the text", 0.0, "task and text fail together",
                    "greater", tuple(ms), unit="count", primary=f"text order, mean ablation, tolerance {PRIMARY:g}",
                    note="the order is text importance on the same windows the loss is read on; a measure that "
                         "never fails counts one past the last count; nats on the text, accuracy points on the task")


def rows(record: dict) -> list[ClaimRow]:
    """Every row, in claim order (C9, C10, C11, C14, C18, C20), from the stored record."""
    return [c9_row(record), c10_row(record), c11_row(record), c14_row(record), c18_row(record), c20_row(record)]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--prompts N`` (128), ``--windows N`` (64), ``--models NAME ...``, ``--out FILE``,
    ``--circuit FILE`` (the stored circuit), ``--rows-only`` (rebuild the rows from ``--out``)."""
    from deviating.ledger import markdown_table, report

    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, default=128)
    p.add_argument("--windows", type=int, default=64)
    p.add_argument("--models", nargs="+", default=None, help="default: every installed seed")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--circuit", default=None, help="the circuit JSON (default: the shipped one)")
    p.add_argument("--rows-only", action="store_true", help="rebuild the claims file from --out")
    args = p.parse_args(argv)
    if min(args.prompts, args.windows) < 8:
        p.error(f"--prompts {args.prompts} / --windows {args.windows}: use at least 8 of each")
    torch.set_num_threads(1)
    if args.rows_only:
        record = load(args.out)
    else:
        circuit = json.loads(Path(args.circuit).read_text()) if args.circuit else None
        record = run(args.models, args.prompts, args.windows, circuit)
        Path(args.out).write_text(dumps(record) + "\n")
    start = time.process_time()
    made = rows(record)
    with contextlib.redirect_stdout(io.StringIO()):  # report() shows the table; here it is printed below
        report(CHAPTER, made, write=True)
    print(markdown_table(made))
    print(f"{', '.join(record['models'])}: measured in {record['cpu_seconds']:.0f} CPU-s, rows in "
          f"{time.process_time() - start:.0f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
