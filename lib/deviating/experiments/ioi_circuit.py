"""The indirect-object circuit of each ``ioi-gpt`` seed, stored for chapter 5's second part.

:func:`circuit_record` measures one shipped model on held-out prompts (held-out names and
templates, :func:`~deviating.analysis.ioi.evaluation_prompts`): the metric, each head's role by
the one definition (:func:`~deviating.analysis.ioi_roles.find_roles`) with its evidence, the
circuit, the backup test on the name movers, and the circuit's faithfulness under zero, mean and
resample ablation. ``python scripts/ioi_circuit.py`` writes every seed's record to
``lib/deviating/results/ioi_circuit.json``.
"""

from __future__ import annotations

import dataclasses
import platform
from typing import Any

import torch

import headlab
from deviating.analysis.ioi import evaluation_prompts, logit_diffs
from deviating.analysis.ioi_circuit import backup_test, faithfulness, make_ablation
from deviating.analysis.ioi_roles import ROLES, find_roles
from deviating.experiments.records import rounded

__all__ = ["IOI_MODELS", "circuit_record", "run"]

IOI_MODELS = ("ioi-gpt", "ioi-gpt-s1", "ioi-gpt-s2")


def _head(h) -> str:
    return f"{h[0]}.{h[1]}"


def circuit_record(name: str, n: int = 128, seed: int = 0) -> dict[str, Any]:
    """Everything the chapter reports about model ``name`` (module docstring), as JSON-ready values."""
    hm = headlab.load(name, device="cpu")
    clean, abc = evaluation_prompts(hm, n, seed)
    diffs = logit_diffs(hm, clean)
    roles = find_roles(hm, clean, abc, seed=seed)
    movers = roles.heads_with("name mover")
    record: dict[str, Any] = {
        "n_prompts": n, "logit_diff": float(diffs.mean()), "accuracy": float((diffs > 0).float().mean()),
        "abc_logit_diff": float(logit_diffs(hm, abc).mean()),
        "roles": {r: [_head(h) for h in roles.heads_with(r)] for r in ROLES},
        "no_role": [_head(h) for h in roles.no_role()], "circuit": [_head(h) for h in roles.circuit],
        "evidence": {_head(h): dataclasses.asdict(e) for h, e in roles.evidence.items()},
        "thresholds": roles.thresholds,
        "faithfulness": faithfulness(hm, clean, roles.circuit, abc, seed=seed),
    }
    if movers:
        b = backup_test(hm, clean, movers, make_ablation("mean", abc, seed), seed=seed)
        record["backup"] = {"removed": [_head(h) for h in movers], "drop": dataclasses.asdict(b.drop),
                            "expected_drop": dataclasses.asdict(b.expected_drop),
                            "change": {_head(h): dataclasses.asdict(e) for h, e in b.change.items()}}
    return rounded(record)


def run(names=IOI_MODELS, n: int = 128, seed: int = 0) -> dict[str, Any]:
    """:func:`circuit_record` of each model, with the versions."""
    torch.manual_seed(seed)
    return {"command": f"python scripts/ioi_circuit.py --n {n} --seed {seed}", "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "models": {name: circuit_record(name, n, seed) for name in names}}
