"""Wrong solutions students really write for the exercises of chapter 04."""

from __future__ import annotations

import contextlib

import numpy as np

from headlab.analysis.detect import induction_score
from headlab.heads.ablation import Ablation


def _induction(pattern, tokens, earliest=False, gap=2, target_shift=1, all_queries=False):
    weights = []
    for i in range(len(tokens)):
        earlier = [j for j in range(i - gap + 1) if tokens[j] == tokens[i]]
        if earlier:
            j = earlier[0] if earliest else earlier[-1]
            weights.append(pattern[i, j + target_shift])
        elif all_queries:
            weights.append(0.0)
    return float(np.mean(weights))


def induction_first_occurrence(pattern, tokens):
    return _induction(pattern, tokens, earliest=True)


def induction_includes_previous(pattern, tokens):
    return _induction(pattern, tokens, gap=1)


def induction_all_positions(pattern, tokens):
    return _induction(pattern, tokens, all_queries=True)


def induction_the_token_itself(pattern, tokens):
    return _induction(pattern, tokens, target_shift=0)


def _prev_scores(patterns):
    return np.diagonal(patterns, offset=-1, axis1=-2, axis2=-1)


def prev_head_max(patterns):
    s = _prev_scores(patterns).max(axis=-1)
    return tuple(int(x) for x in np.unravel_index(np.argmax(s), s.shape))


def prev_head_first_layer(patterns):
    return 0, int(_prev_scores(patterns)[0].mean(axis=-1).argmax())


def prev_head_swapped(patterns):
    s = _prev_scores(patterns).mean(axis=-1)
    layer, head = np.unravel_index(np.argmax(s), s.shape)
    return int(head), int(layer)


def prev_head_diagonal(patterns):
    s = np.diagonal(patterns, axis1=-2, axis2=-1).mean(axis=-1)
    return tuple(int(x) for x in np.unravel_index(np.argmax(s), s.shape))


def _composition(W_QK, W_OV, norm=None):
    return float(np.linalg.norm(W_QK @ W_OV, norm) / (np.linalg.norm(W_QK, norm) * np.linalg.norm(W_OV, norm)))


def k_comp_q_composition(W_Q, W_K, W_V, W_O):
    return _composition((W_V @ W_O).T, (W_Q @ W_K.T).T)  # W_OV W_QK: the query side


def k_comp_no_transpose(W_Q, W_K, W_V, W_O):
    return _composition(W_Q @ W_K.T, W_V @ W_O)


def k_comp_spectral(W_Q, W_K, W_V, W_O):
    return _composition(W_Q @ W_K.T, (W_V @ W_O).T, norm=2)


def k_comp_unnormalised(W_Q, W_K, W_V, W_O):
    return float(np.linalg.norm(W_Q @ W_K.T @ (W_V @ W_O).T))


def _after(hm, tokens, ablated, head, mode="zero", first_only=False, outside=False, whole_layer=False,
           pooled=False):
    if whole_layer and ablated:
        ablated = [(layer, h) for layer in {l for l, _ in ablated} for h in range(hm.n_heads)]
    how = Ablation("mean", reference=tokens) if mode == "mean" else Ablation()
    context = hm.ablate(ablated, how) if ablated else contextlib.nullcontext()
    with context:
        out = hm.run_with_cache(tokens)
    _, cache = (hm.run_with_cache(tokens) if outside else out)
    layer, h = head
    if pooled:  # one mean over every eligible query of the batch
        pattern = cache.pattern(layer)[:, h]
        weights = [float(pattern[b, i, j + 1]) for b, row in enumerate(tokens.tolist())
                   for i in range(len(row)) for j in [max((k for k in range(i - 1) if row[k] == row[i]), default=None)]
                   if j is not None]
        return float(np.mean(weights))
    scores = induction_score(cache.pattern(layer), cache.input_ids)
    return float(scores[0, h] if first_only else scores[:, h].mean())


def after_mean_ablation(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, mode="mean")


def after_first_input(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, first_only=True)


def after_patterns_outside(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, outside=True)


def after_whole_layer(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, whole_layer=True)


def after_pooled_queries(hm, tokens, ablated, head):
    return _after(hm, tokens, ablated, head, pooled=True)


# --------------------------------------------------------------------------- patch_head


def _logits_with(hm, base, source, layer, heads):
    """Logits of ``base`` with the given heads' z of ``layer`` taken from a run on ``source``."""
    import torch

    _, cache = hm.run_with_cache(source, names=("z",), layers=[layer])
    other = cache.z(layer)

    def put(l, z):
        z = z.clone()
        z[:, :, heads] = other[:, :, heads]
        return z

    with torch.no_grad(), hm.patch_z(put, layers=[layer]):
        return hm(base)


def _three_runs(hm, clean, corrupted):
    import torch

    with torch.no_grad():
        return hm(clean), hm(corrupted)


