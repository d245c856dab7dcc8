"""Adversarial triggers: a few tokens that hijack a head and flip a prediction.

**The attack.** A :class:`Target` is one prediction of a causal LM: at position ``query`` of
``ids`` the ``correct`` token should beat its ``competitors`` (a list of token ids, or every
other token). Its *margin* is ``logit(correct) - max logit(competitor)``; the prediction is
right while the margin is positive. The attacker may rewrite only the token positions in
``slots`` (e.g. the three tokens right before the sentence that holds the query). The attack
succeeds when the margin becomes negative.

:func:`trigger_search` is a greedy, gradient-guided token substitution (HotFlip; the
single-coordinate form of GCG): at each step it takes the gradient of the margin with
respect to the token embeddings at the slots, scores every token of the vocabulary by the
first-order change ``(E[v] - E[current]) . grad`` it would make, evaluates the ``top_k`` best
substitutions of every slot exactly, and keeps the best one if it lowers the margin. It stops
when the margin is negative, when no substitution lowers it, or after ``n_steps``.
:func:`random_triggers` is the control: random tokens at the same slots, drawn ``n_draws``
times (a single draw is noise; the best of as many draws as the search evaluated is a
random search with the same budget).

**The defence** (can an inspector of the attention see the trigger?) is in
:mod:`deviating.analysis.inspection`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from headlab.heads.model import HeadModel

__all__ = [
    "Target", "AttackResult", "margins", "trigger_search", "random_triggers", "embedding_module",
    "agreement_targets", "copy_targets", "slots_before_sentence",
]


# ------------------------------------------------------------------------------ targets


@dataclass(frozen=True)
class Target:
    """One prediction to attack.

    Attributes:
        ids: ``(pos,)`` token ids (only positions ``<= query`` matter to a causal model).
        query: the position whose next-token logits make the prediction.
        correct: the token id that should win.
        competitors: token ids it must beat, or ``None`` for every other token.
        slots: the positions the attacker may rewrite (all ``< query`` and ``> 0``).
        label: free text (e.g. the construction).
    """

    ids: torch.Tensor
    query: int
    correct: int
    competitors: tuple[int, ...] | None
    slots: tuple[int, ...]
    label: str = ""

    def __post_init__(self) -> None:
        if self.ids.dim() != 1:
            raise ValueError(f"Target.ids must be one sequence (pos,), got shape {tuple(self.ids.shape)}")
        if not 0 <= self.query < len(self.ids):
            raise ValueError(f"query {self.query} is outside a sequence of {len(self.ids)} tokens")
        if not self.slots:
            raise ValueError("a target needs at least one slot the attacker may rewrite")
        bad = [s for s in self.slots if not 0 < s < self.query]
        if bad:
            raise ValueError(f"slots {bad} must lie strictly between position 0 and the query {self.query}: "
                             "a trigger that rewrites the query token or <bos> is not a context trigger")
        if self.competitors is not None and (not self.competitors or self.correct in self.competitors):
            raise ValueError("competitors must be non-empty and must not contain the correct token")


def _stack(targets: Sequence[Target]) -> dict[str, torch.Tensor]:
    """The targets as tensors; sequences cut after the last query (later tokens cannot matter)."""
    if not targets:
        raise ValueError("no targets")
    length = max(t.query for t in targets) + 1
    if any(len(t.ids) < length for t in targets):
        raise ValueError("every target's sequence must reach the longest query; give full windows")
    width = max((len(t.competitors) for t in targets if t.competitors is not None), default=0)
    comps = torch.full((len(targets), max(width, 1)), -1, dtype=torch.long)
    everyone = torch.zeros(len(targets), dtype=torch.bool)
    for i, t in enumerate(targets):
        if t.competitors is None:
            everyone[i] = True
        else:
            comps[i, :len(t.competitors)] = torch.tensor(t.competitors)
    return {"ids": torch.stack([t.ids[:length] for t in targets]),
            "query": torch.tensor([t.query for t in targets]),
            "correct": torch.tensor([t.correct for t in targets]),
            "competitors": comps, "everyone": everyone}


def _margin_from_logits(logits: torch.Tensor, query, correct, competitors, everyone) -> torch.Tensor:
    """``(n,)`` margins from logits ``(n, pos, d_vocab)``."""
    rows = logits[torch.arange(len(query)), query].float()  # (n, d_vocab)
    right = rows.gather(1, correct[:, None])[:, 0]
    others_all = rows.scatter(1, correct[:, None], float("-inf")).max(dim=1).values
    listed = rows.gather(1, competitors.clamp_min(0)).masked_fill(competitors < 0, float("-inf")).max(dim=1).values
    return right - torch.where(everyone, others_all, listed)


def margins(hm: HeadModel, targets: Sequence[Target], ids: torch.Tensor | None = None,
            batch_size: int = 64) -> torch.Tensor:
    """``(n,)`` margin of every target, on its own ids or on ``ids`` ``(n, pos)`` (e.g. attacked)."""
    s = _stack(targets)
    ids = s["ids"] if ids is None else ids[:, :s["ids"].shape[1]]
    out = []
    with torch.no_grad():
        for start in range(0, len(ids), batch_size):
            sl = slice(start, start + batch_size)
            logits = hm.forward(ids[sl].to(hm.device))
            out.append(_margin_from_logits(logits, s["query"][sl].to(hm.device), s["correct"][sl].to(hm.device),
                                           s["competitors"][sl].to(hm.device), s["everyone"][sl].to(hm.device)).cpu())
    return torch.cat(out)


# ------------------------------------------------------------------------------- attack


@dataclass
class AttackResult:
    """What an attack did to each target.

    Attributes:
        ids: ``(n, pos)`` the attacked sequences (cut after the last query).
        clean_margin, margin: ``(n,)`` before and after.
        evaluations: ``(n,)`` how many candidate sequences were scored for each target.
        method: ``"search"``, ``"random"`` (best of the draws) or ``"random-single"``.
    """

    ids: torch.Tensor
    clean_margin: torch.Tensor
    margin: torch.Tensor
    evaluations: torch.Tensor
    method: str
    slots: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def success(self) -> torch.Tensor:
        """``(n,)`` bool: the prediction was right before and is wrong after."""
        return (self.clean_margin > 0) & (self.margin < 0)

    def success_rate(self) -> float:
        """Successes over the targets that were right before the attack."""
        right = self.clean_margin > 0
        if not bool(right.any()):
            raise ValueError("no target was predicted right before the attack: the success rate is undefined")
        return float(self.success.sum() / right.sum())

    def triggers(self) -> list[list[int]]:
        """The tokens written at each target's slots."""
        return [self.ids[i, list(s)].tolist() for i, s in enumerate(self.slots)]


