"""Checks for chapter 05's patching and direct logit attribution exercises.

Expected values come from a forward pass written out by hand (:mod:`deviating.exercises.by_hand`),
never from the head interface the student uses; the drawn cases (:mod:`deviating.exercises.drawn`)
build other random models and inputs the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from deviating.exercises import Case, run_cases
from deviating.exercises.drawn import MARK, drawn

__all__ = ["check_patch_head", "check_head_dla"]

# --------------------------------------------------------------------- patching one head

_BY_HAND = "deviating.exercises.by_hand"  # the checks' own reference: never the student's tool
_TOOLS = ("headlab.analysis", "deviating.analysis", _BY_HAND)


def _pair(seed: int, vocab: int, batch: int, pos: int, changed: int):
    """Clean token ids and a corrupted twin that differs at position ``changed`` of every row."""
    import torch

    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(vocab, (batch, pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, changed] = (clean[:, changed] + 1 + torch.randint(vocab - 1, (batch,), generator=g)) % vocab
    return clean, corrupted


def _clear_pair(clean_run, corrupted_run) -> tuple[int, int]:
    """``(answer, wrong)``: the two tokens whose logit difference at the last position moves most
    between the runs on *every* input (so the normalised recovery is well defined)."""
    moved = clean_run.logits[:, -1] - corrupted_run.logits[:, -1]  # (batch, vocab)
    gap = (moved[:, :, None] - moved[:, None, :]).abs().min(dim=0).values  # (vocab, vocab): the worst input
    gap.fill_diagonal_(-1.0)
    answer, wrong = divmod(int(gap.argmax()), gap.shape[1])
    return answer, wrong


def _patch_case(name, hm, clean, corrupted, layer, head, hint="", hidden=False):
    """A case of patch_head, its expected recovery by hand, and the answers of the usual mistakes."""
    from deviating.exercises.by_hand import last_logit_diff, run_by_hand

    runs = {"clean": run_by_hand(hm, clean), "corrupted": run_by_hand(hm, corrupted)}
    answer, wrong = _clear_pair(runs["clean"], runs["corrupted"])
    z_clean, z_corr = runs["clean"].z[layer], runs["corrupted"].z[layer]
    patched = run_by_hand(hm, corrupted, replace={(layer, head): z_clean[:, :, head]})
    noised = run_by_hand(hm, clean, replace={(layer, head): z_corr[:, :, head]})
    every = run_by_hand(hm, corrupted, replace={(layer, h): z_clean[:, :, h] for h in range(hm.n_heads)})

    def recovery(run, at=-1, metric=last_logit_diff):
        c, k = (metric(runs[n], answer, wrong, at) for n in ("clean", "corrupted"))
        return ((metric(run, answer, wrong, at) - k) / (c - k)).numpy()

    def ratio(run, a, b, at):
        return run.logits[:, at, a] / run.logits[:, at, b]

    expected = recovery(patched)
    gap = (last_logit_diff(runs["clean"], answer, wrong) - last_logit_diff(runs["corrupted"], answer, wrong))
    mistakes = {
        "this is noising (the corrupted head's z put into the clean run); denoise: run the corrupted input "
        "with the head's z taken from the clean run": recovery(noised),
        "the recovery is not normalised: divide (patched - corrupted) by (clean - corrupted)":
            (last_logit_diff(patched, answer, wrong) - last_logit_diff(runs["corrupted"], answer, wrong)).numpy(),
        "the metric is a ratio of logits; use the difference logit(answer) - logit(wrong)":
            recovery(patched, metric=ratio),
        "the metric is read one position too early; read the logits at the last position (-1)":
            recovery(patched, at=-2),
        "every head of the layer was patched; patch only the given head's slice z[:, :, head]":
            recovery(every),
    }
    if float(gap.abs().min()) < 0.5:
        raise RuntimeError(f"{name}: the clean and corrupted runs are too alike for a check")
    case = Case(name, args=(hm, clean, corrupted, layer, head, answer, wrong), expected=expected, hint=hint,
                hidden=hidden)
    return case, mistakes


def check_patch_head(fn: Callable) -> None:
    """Check ``fn(hm, clean, corrupted, layer, head, answer, wrong)``: per input, the normalised
    logit-difference recovery when head ``(layer, head)``'s ``z`` from the clean run is patched into
    the corrupted run (denoising). Expected values come from a forward pass written out by hand
    (:mod:`deviating.exercises.by_hand`), not from the head interface."""
    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    small, deep = tiny_gpt(seed=1), tiny_gpt(seed=2, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    clean, corrupted = _pair(0, 40, 3, 8, changed=2)
    clean_b, corrupted_b = _pair(1, 40, 3, 9, changed=2)
    built = [
        _patch_case("a 2-layer model, head 1.2, three inputs that differ at position 2", small, clean, corrupted,
                    1, 2, hint="run the corrupted input with z[:, :, head] of this layer replaced by the clean run's "
                               "(hm.patch_z), then score logit(answer) - logit(wrong) at the last position."),
        _patch_case("the same inputs, head 0.1 (its effect also flows through layer 1)", small, clean, corrupted,
                    0, 1, hint="patch the head at every position; the later layers then run as they will."),
        _patch_case("3 layers with MLPs, 2 heads each, head 1.0", deep, clean_b, corrupted_b, 1, 0,
                    hint="one value per input: normalise each input by its own clean and corrupted metric."),
        _patch_case("3 layers with MLPs, head 2.1", deep, clean_b, corrupted_b, 2, 1, hidden=True),
    ]
    cases = [c for c, _ in built] + drawn(_drawn_patch_cases)
    run_cases(fn, cases, compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="activation patching of one head", forbid=_TOOLS)


def _drawn_model(rng: np.random.Generator):
    """A random tiny GPT of random depth, width and MLP (drawn when grading: :mod:`.drawn`)."""
    from deviating.exercises.by_hand import tiny_gpt

    n_layers, n_heads = int(rng.integers(2, 4)), int(rng.choice([2, 4]))
    d_model = n_heads * int(rng.integers(4, 9))
    return tiny_gpt(seed=int(rng.integers(2**31)), n_layers=n_layers, n_heads=n_heads, d_model=d_model,
                    d_mlp=int(rng.choice([0, 2 * d_model])))


def _drawn_patch_cases(rng: np.random.Generator) -> list[Case]:
    """Random models, inputs, changed positions and heads; the recovery from the run by hand. A draw
    whose two runs are too alike for a check is drawn again (the same way for every submission)."""
    cases = []
    while len(cases) < 2:
        hm = _drawn_model(rng)
        pos = int(rng.integers(6, 11))
        clean, corrupted = _pair(int(rng.integers(2**31)), 40, int(rng.integers(2, 5)), pos,
                                 changed=int(rng.integers(1, pos - 2)))
        layer, head = int(rng.integers(hm.n_layers)), int(rng.integers(hm.n_heads))
        try:
            case, _ = _patch_case(MARK + f": head {layer}.{head} of a random {hm.n_layers}-layer model", hm,
                                  clean, corrupted, layer, head)
        except RuntimeError:  # the runs are too alike: draw another
            continue
        cases.append(case)
    return cases


# ------------------------------------------------------------ direct logit attribution


def _dla_case(name, hm, ids, layer, head, token, hint="", hidden=False):
    """A case of head_dla, its expected value from the weights and a run by hand, and the usual mistakes."""
    import torch

    from deviating.exercises.by_hand import run_by_hand

    run = run_by_hand(hm, ids)
    model, d = hm.model, hm.d_head
    w_o = model.blocks[layer].attn.W_O.weight.detach().double()[:, head * d:(head + 1) * d].T  # (d_head, d_model)
    gamma, eps = model.ln_final.weight.detach().double(), model.config.ln_eps
    u = model.unembed.weight.detach().double()[token]  # (d_model,): the unembedding of `token`

    def dla(at=-1, centre=True, scale=True, with_gamma=True, bias=False, write=None):
        out = run.z[layer][:, at, head] @ w_o if write is None else write(at)  # (batch, d_model)
        if bias:
            out = out + model.blocks[layer].attn.W_O.bias.detach().double()
        final = run.resid[-1][:, at]
        sd = torch.sqrt(final.var(-1, unbiased=False) + eps)[:, None] if scale else 1.0
        out = (out - out.mean(-1, keepdim=True)) if centre else out
        return ((out / sd) @ (gamma * u if with_gamma else u)).numpy()

    mistakes = {
        "the final LayerNorm's scale is missing: divide by sqrt(var + eps) of the final residual stream "
        "of this run, at the same position": dla(scale=False),
        "the head's output is not centred: the LayerNorm subtracts each vector's mean over d_model first":
            dla(centre=False),
        "this is the whole residual stream's direct logit (every component), not the head's own write":
            dla(write=lambda at: run.resid[-1][:, at]),
        "the position is off: read the last position (-1)": dla(at=-2),
        "the LayerNorm's weight is missing: the logit reads gamma * x_normalised": dla(with_gamma=False),
        "W_O's bias is counted; it belongs to no head": dla(bias=True),
    }
    return Case(name, args=(hm, ids, layer, head, token), expected=dla(), hint=hint, hidden=hidden), mistakes


def check_head_dla(fn: Callable) -> None:
    """Check ``fn(hm, inputs, layer, head, token)``: per input, head ``(layer, head)``'s direct
    contribution to the logit of ``token`` at the last position, through the final LayerNorm with
    its scale frozen at the clean run's value. Expected values: from the weights and a run by hand."""
    import torch

    from deviating.exercises.by_hand import naming_compare, tiny_gpt

    small, deep = tiny_gpt(seed=3), tiny_gpt(seed=4, n_layers=3, n_heads=2, d_model=24, d_mlp=48)
    g = torch.Generator().manual_seed(5)
    ids, ids_b = torch.randint(40, (3, 7), generator=g), torch.randint(40, (2, 10), generator=g)
    built = [
        _dla_case("head 1.2 of a 2-layer model, token 7, three inputs", small, ids, 1, 2, 7,
                  hint="the head writes z[:, -1, head] @ W_O[head]; centre it, divide by the final LayerNorm's "
                       "scale on this run, then take the dot product with gamma * W_U[:, token]."),
        _dla_case("head 0.0 of the same model, token 31", small, ids, 0, 0, 31,
                  hint="an earlier layer's head writes into the same final stream: the same formula."),
        _dla_case("3 layers with MLPs, head 2.1, token 12", deep, ids_b, 2, 1, 12,
                  hint="the scale is the one of the final residual stream (after the MLPs too)."),
        _dla_case("3 layers with MLPs, head 1.0, token 3", deep, ids_b, 1, 0, 3, hidden=True),
    ]
    cases = [c for c, _ in built] + drawn(_drawn_dla_cases)
    run_cases(fn, cases, compare=naming_compare({id(c.expected): m for c, m in built}, atol=1e-4),
              what="direct logit attribution of one head", forbid=_TOOLS)


def _drawn_dla_cases(rng: np.random.Generator) -> list[Case]:
    """Random models, inputs, heads and tokens; the head's share from the weights and a run by hand."""
    import torch

    cases = []
    for _ in range(2):
        hm = _drawn_model(rng)
        ids = torch.as_tensor(rng.integers(40, size=(int(rng.integers(2, 5)), int(rng.integers(5, 12)))))
        layer, head, token = int(rng.integers(hm.n_layers)), int(rng.integers(hm.n_heads)), int(rng.integers(40))
        case, _ = _dla_case(MARK + f": head {layer}.{head}, token {token}", hm, ids, layer, head, token)
        cases.append(case)
    return cases
