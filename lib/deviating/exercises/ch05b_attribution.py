"""Check for chapter 5b's attribution exercise: node attribution patching built from scratch.

The student estimates, for every head at once and from one forward and one backward pass, how much
``logit(IO) - logit(S)`` at END would change if the head's output ``z`` (every position) were
replaced by its output on the corrupted prompt (noising): the change of ``z`` times the gradient of
the metric at the clean run, summed over positions and ``d_head`` (Nanda 2023; Syed et al. 2023).

The expected values are built without autograd: the directional derivative of the metric along
each head's change, by central differences on the model run by hand in float64
(:mod:`deviating.exercises.by_hand`), which equals the gradient's product with the change to about
1e-8. The student's function may not call the book's or the library's attribution tools.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from deviating.exercises import Case, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_node_attribution"]

_TOOLS = ("headlab.analysis", "deviating.analysis", "deviating.data.ioi", "deviating.exercises.by_hand")
_EPS = 1e-4  # central differences in float64: error of order _EPS**2 times the third derivative


def _metric(logits: torch.Tensor, end, io, s) -> torch.Tensor:
    rows = torch.arange(len(end))
    return logits[rows, end, io] - logits[rows, end, s]


def _directional(hm, ids, direction: dict, end, io, s) -> torch.Tensor:
    """``(n, L, H)``: for each head ``k``, d metric / d t at t = 0 of the run where head ``k`` alone is
    pushed by ``t * direction[k]`` (every other head responds), by central differences; every head in
    one batched run per sign."""
    from deviating.exercises.by_hand import run_by_hand

    heads = list(direction)
    n = ids.shape[0]
    out = []
    for sign in (1.0, -1.0):
        add = {}
        for i, k in enumerate(heads):  # block i of n rows: head i pushed
            push = torch.zeros((len(heads) * n,) + tuple(direction[k].shape[1:]), dtype=torch.float64)
            push[i * n:(i + 1) * n] = sign * _EPS * direction[k]
            add[k] = push
        logits = run_by_hand(hm, ids.repeat(len(heads), 1), add=add).logits
        out.append(_metric(logits, end.repeat(len(heads)), io.repeat(len(heads)), s.repeat(len(heads))))
    d = ((out[0] - out[1]) / (2 * _EPS)).reshape(len(heads), n)
    return d.T.reshape(n, hm.n_layers, hm.n_heads)


def _direct_only(hm, ids, z_clean: dict, direction: dict, end, io, s) -> torch.Tensor:
    """As :func:`_directional`, with every head of a later layer held at its clean ``z``: the paths
    through later heads cut, as when each layer's ``z`` is detached from the graph."""
    from deviating.exercises.by_hand import run_by_hand

    out = torch.zeros(ids.shape[0], hm.n_layers, hm.n_heads, dtype=torch.float64)
    for k, d in direction.items():
        later = {j: z for j, z in z_clean.items() if j[0] > k[0]}
        up = run_by_hand(hm, ids, replace={**later, k: z_clean[k] + _EPS * d})
        down = run_by_hand(hm, ids, replace={**later, k: z_clean[k] - _EPS * d})
        out[:, k[0], k[1]] = (_metric(up.logits, end, io, s) - _metric(down.logits, end, io, s)) / (2 * _EPS)
    return out


def _estimates(hm, clean, corrupted, end, io, s) -> tuple[np.ndarray, dict]:
    """The expected ``(n, L, H)`` estimate and the answers of the mistakes the task text warns about."""
    from deviating.exercises.by_hand import run_by_hand

    a, b = run_by_hand(hm, clean), run_by_hand(hm, corrupted)
    n, pos = clean.shape
    heads = [(l, h) for l in range(hm.n_layers) for h in range(hm.n_heads)]
    z_clean = {k: a.z[k[0]][:, :, k[1]] for k in heads}
    z_corr = {k: b.z[k[0]][:, :, k[1]] for k in heads}
    delta = {k: z_corr[k] - z_clean[k] for k in heads}
    only_end = torch.zeros(n, pos, 1, dtype=torch.float64)
    only_end[torch.arange(n), end] = 1.0
    right = _directional(hm, clean, delta, end, io, s)
    base = _metric(a.logits, end, io, s)[:, None]
    exact = (torch.stack([_metric(run_by_hand(hm, clean, replace={k: z_corr[k]}).logits, end, io, s)
                          for k in heads], dim=1) - base).reshape(n, hm.n_layers, hm.n_heads)
    mistakes = {
        "the sign is reversed: the change is the corrupted z minus the clean z": -right,
        "the gradient is taken at the corrupted run; noising takes it at the clean run":
            _directional(hm, corrupted, delta, end, io, s),
        "this is gradient times activation (z itself), not times the change of z":
            _directional(hm, clean, z_clean, end, io, s),
        "only END's z changes here: the head is patched at every position":
            _directional(hm, clean, {k: d * only_end for k, d in delta.items()}, end, io, s),
        "the metric is read at the last position; read it at each prompt's END":
            _directional(hm, clean, delta, torch.full_like(end, pos - 1), io, s),
        "only the direct path counts here: a z detached from the graph at every layer cuts the paths through "
        "later heads (keep each layer's z in the graph and ask for its gradient, e.g. retain_grad)":
            _direct_only(hm, clean, z_clean, delta, end, io, s),
        "this is the exact patching effect (a forward pass per head); the exercise asks for the estimate "
        "from one forward and one backward pass": exact,
        "the absolute value loses the sign: a head whose patch raises the metric must come out positive":
            right.abs(),
    }
    return right.numpy(), {what: answer.numpy() for what, answer in mistakes.items()}