def patch_noising(hm, clean, corrupted, layer, head, answer, wrong):
    """Puts the corrupted head into the clean run (noising), normalised as if it were denoising."""
    c, k = _three_runs(hm, clean, corrupted)
    p = _logits_with(hm, clean, corrupted, layer, [head])
    d = [o[:, -1, answer] - o[:, -1, wrong] for o in (c, k, p)]
    return ((d[2] - d[1]) / (d[0] - d[1])).numpy()


def patch_unnormalised(hm, clean, corrupted, layer, head, answer, wrong):
    """Returns how much the logit difference moved, without dividing by clean - corrupted."""
    _, k = _three_runs(hm, clean, corrupted)
    p = _logits_with(hm, corrupted, clean, layer, [head])
    return ((p[:, -1, answer] - p[:, -1, wrong]) - (k[:, -1, answer] - k[:, -1, wrong])).numpy()


def patch_logit_ratio(hm, clean, corrupted, layer, head, answer, wrong):
    """Scores each run by logit(answer) / logit(wrong) instead of their difference."""
    c, k = _three_runs(hm, clean, corrupted)
    p = _logits_with(hm, corrupted, clean, layer, [head])
    d = [o[:, -1, answer] / o[:, -1, wrong] for o in (c, k, p)]
    return ((d[2] - d[1]) / (d[0] - d[1])).numpy()


def patch_second_to_last(hm, clean, corrupted, layer, head, answer, wrong):
    """Reads the metric at position -2: one position off."""
    c, k = _three_runs(hm, clean, corrupted)
    p = _logits_with(hm, corrupted, clean, layer, [head])
    d = [o[:, -2, answer] - o[:, -2, wrong] for o in (c, k, p)]
    return ((d[2] - d[1]) / (d[0] - d[1])).numpy()


def patch_whole_layer(hm, clean, corrupted, layer, head, answer, wrong):
    """Patches every head of the layer (the layer's whole z), not the one head."""
    c, k = _three_runs(hm, clean, corrupted)
    p = _logits_with(hm, corrupted, clean, layer, list(range(hm.n_heads)))
    d = [o[:, -1, answer] - o[:, -1, wrong] for o in (c, k, p)]
    return ((d[2] - d[1]) / (d[0] - d[1])).numpy()


# --------------------------------------------------------------------------- head_dla


def _dla(hm, inputs, layer, head, token, at=-1, centre=True, scale=True, gamma=True, bias=False, stream=False):
    import torch

    model = hm.model
    with torch.no_grad(), hm.outputs_of(model.blocks[-1]) as seen:
        _, cache = hm.run_with_cache(inputs, names=("z",), layers=[layer])
    final = seen[0][:, at]
    write = final if stream else cache.z(layer)[:, at, head] @ hm.W_O(layer)[head]
    if bias:
        write = write + hm.b_O(layer)
    if centre:
        write = write - write.mean(-1, keepdim=True)
    if scale:
        write = write / torch.sqrt(final.var(-1, unbiased=False) + model.ln_final.eps)[:, None]
    u = model.unembed.weight[token] * (model.ln_final.weight if gamma else 1.0)
    return (write @ u).detach().numpy()


def dla_no_scale(hm, inputs, layer, head, token):
    """Forgets to divide by the final LayerNorm's scale."""
    return _dla(hm, inputs, layer, head, token, scale=False)


def dla_not_centred(hm, inputs, layer, head, token):
    """Divides by the scale but does not subtract the mean over d_model."""
    return _dla(hm, inputs, layer, head, token, centre=False)


def dla_whole_residual(hm, inputs, layer, head, token):
    """Attributes the whole final residual stream, not the head's own write."""
    return _dla(hm, inputs, layer, head, token, stream=True)


def dla_wrong_position(hm, inputs, layer, head, token):
    """Reads the head's write at position -2."""
    return _dla(hm, inputs, layer, head, token, at=-2)


def dla_no_gamma(hm, inputs, layer, head, token):
    """Dots with the bare unembedding column, without the LayerNorm's weight."""
    return _dla(hm, inputs, layer, head, token, gamma=False)


def dla_with_bias(hm, inputs, layer, head, token):
    """Adds W_O's bias to the head's write."""
    return _dla(hm, inputs, layer, head, token, bias=True)


CATALOGUE: dict[str, list] = {
    "ex-05-induction-score": [induction_first_occurrence, induction_includes_previous, induction_all_positions,
                              induction_the_token_itself],
    "ex-05-previous-token-head": [prev_head_max, prev_head_first_layer, prev_head_swapped, prev_head_diagonal],
    "ex-05-k-composition": [k_comp_q_composition, k_comp_no_transpose, k_comp_spectral, k_comp_unnormalised],
    "ex-05-ablated-induction": [after_mean_ablation, after_first_input, after_patterns_outside, after_whole_layer,
                                after_pooled_queries],
    "ex-05-patch-head": [patch_noising, patch_unnormalised, patch_logit_ratio, patch_second_to_last,
                         patch_whole_layer],
    "ex-05-head-dla": [dla_no_scale, dla_not_centred, dla_whole_residual, dla_wrong_position, dla_no_gamma,
                       dla_with_bias],
}