def embedding_module(hm: HeadModel) -> torch.nn.Module:
    """The token-embedding module (``get_input_embeddings()`` of Hugging Face models, ``embed`` of
    the book's GPT)."""
    get = getattr(hm.model, "get_input_embeddings", None)
    module = get() if callable(get) else getattr(hm.model, "embed", None)
    if not isinstance(module, torch.nn.Embedding):
        raise NotImplementedError(f"{hm.name}: no token-embedding module found for gradient-guided search")
    return module


def _slot_gradients(hm: HeadModel, ids, s, slots: torch.Tensor) -> torch.Tensor:
    """``(n, n_slots, d_model)``: d margin / d token embedding at each slot."""
    module = embedding_module(hm)
    with torch.enable_grad(), hm.outputs_of(module) as embedded:
        logits = hm.forward(ids.to(hm.device))
        m = _margin_from_logits(logits, s["query"].to(hm.device), s["correct"].to(hm.device),
                                s["competitors"].to(hm.device), s["everyone"].to(hm.device))
        (grad,) = torch.autograd.grad(m.sum(), embedded[-1])  # (n, pos, d_model); no parameter .grad touched
    rows = torch.arange(len(ids))[:, None]
    return grad[rows, slots.to(grad.device)].cpu()  # (n, n_slots, d_model)


