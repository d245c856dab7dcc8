"""What the ledger's rows on ``ioi-gpt`` read (:mod:`deviating.experiments.ioi_rows`), measured once
per training seed and stored in :data:`OUT`: per prompt or window, never averaged before the rows
ask.

Per seed, on held-out names in training templates (the prompts of
:func:`deviating.experiments.ioi_tail.task_prompts`, another draw than the one chapter 5b found the
roles on), their ABC twins and held-out Brown windows: the pair interaction of the two name movers
under each ablation; for each role (:data:`ROLE_TESTS`), whether the role heads' attention picks the
ground-truth token, and whether each baseline does; the task's and the text's ablation effects per
head; attention END -> IO per head; and the pruning curve in the order of text importance.
"""

from __future__ import annotations

import contextlib
import json
import resource
from importlib.resources import files
from pathlib import Path
from typing import Any, Sequence

import torch

from headlab.metrics.functions import next_token_loss
from deviating.analysis.ioi import logit_diffs, prompt_batch
from deviating.analysis.ioi_circuit import ABLATIONS, make_ablation
from deviating.analysis.ioi_roles import ROLES
from deviating.experiments.ioi_circuit import IOI_MODELS
from deviating.experiments.ioi_tail import TASK_SEED, task_importance, task_prompts, text_importance, text_order
from deviating.experiments.records import rounded

__all__ = ["OUT", "COMMAND", "ROLE_TESTS", "LABELLING_RULES", "installed", "role_positions", "measure_seed", "run",
           "load"]

OUT = Path(__file__).resolve().parents[1] / "results" / "ioi_rows.json"
COMMAND = "python -m deviating.experiments.ioi_rows"
#: role -> (query position, the ground-truth key positions that count as right)
ROLE_TESTS = {"name mover": ("END", ("IO",)), "negative name mover": ("END", ("IO",)),
              "S-inhibition": ("END", ("S1", "S2")), "backup name mover": ("END", ("IO",)),
              "induction": ("S2", ("S1+1",)), "duplicate token": ("S2", ("S1",)),
              "previous token": ("S1+1", ("S1",))}
#: role -> the baseline that is the rule that made its ground truth (refused: no head can lead it)
LABELLING_RULES = {"name mover": "the name said once", "negative name mover": "the name said once",
                   "S-inhibition": "the name said twice", "backup name mover": "the name said once",
                   "induction": "the token after the earlier copy", "duplicate token": "the earlier copy",
                   "previous token": "previous token"}
#: role -> the evidence field (ioi_circuit.json) that ranks a seed's heads by the role's pattern
_PATTERN = {"name mover": "end_io", "negative name mover": "end_io", "S-inhibition": "end_s",
            "backup name mover": "end_io", "induction": "s2_s1_next", "duplicate token": "s2_s1",
            "previous token": "prev"}


def installed(models: Sequence[str] = IOI_MODELS) -> list[str]:
    """The checkpoints of ``models`` that are installed (the seed list, never hard-coded)."""
    return [m for m in models if (files("headlab") / "checkpoints" / m / "model.safetensors").is_file()]


def _pos(prompts, name: str) -> torch.Tensor:
    return prompts.pos["S1"] + 1 if name == "S1+1" else prompts.pos[name]


def role_positions(prompts, role: str) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """``(query, right, baselines)`` for one role: the query position per prompt; ``right`` ``(n, L)``
    True at the key positions that count as right; per baseline, the position it predicts. The
    baselines: the previous token, the first word, the first name, the nearest earlier name, and
    the rule that made the role's ground truth (:data:`LABELLING_RULES`, refused when rows are built)."""
    if role not in ROLE_TESTS:
        raise ValueError(f"unknown role {role!r}: choose from {', '.join(ROLE_TESTS)}")
    q_name, targets = ROLE_TESTS[role]
    q = _pos(prompts, q_name)
    n, length = prompts.tokens.shape
    right = torch.zeros(n, length, dtype=torch.bool)
    for t in targets:
        right[torch.arange(n), _pos(prompts, t)] = True
    names = torch.stack([prompts.pos[k] for k in ("IO", "S1", "S2")], 1)
    earlier = torch.where(names < q[:, None], names, torch.full_like(names, -1)).max(1).values
    base = {"previous token": q - 1, "first word": torch.ones_like(q), "first name": names[:, :2].min(1).values,
            "nearest earlier name": earlier}
    rule = LABELLING_RULES[role]
    base[rule] = q - 1 if rule == "previous token" else _pos(prompts, targets[-1])
    return q, right, base


def _heads(record: dict, role: str) -> tuple[list[str], bool]:
    found = record["roles"].get(role, [])
    if found:
        return list(found), True
    field = _PATTERN[role]
    best = max(record["evidence"], key=lambda h: record["evidence"][h][field])
    return [best], False


def _lh(head: str) -> tuple[int, int]:
    layer, h = head.split(".")
    return int(layer), int(h)


@torch.no_grad()
def _pruning(hm, prompts, windows, order, ablation: str = "mean") -> dict[str, Any]:
    """Per count of heads removed in ``order`` (0 .. all): each window's loss and each prompt's 0/1."""
    from deviating.data.ioi.prompts import logit_diff
    from headlab.heads.ablation import Ablation

    p_batch = prompt_batch(prompts)
    w_batch = {"input_ids": windows, "attention_mask": torch.ones_like(windows)}
    how = {"task": Ablation(ablation, reference=p_batch), "text": Ablation(ablation, reference=w_batch)}
    loss, right = [], []
    for k in range(len(order) + 1):
        removed = [tuple(h) for h in order[:k]]
        with hm.ablate(removed, how["task"]) if removed else contextlib.nullcontext():
            right.append((logit_diff(hm.forward(p_batch), prompts).float() > 0).int().tolist())
        with hm.ablate(removed, how["text"]) if removed else contextlib.nullcontext():
            loss.append(next_token_loss(hm.forward(w_batch), windows, reduction="input").float().tolist())
    return {"counts": list(range(len(order) + 1)), "text_loss": loss, "task_right": right}


