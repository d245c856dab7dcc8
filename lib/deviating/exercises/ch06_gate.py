"""Checks for chapter 6's gradient-importance exercise: gates on a Hugging Face GPT-2.

The expected values come from the head interface's own gate gradients (tested against finite
differences in tests/test_model.py), never from the student's hooks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, compare_arrays, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_gate_importance"]

# --------------------------------------------------------------------------- gate gradients


def _gate_reference(model, input_ids) -> np.ndarray:
    """Michel et al.'s importance from the head interface's own gate gradients (tested against
    finite differences in tests/test_model.py): mean over inputs of |d loss_i / d g_{l,h}|."""
    import torch

    from headlab.heads.model import HeadModel
    from headlab.metrics import Metric

    hm = HeadModel(model, name="a GPT-2")
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    return hm.head_gradients(batch, Metric("loss")).abs().mean(0).double().numpy()


def _signed_reference(model, input_ids) -> np.ndarray:
    import torch

    from headlab.heads.model import HeadModel
    from headlab.metrics import Metric

    hm = HeadModel(model, name="a GPT-2")
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    return hm.head_gradients(batch, Metric("loss")).double().numpy()


def check_gate_importance(fn: Callable) -> None:
    """Check ``gate_importance(model, input_ids)``: for a Hugging Face GPT-2, a gate ``g`` on every
    head's slice of W_O's input (``g = 1``: the model as it is), and Michel et al.'s importance, the
    mean over inputs of ``|d loss_i / d g_{l,h}|`` with ``loss_i`` input ``i``'s mean next-token loss:
    an array ``(n_layer, n_head)``."""
    import torch

    from deviating.exercises.ch02 import tiny_gpt2

    model = tiny_gpt2(seed=4)
    ids = torch.tensor([[3, 17, 5, 3, 17, 40, 2], [8, 8, 1, 22, 9, 30, 30], [4, 4, 4, 4, 4, 4, 4]])
    other = tiny_gpt2(seed=5, n_layer=3, n_head=2, n_embd=24)
    strong = tiny_gpt2(seed=6)
    with torch.no_grad():  # heads that matter: removing one is far from the first-order guess
        for block in strong.transformer.h:
            block.attn.c_attn.weight.mul_(15.0)
            block.attn.c_proj.weight.mul_(15.0)
    ids_b = torch.tensor([[1, 2, 3, 4, 5, 6], [9, 9, 9, 2, 2, 2]])
    cases = [
        Case("a 2-layer GPT-2 with 4 heads, three inputs", args=(model, ids),
             expected=_gate_reference(model, ids),
             hint="multiply each head's slice of c_proj's input by its gate (a forward pre-hook), with the gates "
                  "a (batch, n_layer, n_head) tensor that requires grad: one gate row per input gives each "
                  "input's own gradient in one backward pass. Average |gradient| over inputs."),
        Case("a GPT-2 whose heads matter (weights scaled up): the gradient, not the ablation effect",
             args=(strong, ids), expected=_gate_reference(strong, ids),
             hint="the importance is the derivative at g = 1 (autograd through the gates), not the change when a "
                  "head is removed: with strong heads the two differ."),
        Case("another GPT-2: 3 layers of 2 heads, two inputs", args=(other, ids_b),
             expected=_gate_reference(other, ids_b), hidden=True),
    ]
    signed = {id(c.expected): c.args for c in cases}

    def compare(got, expected):
        if isinstance(got, _HooksLeft):
            return (f"{got.count} hook(s) left on the model after the call: remove each one (handle.remove(), "
                    "in a `finally:`) before you return")
        problem = compare_arrays(got, expected, atol=1e-5, rtol=1e-4)
        if problem is None or id(expected) not in signed:
            return problem
        g = _signed_reference(*signed[id(expected)])
        for what, answer in (("the mean of the signed gradients: take |.| per input, then the mean", g.mean(0)),
                             ("|mean gradient|: take |.| per input first, then the mean", np.abs(g.mean(0))),
                             ("the gradient of the summed loss: one gate for the whole batch gives the sum of "
                              "the inputs' gradients, not each input's", np.abs(g.sum(0)))):
            if compare_arrays(got, answer, atol=1e-5, rtol=1e-4) is None:
                return f"this is {what}"
        return problem

    drawn_cases = drawn(_drawn_gate_cases)
    signed.update({id(c.expected): c.args for c in drawn_cases})
    run_cases(_then_no_hooks(fn), cases + drawn_cases, compare=compare, what="Michel et al.'s importance from gate gradients",
              forbid=("headlab", "deviating.analysis"))


def _ablation_effect(model, ids) -> np.ndarray:
    """Mean over inputs of |loss without the head - loss|: what removing each head does, not its gradient."""
    import torch
    import torch.nn.functional as F

    from headlab.heads.model import HeadModel

    hm = HeadModel(model, name="a GPT-2")

    def loss():
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none").mean(1)

    clean, out = loss(), np.zeros((model.config.n_layer, model.config.n_head))
    for layer, head in np.ndindex(*out.shape):
        with hm.ablate([(layer, head)]):
            out[layer, head] = float((loss() - clean).abs().mean())
    return out


def _mistakes_differ(model, ids, expected) -> bool:
    """Whether the signed mean, |mean| and |sum| of the per-input gradients, and the ablation effect, all
    differ from the answer."""
    g = _signed_reference(model, ids)
    return all(compare_arrays(m, expected, atol=1e-5, rtol=1e-4) is not None
               for m in (g.mean(0), np.abs(g.mean(0)), np.abs(g.sum(0)), _ablation_effect(model, ids)))


def _drawn_gate_cases(rng: np.random.Generator) -> list[Case]:
    """Random GPT-2s and inputs; a draw on which a usual mistake gives the right answer is drawn again."""
    import torch

    from deviating.exercises.ch02 import tiny_gpt2

    cases = []
    while len(cases) < 2:
        n_head = int(rng.choice([2, 4]))
        model = tiny_gpt2(seed=int(rng.integers(2**31)), n_layer=int(rng.integers(2, 4)), n_head=n_head,
                          n_embd=n_head * int(rng.integers(3, 7)))
        with torch.no_grad():  # heads that matter: removing one is far from the first-order guess
            for block in model.transformer.h:
                block.attn.c_attn.weight.mul_(rng.uniform(8.0, 15.0))
                block.attn.c_proj.weight.mul_(rng.uniform(8.0, 15.0))
        ids = torch.as_tensor(rng.integers(50, size=(int(rng.integers(3, 5)), int(rng.integers(5, 9)))))
        expected = _gate_reference(model, ids)
        if _mistakes_differ(model, ids, expected):
            cases.append(Case(MARK + f": a GPT-2 of {model.config.n_layer} layers x {n_head} heads",
                              args=(model, ids), expected=expected))
    return cases


class _HooksLeft:
    """What the check sees in place of the answer when the function left hooks on the model."""

    def __init__(self, count: int):
        self.count = count

    def __repr__(self) -> str:
        return f"<an answer, with {self.count} hook(s) left on the model>"


def _then_no_hooks(fn: Callable) -> Callable:
    """``fn``, then :class:`_HooksLeft` if it left a hook on the model (the task says to remove them). The
    check sees the model it passed, so this holds for a function run in this process."""
    def gate_importance(model, input_ids):
        out = fn(model, input_ids)
        left = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
        return _HooksLeft(left) if left else out

    gate_importance.__name__ = getattr(fn, "__name__", "gate_importance")
    gate_importance.__wrapped__ = fn
    return gate_importance
