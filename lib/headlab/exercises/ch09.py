"""Checks for chapter 09, "The checklist".

Every case is built so that its answer is known by construction: hand-written tables of
per-input ablation deltas, pair effects and write norms, and the planted model of
:mod:`headlab.models.planted`, whose induction head finds its key only through the
previous-token head.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from headlab.exercises import Case, compare_number, run_cases

_REPORT = ("headlab.report", "headlab.analysis.importance", "headlab.analysis.circuits", "headlab.analysis.prune")

__all__ = ["check_keep_list", "check_is_redundant", "check_find_orphans", "check_induction_drop"]


def _compare_heads(got, expected) -> str | None:
    """A sorted list of distinct ``(layer, head)`` pairs, compared exactly."""
    try:
        heads = [(int(h[0]), int(h[1])) for h in got]
        if any(len(h) != 2 for h in got):
            raise ValueError
    except (TypeError, ValueError, IndexError):
        return f"expected a list of (layer, head) pairs, got {got!r}"
    if len(set(heads)) != len(heads):
        return "a head is listed twice: each head must appear once (whatever its number of reasons)"
    if heads != sorted(heads):
        return "the heads must be sorted by (layer, head)"
    if heads != expected:
        missing = sorted(set(expected) - set(heads))
        extra = sorted(set(heads) - set(expected))
        return f"missing {missing}, should not be there {extra}"
    return None


def _compare_bool(got, expected) -> str | None:
    if not isinstance(got, (bool, np.bool_)):
        return f"expected True or False, got {type(got).__name__} {got!r}"
    return None if bool(got) == expected else f"expected {expected}, got {bool(got)}"


def _effects(*rows) -> np.ndarray:
    """One layer per argument; each argument lists its heads' per-input deltas."""
    return np.array(rows, dtype=float)  # (n_layers, n_heads, n_inputs)