@torch.no_grad()
def measure_seed(hm, circuit: dict, prompts, abc, windows, *, seed: int = 0) -> dict[str, Any]:
    """Everything the rows read about one seed (per prompt or window), from its checkpoint ``hm``,
    its stored circuit record ``circuit``, ``prompts`` and their ABC twins ``abc`` and ``windows``."""
    clean = logit_diffs(hm, prompts)
    D = float(clean.mean())
    out: dict[str, Any] = {"seed": int(hm.provenance.get("seed", 0)), "D": D, "n_prompts": len(prompts),
                           "n_windows": int(windows.shape[0]),
                           "negative_writers": list(circuit["roles"].get("negative name mover", []))}
    movers = circuit["roles"].get("name mover", [])
    out["pair"] = movers[:2] if len(movers) >= 2 else []
    out["interaction"] = {}
    if out["pair"]:
        a, b = map(_lh, out["pair"])
        for kind in ABLATIONS:
            ablation = make_ablation(kind, abc, seed)
            one, two = logit_diffs(hm, prompts, [a], ablation), logit_diffs(hm, prompts, [b], ablation)
            both = logit_diffs(hm, prompts, [a, b], ablation)
            out["interaction"][kind] = ((one + two - both - clean) / D).tolist()  # effect(a+b) - effect(a) - effect(b)
    with hm.capture(("pattern",)) as cache:
        hm.forward(prompt_batch(prompts))
    patterns = torch.stack([cache.pattern(l).float().cpu() for l in range(hm.n_layers)], 1)  # (n, L, H, q, k)
    rows = torch.arange(len(prompts))
    out["roles"] = {}
    for role in ROLES:
        heads, by_definition = _heads(circuit, role)
        q, right, base = role_positions(prompts, role)
        att = sum(patterns[rows, l, h, q] for l, h in map(_lh, heads))  # (n, k)
        keys = torch.arange(att.shape[1])[None, :]
        att = att.masked_fill((keys == 0) | (keys > q[:, None]), -1.0)  # the first token (EOT) is no answer
        picked = att.argmax(1)
        out["roles"][role] = {"heads": heads, "by_definition": by_definition,
                              "head_right": right[rows, picked].int().tolist(),
                              "baselines": {k: right[rows, v.clamp(min=0)].int().tolist() for k, v in base.items()}}
    L, H = hm.n_layers, hm.n_heads
    out["end_io"] = patterns[rows, :, :, prompts.pos["END"], prompts.pos["IO"]].reshape(len(prompts), L * H).T.tolist()
    out["task"] = task_importance(hm, prompts, "mean").reshape(L * H, -1).tolist()
    text = text_importance(hm, windows, "mean")
    out["text"] = text.reshape(L * H, -1).tolist()
    order = text_order(text)
    out["order"] = [f"{l}.{h}" for l, h in order]
    out["pruning"] = _pruning(hm, prompts, windows, order)
    return out


def run(models: Sequence[str] | None = None, n_prompts: int = 128, n_windows: int = 64,
        circuit: dict | None = None) -> dict[str, Any]:
    """:func:`measure_seed` for every installed model of ``models`` (default: every installed seed
    of :data:`~deviating.experiments.ioi_circuit.IOI_MODELS`), with the stored circuit's roles."""
    import headlab
    from deviating.data.ioi.prompts import corrupt_abc
    from deviating.data.ioi.windows import IoiSplit
    from deviating.experiments.ioi_circuit import load_results
    from deviating.training.recipes import RECIPES

    circuit = circuit if circuit is not None else load_results()
    if models is not None and set(models) - set(installed(models)):
        raise ValueError(f"not installed: {', '.join(sorted(set(models) - set(installed(models))))}; installed "
                         f"seeds: {', '.join(installed()) or 'none'}")
    models = installed(models if models is not None else IOI_MODELS)
    if not models:
        raise ValueError(f"no ioi-gpt checkpoint is installed (looked for {', '.join(IOI_MODELS)})")
    missing = [m for m in models if m not in circuit["models"]]
    if missing:
        raise ValueError(f"the stored circuit has no roles for {', '.join(missing)}: regenerate it with "
                         f"`{circuit.get('command', 'python -m deviating.experiments.ioi_circuit')}`")
    start = resource.getrusage(resource.RUSAGE_SELF)
    record: dict[str, Any] = {"command": COMMAND, "roles_from": circuit.get("command", "not recorded"),
                              "n_prompts": n_prompts, "n_windows": n_windows, "task_seed": TASK_SEED,
                              "ablation": "mean", "models": {}}
    for name in models:
        hm = headlab.load(name, device="cpu")
        prompts = task_prompts(hm, n_prompts)
        abc = corrupt_abc(hm.tokenizer, prompts, IoiSplit.from_provenance(hm.provenance).heldout_names, TASK_SEED + 1)
        windows = RECIPES[name].task.eval_data(n_windows)["brown"].windows
        record["models"][name] = measure_seed(hm, circuit["models"][name], prompts, abc, windows)
    end = resource.getrusage(resource.RUSAGE_SELF)
    record["cpu_seconds"] = round(end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime, 1)
    return rounded(record, 5)


def load(path: Path | str = OUT) -> dict[str, Any]:
    """The stored record (made by :data:`COMMAND`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: make it with `{COMMAND}`")
    return json.loads(path.read_text())