def _forbidden_mask(hm: HeadModel, d_vocab: int, forbidden: Sequence[int] | None) -> torch.Tensor:
    if forbidden is None:
        forbidden = sorted(set(getattr(hm.tokenizer, "all_special_ids", []) or []))
    mask = torch.zeros(d_vocab, dtype=torch.bool)
    mask[list(forbidden)] = True
    return mask


def _check_slots(targets: Sequence[Target]) -> torch.Tensor:
    widths = {len(t.slots) for t in targets}
    if len(widths) != 1:
        raise ValueError(f"every target needs the same number of slots, got {sorted(widths)}")
    return torch.tensor([list(t.slots) for t in targets])


def trigger_search(hm: HeadModel, targets: Sequence[Target], n_steps: int = 10, top_k: int = 8,
                   forbidden: Sequence[int] | None = None, batch_size: int = 64,
                   progress: bool = False) -> AttackResult:
    """Greedy gradient-guided substitution at the targets' slots (see the module docstring).

    ``forbidden``: token ids never written (default: the tokenizer's special tokens).
    Every target gets at most ``n_steps * n_slots * top_k`` evaluations.
    """
    if n_steps < 1 or top_k < 1:
        raise ValueError("n_steps and top_k must be >= 1")
    s = _stack(targets)
    slots = _check_slots(targets)
    W = embedding_module(hm).weight.detach().cpu().float()  # (d_vocab, d_model)
    banned = _forbidden_mask(hm, W.shape[0], forbidden)
    ids = s["ids"].clone()
    clean = margins(hm, targets, ids, batch_size)
    current = clean.clone()
    evaluations = torch.zeros(len(targets), dtype=torch.long)
    active = current > 0
    bar = None
    if progress:
        from headlab.progress import tqdm  # text lines on the website (HEADLAB_PROGRESS=text)
        bar = tqdm(total=n_steps, desc="trigger search")
    n_slots = slots.shape[1]
    for _ in range(n_steps):
        idx = active.nonzero().flatten()
        if len(idx) == 0:
            break
        sub = {k: v[idx] for k, v in s.items()}
        grads = []
        for start in range(0, len(idx), batch_size):
            part = slice(start, start + batch_size)
            grads.append(_slot_gradients(hm, ids[idx[part]], {k: v[part] for k, v in sub.items()}, slots[idx[part]]))
        grad = torch.cat(grads)  # (m, n_slots, d_model)
        now = ids[idx[:, None], slots[idx]]  # (m, n_slots) current tokens
        gain = torch.einsum("vd,msd->msv", W, grad) - torch.einsum("msd,msd->ms", W[now], grad)[..., None]
        gain[..., banned] = float("inf")  # we want the margin to fall: most negative first
        gain.scatter_(2, now[..., None], float("inf"))
        choice = gain.topk(top_k, dim=2, largest=False).indices  # (m, n_slots, top_k)
        # every single substitution: (m, n_slots * top_k) candidate sequences
        cand = ids[idx][:, None, :].repeat(1, n_slots * top_k, 1)  # (m, c, pos)
        slot_of = torch.arange(n_slots).repeat_interleave(top_k)  # (c,)
        cand[torch.arange(len(idx))[:, None], torch.arange(n_slots * top_k)[None, :],
             slots[idx][:, slot_of]] = choice.reshape(len(idx), -1)
        flat = cand.reshape(-1, cand.shape[-1])
        rep = [targets[int(i)] for i in idx for _ in range(n_slots * top_k)]
        scores = margins(hm, rep, flat, batch_size).reshape(len(idx), -1)  # (m, c)
        evaluations[idx] += scores.shape[1]
        best, where = scores.min(dim=1)
        better = best < current[idx]
        for j in better.nonzero().flatten().tolist():
            i = int(idx[j])
            ids[i] = cand[j, where[j]]
            current[i] = best[j]
        active[idx[~better]] = False  # stuck: no single substitution lowers the margin
        active &= current > 0
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    return AttackResult(ids, clean, current, evaluations, "search", [t.slots for t in targets])


