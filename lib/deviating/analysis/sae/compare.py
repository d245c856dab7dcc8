"""Heads beside SAE features: two bases for the same layer output, compared.

A layer's concatenated head outputs ``z`` can be read in the head basis
(``n_heads`` slices) or in the basis of a sparse autoencoder's features
(:mod:`deviating.analysis.sae.model`). This module measures both the same way:

* **sparsity**: how many units carry most of a token's write into the residual
  stream (:func:`units_for_mass` over :func:`head_write_norms` or feature
  activations times :func:`feature_write_norms`);
* **stability**: whether SAEs trained with different seeds find the same
  directions (:func:`match_features`);
* **alignment with ground truth**: how well the best single unit predicts a label
  of the synthetic language (:func:`token_labels`, :func:`auroc`), and which
  part of speech a feature's activation falls on (:func:`label_purity`);
* **polysemantic heads**, by the criterion of :func:`polysemantic_heads`.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from headlab.heads.model import HeadModel
from deviating.analysis.sae.model import SparseAutoencoder

__all__ = [
    "language_windows", "head_write_norms", "feature_write_norms", "units_for_mass", "write_explained_by_top",
    "match_features", "auroc", "auroc_table", "token_labels", "POS_CLASSES", "POS_NAMES", "label_purity", "head_ownership",
    "polysemantic_heads", "top_contexts",
]


def language_windows(lang, n_windows: int, n_ctx: int, seed: int):
    """``(windows, ids)``: ``n_windows`` full windows of ``n_ctx`` tokens of the synthetic
    language ``lang`` (documents sampled with ``seed``, packed with ``<bos>`` first) and their
    token ids ``(n_windows, n_ctx)``."""
    from deviating.data.language import encode, pack, tokenizer

    n_docs = n_windows * n_ctx // 30 + 8  # documents average about 42 tokens
    windows = pack(lang.sample(n_docs, seed=seed), n_ctx, drop_last=True)
    if len(windows) < n_windows:
        raise RuntimeError(f"{n_docs} documents gave {len(windows)} windows, fewer than {n_windows}")
    windows = windows[:n_windows]
    return windows, encode(tokenizer(lang), windows)


@torch.no_grad()
def head_write_norms(hm: HeadModel, layer: int, z: torch.Tensor) -> torch.Tensor:
    """``||z_h @ W_O^h||`` for every head of ``layer``: ``(..., n_heads * d_head) -> (..., n_heads)``,
    the size of each head's write into the residual stream (bias excluded)."""
    w = hm.W_O(layer).float().cpu()  # (head, d_head, d_model)
    z = z.reshape(*z.shape[:-1], hm.n_heads, hm.d_head).float()  # (..., head, d_head)
    return torch.einsum("...hd,hdm->...hm", z, w).norm(dim=-1)


@torch.no_grad()
def feature_write_norms(hm: HeadModel, layer: int, sae: SparseAutoencoder) -> torch.Tensor:
    """``(n_features,)``: the norm of the residual-stream write of one unit of each feature's
    activation, ``||scale * d_i @ W_O||``; feature ``i`` writes ``f_i`` times that."""
    w = hm.W_O(layer).float().cpu().reshape(hm.n_heads * hm.d_head, hm.d_model)
    return (sae.scale * sae.W_dec @ w).norm(dim=-1)


def units_for_mass(contributions: torch.Tensor, mass: float = 0.9) -> torch.Tensor:
    """Per token, the fewest units whose contributions add up to ``mass`` of the token's total.

    ``contributions``: ``(n_tokens, n_units)``, non-negative (e.g. head write norms, or
    feature activations times their write norms). Returns ``(n_tokens,)`` ints; a token
    whose contributions are all zero uses 0 units.
    """
    if not 0 < mass <= 1:
        raise ValueError(f"mass must lie in (0, 1], got {mass}")
    if contributions.dim() != 2 or (contributions < 0).any() or not torch.isfinite(contributions).all():
        raise ValueError("contributions must be a finite, non-negative (n_tokens, n_units) tensor")
    c = contributions.double().sort(dim=1, descending=True).values  # (n_tokens, n_units)
    cum = c.cumsum(1)
    target = mass * cum[:, -1:] * (1 - 1e-12)  # (n_tokens, 1), tolerance for rounding
    return ((cum < target).sum(1) + 1) * (cum[:, -1] > 0)