def check_keep_list(fn: Callable) -> None:
    """Check ``keep_list(effects, circuit_heads, backup_pairs, factor=1.0)``.

    It must return the sorted, distinct heads whose worst case (largest effect on one input) is
    at least ``factor`` times the largest mean effect of any head, plus every circuit member,
    plus both heads of every backup pair.
    """
    one_layer = _effects([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 2.0, 0.0], [0.1, 0.1, 0.1, 0.1]])
    two_layers = _effects([[0.4, 0.4], [0.0, 0.0]], [[0.0, 0.0], [0.1, 0.3]])
    run_cases(fn, [
        Case("one head matters on every input, the others never",
             args=(_effects([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), [], []), expected=[(0, 0)],
             hint="the head with the largest mean has a worst case at least as large: it is always kept."),
        Case("0.1 does nothing on average (mean 0.5) but 2.0 on input 2",
             args=(one_layer, [], []), expected=[(0, 0), (0, 1)],
             hint="compare each head's worst case (max over inputs) with the largest *mean* of any head."),
        Case("circuit members are kept whatever their effects",
             args=(two_layers, [(1, 0), (0, 1)], []), expected=[(0, 0), (0, 1), (1, 0)],
             hint="add every head of circuit_heads to the list."),
        Case("both heads of a backup pair are kept",
             args=(two_layers, [], [((0, 1), (1, 0))]), expected=[(0, 0), (0, 1), (1, 0)],
             hint="a backup pair is (removed, backup): keep both."),
        Case("a head whose removal helps (negative effects) is not kept",
             args=(_effects([[-1.0, -3.0], [0.5, 0.5]]), [], []), expected=[(0, 1)],
             hint="use signed effects: the largest mean is 0.5, and -1 is not a large worst case."),
        Case("factor=0.5 keeps heads whose worst case reaches half the largest mean",
             args=(two_layers, [], []), kwargs={"factor": 0.5}, expected=[(0, 0), (1, 1)],
             hint="the threshold is factor * (largest mean effect): 0.5 * 0.4 = 0.2 here; 1.1 reaches 0.3."),
        Case("a head with several reasons appears once",
             args=(one_layer, [(0, 0), (0, 1)], [((0, 0), (0, 1))]), expected=[(0, 0), (0, 1)],
             hint="collect the heads in a set, then sort them."),
        Case("the largest mean comes from another layer than the worst cases",
             args=(_effects([[0.1, 0.9, 0.1], [0.0, 0.0, 0.0]], [[0.5, 0.5, 0.5], [0.45, 0.0, 0.0]]),
                   [(1, 1)], []), expected=[(0, 0), (1, 0), (1, 1)],
             hint="the largest mean is over every head of every layer (0.5 here, head 1.0)."),
        Case("two layers of three heads, a circuit and a backup pair",
             args=(_effects([[0.2, 0.2], [0.0, 0.7], [0.1, 0.0]], [[0.3, 0.3], [-0.5, 0.2], [0.05, 0.05]]),
                   [(0, 2)], [((1, 2), (1, 1))]), expected=[(0, 1), (0, 2), (1, 1), (1, 2)], hidden=True),
    ], compare=_compare_heads, what="the heads a pruning plan must keep", forbid=_REPORT)


def check_is_redundant(fn: Callable) -> None:
    """Check ``is_redundant(single_a, single_b, pair, margin=0.1)`` on per-input effects.

    Redundant: the mean effect of removing both exceeds the sum of the mean single effects by
    more than ``margin`` times the absolute value of that sum.
    """
    def arr(*x):
        return np.array(x, dtype=float)

    run_cases(fn, [
        Case("additive heads: 1 + 1 = 2", args=(arr(1.0, 1.0), arr(1.0, 1.0), arr(2.0, 2.0)), expected=False,
             hint="when the pair costs exactly the sum of the singles, nothing is redundant."),
        Case("a backup pair: 0.1 + 0.1 alone, 1.0 together", args=(arr(0.1, 0.1), arr(0.1, 0.1), arr(1.0, 1.0)),
             expected=True, hint="the pair costs far more than the sum: each head covers for the other."),
        Case("overlapping heads: 1 + 1 alone, 1.2 together", args=(arr(1.0), arr(1.0), arr(1.2)), expected=False,
             hint="a pair that costs *less* than the sum is not redundant in this sense (the effects overlap)."),
        Case("inside the margin: 1 + 1 alone, 2.1 together", args=(arr(1.0), arr(1.0), arr(2.1)), expected=False,
             hint="2.1 - 2 = 0.1 is not more than margin * 2 = 0.2."),
        Case("the same, with margin=0.01", args=(arr(1.0), arr(1.0), arr(2.1)), kwargs={"margin": 0.01},
             expected=True, hint="0.1 is more than 0.01 * 2 = 0.02."),
        Case("invisible alone: 0 + 0, but 0.5 together", args=(arr(0.0, 0.0), arr(0.0, 0.0), arr(0.5, 0.5)),
             expected=True, hint="a sum of 0 gives a margin of 0: any positive pair effect is more."),
        Case("nothing at all: 0, 0 and 0", args=(arr(0.0), arr(0.0), arr(0.0)), expected=False,
             hint="'more than' is strict: 0 is not more than 0."),
        Case("means over inputs: a = [0, 2], b = [2, 0], pair = [2.5, 2.5]",
             args=(arr(0.0, 2.0), arr(2.0, 0.0), arr(2.5, 2.5)), expected=True,
             hint="compare means over inputs: 2.5 against 1 + 1."),
        Case("heads whose removal helps: -0.5 + -0.5 alone, -0.95 together",
             args=(arr(-0.5, -0.5), arr(-0.5, -0.5), arr(-0.95, -0.95)), expected=False,
             hint="the margin is margin * |sum|, a positive number: 0.05 is not more than 0.1 * |-1.0|."),
        Case("one input where the pair is much worse, one where it is not",
             args=(arr(1.0, 0.0), arr(1.0, 0.0), arr(2.5, 0.0)), expected=True,
             hint="compare the mean pair effect (1.25) with the sum of the mean single effects (1.0)."),
        Case("worse together on one input, better on the other: additive on average",
             args=(arr(1.0, 1.0), arr(1.0, 1.0), arr(3.0, 1.0)), expected=False,
             hint="decide on the means over inputs (2.0 against 1.0 + 1.0), not input by input."),
        Case("negative and positive singles", args=(arr(-1.0, 0.0), arr(0.25, 0.25), arr(-0.2, 0.0)),
             expected=True, hidden=True),
    ], compare=_compare_bool, what="is a pair redundant", forbid=_REPORT)


def check_find_orphans(fn: Callable) -> None:
    """Check ``find_orphans(entropy, write_norm, diffuse=0.8, factor=1.5)``.

    Orphans: heads whose normalised entropy is at least ``diffuse`` and whose write norm is
    positive and at least ``factor`` times the median write norm over all heads; sorted.
    """
    entropy = np.array([[0.95, 0.10], [0.90, 0.30]])
    writes = np.array([[3.0, 3.0], [1.0, 1.0]])  # median 2.0
    run_cases(fn, [
        Case("a diffuse head that writes a lot, among sharp ones", args=(entropy, writes), expected=[(0, 0)],
             hint="0.0 is diffuse (0.95 >= 0.8) and writes 3.0 >= 1.5 * median 2.0; 1.0 is diffuse but writes 1.0."),
        Case("a sharp head that writes a lot is not an orphan", args=(np.array([[0.2, 0.9]]), np.array([[9.0, 1.0]])),
             expected=[], hint="an orphan needs a diffuse pattern: entropy >= diffuse."),
        Case("entropy exactly at the threshold counts",
             args=(np.array([[0.8, 0.1, 0.1]]), np.array([[3.0, 1.0, 2.0]])), expected=[(0, 0)],
             hint="use >= diffuse (and >= factor * median)."),
        Case("no head writes anything", args=(np.full((2, 2), 0.9), np.zeros((2, 2))), expected=[],
             hint="a head that writes nothing cannot matter, even when 0 >= 1.5 * 0."),
        Case("factor=1.0: half the diffuse heads reach the median",
             args=(np.full((1, 4), 0.9), np.array([[1.0, 2.0, 3.0, 4.0]])), kwargs={"factor": 1.0},
             expected=[(0, 2), (0, 3)], hint="the median of [1, 2, 3, 4] is 2.5 (np.median)."),
        Case("one huge writer does not raise the bar: writes [1, 1, 1, 2, 10]",
             args=(np.full((1, 5), 0.9), np.array([[1.0, 1.0, 1.0, 2.0, 10.0]])), expected=[(0, 3), (0, 4)],
             hint="compare with the median (1.0), not the mean (3.0): 2.0 >= 1.5 * 1.0."),
        Case("diffuse=0.5, factor=1.0, two layers",
             args=(np.array([[0.6, 0.4], [0.7, 0.9]]), np.array([[6.0, 9.0], [1.0, 6.0]])),
             kwargs={"diffuse": 0.5, "factor": 1.0}, expected=[(0, 0), (1, 1)],
             hint="the median write norm is 6.0; 0.1 writes 9.0 but its entropy 0.4 is below diffuse=0.5."),
        Case("three layers of two heads", args=(np.array([[0.9, 0.85], [0.5, 0.95], [0.8, 0.2]]),
                                                np.array([[1.0, 7.0], [9.0, 1.0], [6.0, 2.0]])),
             expected=[(0, 1), (2, 0)], hidden=True),
    ], compare=_compare_heads, what="diffuse heads that write a lot", forbid=_REPORT)


def _planted_batch(span: int, n: int = 2, seed: int = 0) -> dict:
    """``<token 0>`` then ``span`` distinct tokens from 1..19, then the same again; ``n`` rows."""
    import torch

    from headlab.data.spans import repeated_tokens

    ids = repeated_tokens(range(1, 20), n, span, torch.Generator().manual_seed(seed), prefix=[0])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _padded_batch(spans: list[int], seed: int = 0) -> dict:
    """Rows of ``<token 0>`` then a span repeated once, of different lengths, padded at the end
    with token 0 and ``attention_mask`` 0."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    length = 1 + 2 * max(spans)
    ids = torch.zeros(len(spans), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, span in enumerate(spans):
        tokens = (torch.randperm(19, generator=gen)[:span] + 1).tolist()
        row = [0] + tokens + tokens
        ids[r, :len(row)] = torch.tensor(row)
        mask[r, :len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _uniform_drop(span: int) -> float:
    """With 0.0 ablated, the planted induction head attends uniformly: weight 1/(i+1) on the right key.

    The eligible queries are the second copy, positions span+1 .. 2*span; clean, the weight is 1
    (up to (i) e^-20)."""
    return 1.0 - float(np.mean([1.0 / (i + 1) for i in range(span + 1, 2 * span + 1)]))


def check_induction_drop(fn: Callable) -> None:
    """Check ``induction_drop(hm, prev_head, induction_head, batch)`` on the planted model.

    It must return the induction score of ``induction_head`` on ``batch`` (mean over inputs of
    :func:`headlab.analysis.detect.induction_score`) minus the same score with ``prev_head`` zero-ablated.
    """
    from headlab.exercises.fixtures import planted_first_token_writer
    from headlab.models.planted import FIRST_TOKEN_HEAD, INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_model

    hm = planted_model()
    writer = planted_first_token_writer(d_vocab=20, n_ctx=48)
    cases = []
    for span in (5, 12):
        batch = _planted_batch(span)
        cases.append(Case(f"planted 0.0 -> 1.0 on a span of {span} tokens repeated",
                          args=(hm, PREVIOUS_TOKEN_HEAD, INDUCTION_HEAD, batch), expected=_uniform_drop(span),
                          hint="without 0.0 the induction head's keys are all equal, so it attends uniformly: "
                               "its score falls from 1 to the mean of 1/(i+1)."))
    cases += [
        Case("ablating the first-token head 0.1, which writes nothing",
             args=(hm, FIRST_TOKEN_HEAD, INDUCTION_HEAD, _planted_batch(8)), expected=0.0,
             hint="0.1's output is zero anyway: ablating it changes nothing, the drop is 0."),
        Case("the induction head's own score on a span of 8, but measured on head 1.1",
             args=(hm, PREVIOUS_TOKEN_HEAD, (1, 1), _planted_batch(8)), expected=0.0,
             hint="1.1 attends uniformly with or without 0.0: read the score of induction_head, "
                  "in its own layer."),
        Case("a padded batch: spans of 5 and 8 repeated, the shorter row padded with attention_mask 0",
             args=(hm, PREVIOUS_TOKEN_HEAD, INDUCTION_HEAD, _padded_batch([5, 8])),
             expected=(_uniform_drop(5) + _uniform_drop(8)) / 2,
             hint="pass batch['attention_mask'] to the model and to induction_score, so padded queries "
                  "do not count; and average over every input, not the first one."),
        Case("a variant where 0.1 writes the first token into every query of 1.0 (1.0 splits its attention "
             "three ways); 0.1 ablated", args=(writer, FIRST_TOKEN_HEAD, INDUCTION_HEAD, _planted_batch(6)),
             expected=1 / 3 - 1.0,
             hint="zero ablation, hm.ablate's default: without 0.1's write, 1.0's score goes from 1/3 back to 1, "
                  "so the drop is negative. A mean ablation would write the first token back."),
        Case("a padded batch of three rows", args=(hm, PREVIOUS_TOKEN_HEAD, INDUCTION_HEAD,
                                                   _padded_batch([9, 4, 6], seed=3)),
             expected=(_uniform_drop(9) + _uniform_drop(4) + _uniform_drop(6)) / 3, hidden=True),
    ]
    run_cases(fn, cases, compare=lambda got, exp: compare_number(got, exp, atol=1e-4, rtol=0),
              what="a circuit checked by ablation", forbid=_REPORT)
