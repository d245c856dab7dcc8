"""Known-answer inputs that several chapters' checks share.

Each is built so that its right answer follows from the construction, never from
running a reference implementation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["planted_first_token_writer", "repeated_batch", "uniform_induction_score", "hand_pattern"]


def planted_first_token_writer(d_vocab: int = 16, n_ctx: int = 21):
    """The planted model of :mod:`deviating.planted`, with one change: head 0.1 (which attends
    to position 0) also *writes* what it reads, the first token, into the token block.

    So every query of the induction head 1.0 carries the first token too, and 1.0 splits its
    attention three ways: keys 0 and 1 (whose *previous token* is the first token) and the right
    key (its induction score is 1/3). Zero-ablating 0.1 removes that write (the score goes back to 1);
    mean-ablating 0.1 replaces it by its mean, the same first token (the score stays 1/3). Inputs must
    start with the same token, which must not recur.
    """
    import torch

    from deviating.planted import FIRST_TOKEN_HEAD, planted_model

    hm = planted_model(d_vocab=d_vocab, n_ctx=n_ctx)
    attn = hm.model.blocks[FIRST_TOKEN_HEAD[0]].attn
    d_head = hm.model.config.d_head
    cols = slice(FIRST_TOKEN_HEAD[1] * d_head, (FIRST_TOKEN_HEAD[1] + 1) * d_head)
    with torch.no_grad():
        attn.W_V.weight[cols][:d_vocab, :d_vocab] = torch.eye(d_vocab)  # read the key's token ...
        attn.W_O.weight[:, cols][:d_vocab, :d_vocab] = torch.eye(d_vocab)  # ... write it to the token block
    return hm


def repeated_batch(rows: list[tuple[int, int]], d_vocab: int = 16, seed: int = 0) -> np.ndarray:
    """Token ids ``(len(rows), n)``: row ``(n_distinct, n_repeat)`` is token 0, then ``n_distinct``
    distinct tokens of ``1 .. d_vocab - 1``, then the first ``n_repeat`` of them again. Every row must
    have the same length ``1 + n_distinct + n_repeat``."""
    rng = np.random.default_rng(seed)
    if any(not 0 < b <= a < d_vocab for a, b in rows):
        raise ValueError(f"each row (n_distinct, n_repeat) needs 0 < n_repeat <= n_distinct < d_vocab = {d_vocab}, "
                         f"got {rows}")
    lengths = {1 + a + b for a, b in rows}
    if len(lengths) != 1:
        raise ValueError(f"rows of different lengths {sorted(lengths)}: pad them instead")
    out = []
    for n_distinct, n_repeat in rows:
        span = rng.permutation(np.arange(1, d_vocab))[:n_distinct]
        out.append(np.concatenate([[0], span, span[:n_repeat]]))
    return np.array(out)


def uniform_induction_score(n_distinct: int, n_repeat: int) -> float:
    """The induction score of a head that attends uniformly (weight ``1/(i+1)`` on each key
    ``j <= i``) on a row of :func:`repeated_batch`: the eligible queries are the repeats,
    positions ``n_distinct + 1 .. n_distinct + n_repeat``."""
    first = n_distinct + 1
    return float(np.mean([1.0 / (i + 1) for i in range(first, first + n_repeat)]))


def hand_pattern(pos: int, targets: dict[int, dict[int, float]], causal: bool = True) -> np.ndarray:
    """A ``(pos, pos)`` attention pattern set entry by entry: row ``i`` puts ``targets[i][j]`` on
    key ``j`` where given and spreads the rest of its weight evenly over the other keys it may see
    (``j <= i`` when ``causal``, every key otherwise).

    Raises:
        ValueError: a row whose given weights leave nothing to spread but do not sum to 1, or a
            weight on a key the row may not see.
    """
    p = np.zeros((pos, pos))
    for i in range(pos):
        keys = list(range(i + 1)) if causal else list(range(pos))
        row = targets.get(i, {})
        unseen = [j for j in row if j not in keys]
        if unseen:
            raise ValueError(f"row {i} puts weight on key {unseen[0]}, which it may not see"
                             + (" (a causal row sees keys j <= i)" if causal else ""))
        rest = [j for j in keys if j not in row]
        for j, w in row.items():
            p[i, j] = w
        left = 1.0 - sum(row.values())
        if rest:
            p[i, rest] = left / len(rest)
        elif abs(left) > 1e-12:
            raise ValueError(f"row {i}'s weights sum to {1 - left:g}, not 1, and no key is left to take the rest")
    return p
