"""More checks for chapter 09, "The checklist": two of the report's checks, built by the student.

Every case is built so that its answer is known by construction: tables of per-text ablation
effects in which the heads each half of the texts would choose are planted, and tables whose
heads sit on chosen sides of a mean bar and a worst-case bar.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, run_cases
from deviating.exercises.ch09 import compare_heads
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_selection_check", "check_hidden_in_tail"]

_REPORT = ("headlab.report", "headlab.analysis.importance", "headlab.stats")


# --------------------------------------------------------------------------- select on one half


def _compare_selection(got, expected) -> str | None:
    if not isinstance(got, dict) or set(got) != {"in_sample", "held_out", "agreement"}:
        keys = sorted(got) if isinstance(got, dict) else type(got).__name__
        return f"expected a dict with keys 'in_sample', 'held_out' and 'agreement'; got {keys}"
    problems = []
    for key in ("in_sample", "held_out"):
        try:
            value = float(got[key])
        except (TypeError, ValueError):
            return f"{key} must be a number, got {got[key]!r}"
        if not abs(value - expected[key]) <= 1e-9 * max(1.0, abs(expected[key])):
            problems.append(f"{key} is {value:.6g}")
    if not isinstance(got["agreement"], (int, np.integer)) or isinstance(got["agreement"], bool):
        return f"agreement must be a count of heads (an int), got {got['agreement']!r}"
    if int(got["agreement"]) != expected["agreement"]:
        problems.append(f"agreement is {got['agreement']}")
    return None if not problems else "wrong: " + ", ".join(problems)


def _planted(rng: np.random.Generator, layers: int, heads: int, n: int, top_k: int, overlap: int):
    """A table whose select half chooses the heads ``chosen`` (values 5-6 there, the rest at most
    1, a decoy with one value of 20 but a mean below 5) and whose measure half chooses ``other``
    (values 3-4), sharing ``overlap`` heads. Texts are shuffled between the halves."""
    effects = rng.uniform(0.0, 1.0, size=(layers, heads, 2 * n))
    texts = rng.permutation(2 * n)
    select, measure = np.sort(texts[:n]), np.sort(texts[n:])
    flat = [divmod(int(i), heads) for i in rng.permutation(layers * heads)]
    chosen = flat[:top_k]
    other = chosen[:overlap] + flat[top_k:2 * top_k - overlap]
    decoy = flat[2 * top_k - overlap]
    for h in chosen:
        effects[h[0], h[1], select] = rng.uniform(5.0, 6.0, n)
    for h in other:
        effects[h[0], h[1], measure] = rng.uniform(3.0, 4.0, n)
    effects[decoy[0], decoy[1], select[int(rng.integers(n))]] = 20.0
    expected = {"in_sample": float(np.mean([effects[h[0], h[1], select].mean() for h in chosen])),
                "held_out": float(np.mean([effects[h[0], h[1], measure].mean() for h in chosen])),
                "agreement": overlap}
    return (effects, select, measure, top_k), expected


def _selection_cases() -> list[Case]:
    g = np.random.default_rng(12)
    hand = np.array([[[4.0, 4.0, 0.0, 0.0], [1.0, 1.0, 2.0, 2.0]], [[0.0, 0.0, 3.5, 1.0], [2.0, 0.0, 0.0, 0.0]]])
    args, want = _planted(g, 2, 3, 6, 2, 1)
    hidden_args, hidden_want = _planted(g, 3, 4, 8, 3, 2)
    return [
        Case("one head, chosen on texts 0-1, measured on 2-3", args=(hand, [0, 1], [2, 3], 1),
             expected={"in_sample": 4.0, "held_out": 0.0, "agreement": 0},
             hint="head 0.0 has the largest mean on texts 0 and 1 (4.0); on texts 2 and 3 it has 0; the "
                  "other half would choose head 1.0."),
        Case("two heads; the halves interleaved", args=(hand, [1, 2], [0, 3], 2),
             expected={"in_sample": 1.875, "held_out": 1.25, "agreement": 1},
             hint="on texts 1 and 2, heads 0.0 (2.0) and 1.0 (1.75) lead; texts 0 and 3 would choose 0.0 and "
                  "0.1: one head in common."),
        Case("a planted table: 2 layers of 3 heads, 12 texts", args=args, expected=want,
             hint="choose by the mean on the select texts, not by the largest single value; measure the same "
                  "heads on the measure texts only."),
        Case("a planted table: 3 layers of 4 heads", args=hidden_args, expected=hidden_want, hidden=True),
    ]


def _drawn_selection_cases(rng: np.random.Generator) -> list[Case]:
    """Two planted tables of 2-3 layers, 4-5 heads, 12-20 texts, top 2 or 3, overlap below top_k."""
    cases = []
    for _ in range(2):
        layers, heads, n, top_k = (int(rng.integers(2, 4)), int(rng.integers(4, 6)), int(rng.integers(6, 11)),
                                   int(rng.integers(2, 4)))
        args, want = _planted(rng, layers, heads, n, top_k, int(rng.integers(0, top_k)))
        cases.append(Case(MARK + f": {layers} layers of {heads} heads, {2 * n} texts, top {top_k}", args=args,
                          expected=want))
    return cases


def check_selection_check(fn: Callable) -> None:
    """Check ``selection_check(effects, select, measure, top_k)``: the top heads by mean effect on the
    select texts, their mean there (in_sample) and on the measure texts (held_out), and how many of
    them the measure texts would choose too (agreement)."""
    run_cases(fn, _selection_cases() + drawn(_drawn_selection_cases), compare=_compare_selection,
              what="select on one half, measure on the other", forbid=_REPORT)


# --------------------------------------------------------------------------- heads hidden in the tail


def _tail_table(rng: np.random.Generator, layers: int, heads: int, n: int):
    """Bars of M/4 (mean) and M (worst), M dyadic, n >= 9 inputs: tail heads (0 but one value of
    1.2-2 M, so their mean stays below M/4), a head large on average, heads small everywhere, a head
    whose removal helps a lot on one input, a head whose mean is exactly the bar (and worst case
    above M), and one whose worst case is exactly the bar."""
    big = int(rng.integers(8, 17)) / 8
    effects = rng.uniform(0.0, 0.2 * big, size=(layers, heads, n))
    flat = [divmod(int(i), heads) for i in rng.permutation(layers * heads)]
    tails, steady, helps, at_mean, at_worst = flat[:2], flat[2], flat[3], flat[4], flat[5]
    for h in tails:
        effects[h] = 0.0
        effects[h][int(rng.integers(n))] = rng.uniform(1.2, 2.0) * big
    effects[steady] = rng.uniform(1.2, 1.5, n) * big
    effects[helps] = 0.0
    effects[helps][int(rng.integers(n))] = -rng.uniform(1.2, 2.0) * big
    effects[at_mean] = 0.0
    effects[at_mean][:2] = (n / 8) * big, (n / 8) * big  # mean exactly M / 4, worst above M
    effects[at_worst] = 0.0
    effects[at_worst][0] = big  # worst exactly M, mean below M / 4
    return (effects, big / 4, big), sorted(tails)


def _tail_cases() -> list[Case]:
    one = np.array([[[0.0, 0.0, 0.0, 4.0], [1.0, 1.0, 1.0, 1.0], [0.2, 0.2, 0.2, 0.2]]])
    args, want = _tail_table(np.random.default_rng(5), 2, 4, 10)
    return [
        Case("a head that matters on one input only", args=(one, 1.5, 2.0), expected=[(0, 0)],
             hint="head 0.0 has mean 1.0, below 1.5, and worst case 4.0, above 2.0."),
        Case("nothing is hidden when every head is steady", args=(one[:, 1:], 1.5, 2.0), expected=[],
             hint="return an empty list."),
        Case("a planted table of 2 layers", args=args, expected=want, hidden=True),
    ]


def _drawn_tail_cases(rng: np.random.Generator) -> list[Case]:
    """Two planted tables of 2-3 layers of 3-4 heads and 9-12 inputs."""
    out = []
    for _ in range(2):
        layers, heads, n = int(rng.integers(2, 4)), int(rng.integers(3, 5)), int(rng.integers(9, 13))
        args, want = _tail_table(rng, layers, heads, n)
        out.append(Case(MARK + f": {layers} layers of {heads} heads, {n} inputs", args=args, expected=want))
    return out


def check_hidden_in_tail(fn: Callable) -> None:
    """Check ``hidden_in_tail(effects, mean_below, worst_above)``: the sorted heads whose mean effect
    is below ``mean_below`` and whose worst case (largest effect) is above ``worst_above``."""
    run_cases(fn, _tail_cases() + drawn(_drawn_tail_cases), compare=compare_heads,
              what="heads hidden in the tail", forbid=_REPORT)