@torch.no_grad()
def write_explained_by_top(hm: HeadModel, layer: int, sae: SparseAutoencoder, z: torch.Tensor,
                           ms: Sequence[int]) -> dict[str, list[float]]:
    """How much of the layer's write each basis explains with only ``m`` units per token.

    ``z``: ``(n_tokens, n_heads * d_head)``. The write is ``w = z @ W_O`` (bias excluded).
    **Heads**: at each token keep the ``m`` heads with the largest write norm and replace the
    others by their mean over ``z`` (mean ablation). **Features**: keep the ``m`` features with
    the largest ``f_i * ||scale * d_i @ W_O||`` and decode them with ``b_dec`` (the SAE's
    constant term). Both with ``m = 0`` are constants. For each ``m`` in ``ms``: the explained
    variance of the write, ``1 - sum ||w - w_m||^2 / sum ||w - mean(w)||^2``.
    """
    W = hm.W_O(layer).float().cpu().reshape(hm.n_heads * hm.d_head, hm.d_model)
    z = z.float()
    write = z @ W  # (n_tokens, d_model)
    total = float((write - write.mean(0)).pow(2).sum())
    heads = z.reshape(len(z), hm.n_heads, hm.d_head)  # (n_tokens, head, d_head)
    mean = heads.mean(0)  # (head, d_head)
    head_rank = head_write_norms(hm, layer, z).argsort(dim=1, descending=True)  # (n_tokens, head)
    f = sae.encode(z)  # (n_tokens, n_features)
    feat_rank = (f * feature_write_norms(hm, layer, sae)).argsort(dim=1, descending=True)
    out: dict[str, list[float]] = {"m": list(ms), "heads": [], "features": []}
    for m in ms:
        keep = torch.zeros(len(z), hm.n_heads, dtype=torch.bool).scatter(1, head_rank[:, :m], True)
        kept = torch.where(keep[..., None], heads, mean)  # (n_tokens, head, d_head)
        out["heads"].append(1 - float((write - kept.reshape(len(z), -1) @ W).pow(2).sum()) / total)
        top = torch.zeros_like(f, dtype=torch.bool).scatter(1, feat_rank[:, :m], True)
        approx = sae.decode(f * top) @ W  # (n_tokens, d_model)
        out["features"].append(1 - float((write - approx).pow(2).sum()) / total)
    return out


def match_features(dec_a: torch.Tensor, dec_b: torch.Tensor) -> torch.Tensor:
    """For each direction (row) of ``dec_a``, its largest cosine similarity with a row of ``dec_b``.

    ``(n_a, d)``, ``(n_b, d)`` -> ``(n_a,)``. Two SAEs found the same feature when the
    match is near 1; random directions in ``d`` dimensions match at about ``sqrt(2 ln n_b / d)``.
    """
    if dec_a.dim() != 2 or dec_b.dim() != 2 or dec_a.shape[1] != dec_b.shape[1]:
        raise ValueError(f"need two (n, d) matrices with the same d, got {tuple(dec_a.shape)} and {tuple(dec_b.shape)}")
    a = dec_a / dec_a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    b = dec_b / dec_b.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (a @ b.T).max(dim=1).values