def random_triggers(hm: HeadModel, targets: Sequence[Target], n_draws: int = 1, seed: int = 0,
                    forbidden: Sequence[int] | None = None, batch_size: int = 64) -> AttackResult:
    """The control: fill every slot with uniformly random allowed tokens, ``n_draws`` times per
    target, and keep the draw with the lowest margin (``n_draws=1``: one random trigger)."""
    if n_draws < 1:
        raise ValueError("n_draws must be >= 1")
    s = _stack(targets)
    slots = _check_slots(targets)
    d_vocab = embedding_module(hm).weight.shape[0]
    allowed = (~_forbidden_mask(hm, d_vocab, forbidden)).nonzero().flatten()
    gen = torch.Generator().manual_seed(seed)
    clean = margins(hm, targets, s["ids"], batch_size)
    n, n_slots = slots.shape
    draws = allowed[torch.randint(len(allowed), (n, n_draws, n_slots), generator=gen)]  # (n, draws, slots)
    cand = s["ids"][:, None, :].repeat(1, n_draws, 1)  # (n, draws, pos)
    cand[torch.arange(n)[:, None, None], torch.arange(n_draws)[None, :, None], slots[:, None, :]] = draws
    rep = [t for t in targets for _ in range(n_draws)]
    scores = margins(hm, rep, cand.reshape(n * n_draws, -1), batch_size).reshape(n, n_draws)
    best, where = scores.min(dim=1)
    ids = cand[torch.arange(n), where]
    return AttackResult(ids, clean, best, torch.full((n,), n_draws), "random" if n_draws > 1 else "random-single",
                        [t.slots for t in targets])


# ------------------------------------------------------------ targets from the language


def slots_before_sentence(window, pos: int, k: int) -> tuple[int, ...] | None:
    """The ``k`` positions right before the sentence that holds ``pos`` in a ``Document`` (a packed
    window), *keeping* the punctuation that ends the previous sentence: the trigger rewrites the
    end of the previous sentence, not the boundary between the two (rewriting the boundary would
    merge the sentences and change what the grammar says, not hijack a head). ``None`` if the
    slots would reach position 0."""
    sentence = window.sentence[pos]
    start = pos
    while start > 0 and window.sentence[start - 1] == sentence:
        start -= 1
    end = start - 1 if start > 0 and window.is_sentence_end[start - 1] else start
    if end - k < 1:
        return None
    return tuple(range(end - k, end))


def agreement_targets(windows: Sequence, items: Sequence, tok, k: int = 3,
                      constructions: Sequence[str] = ("simple", "pp", "subj_rel", "obj_rel")) -> list[Target]:
    """Attack targets from agreement items: at the position before the verb, the verb form in the
    text against the same verb in the other number; slots: the ``k`` tokens before the sentence
    (the subject, its determiner and everything the verb agrees with stay untouched)."""
    vocab = tok.get_vocab()
    ids_cache: dict[int, torch.Tensor] = {}
    out = []
    for it in items:
        if it.construction not in constructions:
            continue
        w = windows[it.doc]
        slots = slots_before_sentence(w, it.pos, k)
        if slots is None or min(slots) <= 0:
            continue
        if it.doc not in ids_cache:
            ids_cache[it.doc] = torch.tensor([vocab[t] for t in w.tokens])
        out.append(Target(ids_cache[it.doc], it.pos, vocab[it.correct], (vocab[it.wrong],), slots,
                          f"{it.construction}{' attractor' if it.attractor else ''}"))
    return out


def copy_targets(windows: Sequence, items: Sequence, tok, k: int = 3, min_offset: int = 2) -> list[Target]:
    """Attack targets from copy items (inside a repeated sentence): the copied token must be the
    argmax; slots: the ``k`` tokens right before the repeated sentence, kept only when they do not
    touch the earlier occurrence the copy reads (its source and the token before it)."""
    vocab = tok.get_vocab()
    out = []
    for it in items:
        if it.offset < min_offset:
            continue
        w = windows[it.doc]
        slots = slots_before_sentence(w, it.pos, k)
        if slots is None or it.source_pos - 1 >= min(slots):
            continue
        ids = torch.tensor([vocab[t] for t in w.tokens])
        out.append(Target(ids, it.pos, vocab[it.target], None, slots, f"copy offset {it.offset}"))
    return out