def _prompts(rng: np.random.Generator, n: int, pos: int, vocab: int = 40):
    """Clean ids ``(n, pos)``, corrupted ids (two positions changed), END before the last position, IO != S."""
    clean = torch.as_tensor(rng.integers(vocab, size=(n, pos)))
    corrupted = clean.clone()
    for p in rng.choice(np.arange(1, pos - 2), size=2, replace=False):
        corrupted[:, int(p)] = (clean[:, int(p)] + torch.as_tensor(rng.integers(1, vocab, size=n))) % vocab
    end = torch.as_tensor(pos - 1 - rng.integers(1, 3, size=n))
    io = torch.as_tensor(rng.integers(vocab, size=n))
    s = (io + torch.as_tensor(rng.integers(1, vocab, size=n))) % vocab
    return clean, corrupted, end, io, s


def _case(name: str, hm, rng, n: int, pos: int, hidden: bool, built: list) -> None:
    clean, corrupted, end, io, s = _prompts(rng, n, pos)
    expected, mistakes = _estimates(hm, clean, corrupted, end, io, s)
    built.append((Case(name, args=(hm, clean, corrupted, end, io, s), expected=expected, hidden=hidden,
                       hint="one clean run whose every z is a leaf that requires grad, the metric at END summed "
                            "over prompts, one backward; then (z_corrupted - z_clean) * grad, summed over "
                            "positions and d_head, per head."), mistakes))


def _fixed(built: list) -> None:
    from deviating.exercises.by_hand import tiny_gpt

    rng = np.random.default_rng(5)
    _case("2 layers of 4 heads, three prompts", tiny_gpt(seed=21), rng, 3, 8, False, built)
    _case("3 layers with MLPs, 2 heads each, two prompts",
          tiny_gpt(seed=22, n_layers=3, n_heads=2, d_model=24, d_mlp=48), rng, 2, 9, False, built)
    _case("2 layers of 4 heads, other prompts", tiny_gpt(seed=21), rng, 4, 7, True, built)


def _drawn_cases(rng: np.random.Generator) -> list:
    """A random small GPT and prompts from the secret seed (drawn when grading: :mod:`.drawn`)."""
    from deviating.exercises.by_hand import tiny_gpt

    layers, heads = int(rng.integers(2, 4)), int(rng.choice([2, 4]))
    hm = tiny_gpt(seed=int(rng.integers(10_000)), n_layers=layers, n_heads=heads, d_model=8 * heads, d_mlp=32)
    built: list = []
    _case(MARK + f": {layers} layers of {heads} heads", hm, rng, int(rng.integers(2, 5)), int(rng.integers(7, 10)),
          False, built)
    _MISTAKES.update({id(c.expected): m for c, m in built})
    return [c for c, _ in built]


_MISTAKES: dict = {}


def check_node_attribution(fn: Callable) -> None:
    """Check ``fn(hm, clean, corrupted, end, io_id, s_id)``: ``(n, n_layers, n_heads)``, per prompt and
    head, the attribution-patching estimate of how much the metric ``logit(IO) - logit(S)`` at END
    changes when the head's ``z`` at every position is replaced by its corrupted-run value."""
    from deviating.exercises.by_hand import naming_compare

    built: list = []
    _fixed(built)
    _MISTAKES.clear()
    _MISTAKES.update({id(c.expected): m for c, m in built})
    cases = [c for c, _ in built] + drawn(_drawn_cases)
    run_cases(fn, cases, compare=naming_compare(_MISTAKES, atol=1e-4, rtol=1e-3),
              what="node attribution patching", forbid=_TOOLS)