def _midranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of each column of ``x`` ``(n, units)``, ties sharing the mean of their ranks."""
    n = x.shape[0]
    values, order = x.double().sort(dim=0)  # (n, units)
    index = torch.arange(n, dtype=torch.float64)[:, None].expand_as(values)
    new = torch.ones_like(values, dtype=torch.bool)
    new[1:] = values[1:] != values[:-1]  # first member of a tie group
    last = torch.ones_like(new)
    last[:-1] = new[1:]  # last member of a tie group
    start = torch.where(new, index, torch.zeros_like(index)).cummax(dim=0).values
    stop = torch.where(last, index, torch.full_like(index, n)).flip(0).cummin(dim=0).values.flip(0)
    ranks = torch.empty_like(values)
    ranks.scatter_(0, order, (start + stop) / 2 + 1)
    return ranks


def auroc(scores: torch.Tensor, positive: torch.Tensor, domain: torch.Tensor | None = None) -> torch.Tensor:
    """Area under the ROC curve of each unit's score for a binary label.

    ``scores``: ``(n_tokens, n_units)``; ``positive``: ``(n_tokens,)`` bool; ``domain``:
    optional ``(n_tokens,)`` bool, the tokens that count. AUROC = the probability that a
    random positive token scores higher than a random negative one (ties count one half):
    1 = the unit separates the label perfectly, 0.5 = chance. Returns ``(n_units,)``.
    """
    return auroc_table(scores, {"label": (positive, domain)})["label"]


def auroc_table(scores: torch.Tensor, labels: dict[str, tuple[torch.Tensor, torch.Tensor | None]]
                ) -> dict[str, torch.Tensor]:
    """:func:`auroc` of every unit for every label ``{name: (positive, domain)}`` (as returned by
    :func:`token_labels`); the ranks are computed once per distinct domain."""
    if scores.dim() != 2:
        raise ValueError(f"scores must be (n_tokens, n_units), got {tuple(scores.shape)}")
    ranks_by_domain: list[tuple[torch.Tensor | None, torch.Tensor]] = []
    out = {}
    for name, (positive, domain) in labels.items():
        if positive.shape != scores.shape[:1] or (domain is not None and domain.shape != positive.shape):
            raise ValueError(f"label {name!r}: need positive and domain of shape ({scores.shape[0]},), got "
                             f"{tuple(positive.shape)}")
        for known, ranks in ranks_by_domain:
            if (known is None and domain is None) or (known is not None and domain is not None
                                                      and torch.equal(known, domain)):
                break
        else:
            ranks = _midranks(scores if domain is None else scores[domain.bool()])
            ranks_by_domain.append((domain, ranks))
        pos = positive.bool() if domain is None else positive.bool()[domain.bool()]
        n_pos = int(pos.sum())
        n_neg = len(pos) - n_pos
        if n_pos == 0 or n_neg == 0:
            raise ValueError(f"label {name!r}: AUROC needs positive and negative tokens, got {n_pos} positive "
                             f"and {n_neg} negative")
        out[name] = ((ranks[pos].sum(0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).float()
    return out


POS_CLASSES = ("NOUN", "VERB", "PRON", "DET", "ADJ", "PREP", "REL", "ADV", "PUNCT", "SPECIAL")
POS_NAMES = {"NOUN": "noun", "VERB": "verb", "PRON": "pronoun", "DET": "determiner", "ADJ": "adjective",
             "PREP": "preposition", "REL": "'that'", "ADV": "adverb", "PUNCT": "punctuation",
             "SPECIAL": "<bos>/<eos>"}


def token_labels(windows, lang) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Ground-truth labels of every token of equal-length windows of the synthetic language.

    Returns ``{name: (positive, domain)}``, both ``(n_windows * n_ctx,)`` bool (windows
    flattened in order); a label is scored only on its ``domain`` tokens.

    * one label per part of speech of the token (``POS_CLASSES``, named by ``POS_NAMES``),
      and ``sentence end`` (the final ".");
    * ``rare word`` (:meth:`Language.is_rare`), ``in a repeated sentence`` (``copy_source``);
    * ``subject noun`` (a noun that is the subject of a verb in the window);
    * ``verb, subject in view`` (a verb whose subject is in the window);
    * ``before an agreeing verb``: the next token is a verb that agrees with a subject in
      the window (where a model must find the subject to predict the verb's form);
    * ``plural subject pending``: among the tokens before an agreeing verb, those whose
      verb is plural (domain: tokens before an agreeing verb);
    * ``before a pronoun``: the next token is a pronoun whose antecedent is in the window.
    """
    n_ctx = len(windows[0])
    if any(len(w) != n_ctx for w in windows):
        raise ValueError("token_labels needs windows of one length (pack them)")

    def flat(fn) -> torch.Tensor:
        return torch.tensor([bool(fn(w, i)) for w in windows for i in range(n_ctx)])

    def agreeing_verb(w, j: int) -> bool:
        return j < n_ctx and w.pos_tag[j] == "VERB" and w.number[j] is not None and w.subject[j] >= 0

    everywhere = torch.ones(len(windows) * n_ctx, dtype=torch.bool)
    labels = {POS_NAMES[tag]: flat(lambda w, i, t=tag: w.pos_tag[i] == t) for tag in POS_CLASSES}
    labels["sentence end"] = flat(lambda w, i: w.is_sentence_end[i])
    labels["rare word"] = flat(lambda w, i: w.pos_tag[i] != "SPECIAL" and lang.is_rare(w.tokens[i]))
    labels["in a repeated sentence"] = flat(lambda w, i: w.copy_source[i] >= 0)
    labels["subject noun"] = flat(lambda w, i: w.pos_tag[i] == "NOUN" and i in set(w.subject))
    labels["verb, subject in view"] = flat(lambda w, i: w.pos_tag[i] == "VERB" and w.subject[i] >= 0)
    before_verb = flat(lambda w, i: agreeing_verb(w, i + 1))
    labels["before an agreeing verb"] = before_verb
    labels["before a pronoun"] = flat(lambda w, i: i + 1 < n_ctx and w.pos_tag[i + 1] == "PRON"
                                      and w.antecedent[i + 1] >= 0)
    out = {name: (positive, everywhere) for name, positive in labels.items()}
    out["plural subject pending"] = (flat(lambda w, i: agreeing_verb(w, i + 1) and w.number[i + 1] == "pl"),
                                     before_verb)
    return out


