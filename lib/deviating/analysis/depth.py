"""What one layer cannot do: the measurements behind "induction needs two layers" (chapter 5).

The attention-only organisms ``attn-only-1l`` and ``attn-only-2l`` (three training seeds each)
share a recipe and differ only in depth. On the same evaluation sequences:

* :func:`depth_lead` compares them on the held-out half of the inputs: the best head's
  induction lift (the head selected on the other half, :func:`headlab.stats.select_and_measure`)
  and the loss on the predictable (repeated) tokens;
* :func:`seen_token_guess` is the fair bar for a single layer: a guess spread uniformly over the
  distinct tokens seen so far, which needs no induction at all;
* :func:`repeat_metrics` and :func:`pair_interaction` measure whether removing two heads costs
  more than the sum of removing each (claim C11), on the repeated tokens, per input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from headlab import stats
from headlab.analysis.effects import group_effects
from headlab.roles.induction import induction_lifts
from headlab.heads.ablation import Ablation
from headlab.heads.head import Head
from headlab.metrics import next_token_loss

__all__ = ["seen_token_guess", "repeat_loss", "depth_lead", "repeat_metrics", "pair_interaction",
           "top_previous_token_heads"]


def seen_token_guess(tokens: torch.Tensor, predictable: torch.Tensor) -> torch.Tensor:
    """Per input, the loss (nats) of guessing uniformly among the distinct tokens seen so far.

    Args:
        tokens: ``(batch, pos)``; position 0 (``<bos>``) is not counted as a seen token.
        predictable: ``(batch, pos)`` bool, position ``t`` counts when it predicts ``t + 1``.

    Returns:
        ``(batch,)``: the mean over counted positions ``t`` of ``ln(#distinct tokens in 1..t)``.
    """
    if tokens.shape != predictable.shape:
        raise ValueError(f"tokens {tuple(tokens.shape)} and predictable {tuple(predictable.shape)} differ in shape")
    if not bool(predictable.any(dim=1).all()):
        raise ValueError("every input needs at least one predictable position")
    distinct = torch.tensor([[len(set(row[1:t + 1])) for t in range(len(row))] for row in tokens.tolist()])
    log_n = distinct.clamp(min=1).double().log()
    mask = predictable.double()
    return (log_n * mask).sum(1) / mask.sum(1)


def repeat_loss(hm, tokens: torch.Tensor, predictable: torch.Tensor) -> torch.Tensor:
    """Per input, the next-token loss (nats) over the positions ``predictable`` marks."""
    batch = {"input_ids": tokens, "attention_mask": torch.ones_like(tokens)}
    with torch.no_grad():
        logits = hm.forward(batch)
    return next_token_loss(logits, tokens, batch["attention_mask"], predictable).double()


def depth_lead(one, two, tokens: torch.Tensor, predictable: torch.Tensor, *, seed: int = 0,
               n_resamples: int = 2000) -> dict:
    """The two-layer model's lead over the one-layer model on the same inputs, held out.

    Each model's best induction head is chosen on one half of the inputs (its mean lift over
    uniform attention) and both are measured on the other half.

    Returns:
        ``{"lift": Estimate, "loss": Estimate, "one_head", "two_head", "one_lift", "two_lift",
        "one_loss", "two_loss", "split"}``: the leads (two minus one for the lift, one minus two
        for the loss on repeats, so that positive means "two layers do better"), paired over the
        held-out inputs, and each model's own held-out numbers.
    """
    n = tokens.shape[0]
    split = stats.split_items(n, seed=seed)
    lifts = {}
    for name, hm in (("one", one), ("two", two)):
        _, lift = induction_lifts(hm, tokens)
        lifts[name] = (lift.flatten(1).T.numpy(), hm.n_heads)  # (heads, items)
    chosen = {}
    for name, (values, n_heads) in lifts.items():
        pick = stats.select_and_measure(values, split, n_resamples=n_resamples, seed=seed)
        chosen[name] = (Head(*divmod(pick.candidate, n_heads)), values[pick.candidate], pick.measured)
    lead = stats.paired_difference(chosen["two"][1][split.measure], chosen["one"][1][split.measure],
                                   n_resamples=n_resamples, seed=seed)
    loss_one = repeat_loss(one, tokens, predictable).numpy()
    loss_two = repeat_loss(two, tokens, predictable).numpy()
    loss = stats.paired_difference(loss_one[split.measure], loss_two[split.measure], n_resamples=n_resamples,
                                   seed=seed)
    return {"lift": lead, "loss": loss, "one_head": chosen["one"][0], "two_head": chosen["two"][0],
            "one_lift": chosen["one"][2], "two_lift": chosen["two"][2],
            "one_loss": stats.bootstrap_mean(loss_one[split.measure], n_resamples=n_resamples, seed=seed),
            "two_loss": stats.bootstrap_mean(loss_two[split.measure], n_resamples=n_resamples, seed=seed),
            "split": split}


def repeat_metrics(predictable: torch.Tensor) -> dict:
    """Two harms measured on the repeated tokens only, for :func:`headlab.analysis.effects.group_effects`:
    ``"loss"`` (the increase of the next-token loss, nats) and ``"divergence"`` (the mean
    ``KL(p_clean || p_ablated)``, nats, over the same positions)."""
    def loss(output, clean, batch):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        return (next_token_loss(output, ids, mask, predictable).double()
                - next_token_loss(clean, ids, mask, predictable).double())

    def divergence(output, clean, batch):
        logp = F.log_softmax(output[:, :-1].double(), dim=-1)
        logq = F.log_softmax(clean[:, :-1].double(), dim=-1)
        kl = (logq.exp() * (logq - logp)).sum(-1)
        m = predictable[:, :-1].double()
        return (kl * m).sum(-1) / m.sum(-1).clamp(min=1)

    return {"loss": loss, "divergence": divergence}


def pair_interaction(hm, tokens: torch.Tensor, predictable: torch.Tensor, a: Head, b: Head, *,
                     ablation: Ablation | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """Per input, the effects of removing ``a``, ``b`` and both, and the interaction
    ``effect(a+b) - effect(a) - effect(b)`` (positive: single ablations underestimate the pair),
    under both :func:`repeat_metrics`.

    Returns:
        metric -> ``{"a", "b", "both", "interaction"}``, each ``(n_inputs,)`` float64.
    """
    batch = {"input_ids": tokens, "attention_mask": torch.ones_like(tokens)}
    ge = group_effects(hm, batch, repeat_metrics(predictable), groups=[[a], [b], [a, b]], ablation=ablation)
    out = {}
    for name, e in ge.effects.items():
        out[name] = {"a": e[0], "b": e[1], "both": e[2], "interaction": e[2] - e[0] - e[1]}
    return out


def top_previous_token_heads(hm, tokens: torch.Tensor, k: int = 2, layer: int = 0) -> list[Head]:
    """The ``k`` heads of ``layer`` with the highest mean previous-token score on ``tokens``, best
    first (ties broken by head index)."""
    from headlab.analysis.detect import previous_token_score

    with torch.no_grad():
        _, cache = hm.run_with_cache(tokens, names=("pattern",))
    score = previous_token_score(cache.pattern(layer).float()).mean(0).double()
    order = sorted(range(hm.n_heads), key=lambda h: (-round(float(score[h]), 6), h))
    return [Head(layer, h) for h in order[:k]]