def label_purity(activations: torch.Tensor, classes: torch.Tensor, n_classes: int) -> torch.Tensor:
    """For each unit, the share of its activation mass on each class of tokens.

    ``activations``: ``(n_tokens, n_units)`` non-negative; ``classes``: ``(n_tokens,)``
    ints in ``[0, n_classes)`` (one class per token, e.g. its part of speech). Returns
    ``(n_units, n_classes)``; a row sums to 1 (a unit that never fires: a row of NaN).
    """
    if activations.dim() != 2 or classes.shape != activations.shape[:1]:
        raise ValueError("need activations (n_tokens, n_units) and classes (n_tokens,)")
    onehot = torch.nn.functional.one_hot(classes.long(), n_classes).to(activations.dtype)  # (n_tokens, n_classes)
    mass = activations.T @ onehot  # (n_units, n_classes)
    return mass / mass.sum(1, keepdim=True)


def head_ownership(W_dec: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Share of each decoder direction's squared norm that lies in each head's slice of ``z``.

    ``W_dec``: ``(n_features, n_heads * d_head)`` -> ``(n_features, n_heads)``, rows summing to 1.
    """
    n_features, d_in = W_dec.shape
    if d_in % n_heads:
        raise ValueError(f"d_in={d_in} is not a multiple of n_heads={n_heads}")
    sq = W_dec.detach().reshape(n_features, n_heads, d_in // n_heads).pow(2).sum(-1)  # (n_features, head)
    return sq / sq.sum(1, keepdim=True)


def polysemantic_heads(ownership: torch.Tensor, purity: torch.Tensor, class_names, own: float = 0.5,
                       pure: float = 0.8) -> list[dict[str, Any]]:
    """The book's criterion for a polysemantic head.

    A feature *belongs* to head ``h`` when at least ``own`` of its decoder direction's
    squared norm lies in ``h``'s slice (:func:`head_ownership`). A feature is *about*
    class ``c`` when at least ``pure`` of its activation mass falls on tokens of class
    ``c`` (:func:`label_purity`; features that never fire are about nothing). A head is
    **polysemantic** when the features that belong to it are about two or more different
    classes, **monosemantic** when about exactly one, **unlabelled** when about none.

    Returns one dict per head: ``head``, ``features`` (how many belong to it),
    ``labelled`` (how many of those are about a class), ``classes`` (sorted class names,
    with counts) and ``kind``.
    """
    if ownership.shape[0] != purity.shape[0]:
        raise ValueError("ownership and purity must have one row per feature")
    owner = ownership.argmax(1)
    owned = ownership.max(1).values >= own
    best = torch.nan_to_num(purity, nan=0.0).max(1)
    rows = []
    for h in range(ownership.shape[1]):
        mine = owned & (owner == h)
        about = mine & (best.values >= pure)
        counts: dict[str, int] = {}
        for c in best.indices[about].tolist():
            counts[class_names[c]] = counts.get(class_names[c], 0) + 1
        kind = "polysemantic" if len(counts) >= 2 else "monosemantic" if counts else "unlabelled"
        rows.append({"head": h, "features": int(mine.sum()), "labelled": int(about.sum()),
                     "classes": dict(sorted(counts.items(), key=lambda kv: -kv[1])), "kind": kind})
    return rows


def top_contexts(activation: torch.Tensor, windows, n: int = 5, before: int = 6, after: int = 2) -> list[str]:
    """The ``n`` tokens where a unit is most active, each as ``"value  context [token] next"``.

    ``activation``: ``(n_windows * n_ctx,)`` (tokens of ``windows`` flattened in order, like
    :func:`token_labels`); ``before``/``after``: tokens of context shown on each side.
    """
    n_ctx = len(windows[0])
    if activation.shape != (len(windows) * n_ctx,):
        raise ValueError(f"activation must have one value per token, shape ({len(windows) * n_ctx},), "
                         f"got {tuple(activation.shape)}")
    lines = []
    for t in activation.topk(min(n, len(activation))).indices.tolist():
        w, p = divmod(t, n_ctx)
        tokens = windows[w].tokens
        left, right = " ".join(tokens[max(0, p - before):p]), " ".join(tokens[p + 1:p + 1 + after])
        lines.append(f"{float(activation[t]):6.2f}  {left} [{tokens[p]}] {right}".rstrip())
    return lines
