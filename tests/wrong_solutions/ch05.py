"""Wrong solutions students really write for the exercises of chapter 05."""

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


# --------------------------------------------------------------------------- ablation_drops


def _drops(hm, tokens, sign=1.0, transpose=False, relative=False, outside=False, first_only=False, mean=False):
    import torch

    def scores(ablate=None):
        how = Ablation("mean", reference=tokens) if mean else Ablation()
        context = hm.ablate([ablate], how) if ablate is not None else contextlib.nullcontext()
        with torch.no_grad(), context:
            out = hm.run_with_cache(tokens, names=("pattern",))
        _, cache = hm.run_with_cache(tokens, names=("pattern",)) if outside else out
        s = induction_score(cache.pattern(1), tokens)
        return s[0] if first_only else s.mean(0)

    clean = scores()
    rows = []
    for e in range(hm.n_heads):
        fall = clean - scores((0, e))
        rows.append(fall / clean if relative else sign * fall)
    out = torch.stack(rows).numpy()
    return out.T if transpose else out


def drops_sign(hm, tokens):
    """Ablated minus clean: a rise where the task asks for the fall."""
    return _drops(hm, tokens, sign=-1.0)


def drops_transposed(hm, tokens):
    """Rows are the layer-1 heads, columns the ablated layer-0 heads."""
    return _drops(hm, tokens, transpose=True)


def drops_relative(hm, tokens):
    """The share of the score lost, not the fall itself."""
    return _drops(hm, tokens, relative=True)


def drops_patterns_outside(hm, tokens):
    """The patterns captured after the ablation ended: every drop is 0."""
    return _drops(hm, tokens, outside=True)


def drops_mean_ablation(hm, tokens):
    """Mean ablation: 0.1's mean write is the same first token, so nothing changes without it."""
    return _drops(hm, tokens, mean=True)


# --------------------------------------------------------------------------- composition_grid


def _grid(earlier, later, kind, swap=False, no_transpose=False, v_reversed=False, transpose=False, norm=True):
    if swap and kind in "QK":
        kind = "K" if kind == "Q" else "Q"
    out = np.zeros((len(earlier), len(later)))
    for e, (_, _, W_Ve, W_Oe) in enumerate(earlier):
        ov_e = W_Ve @ W_Oe
        for l, (W_Q, W_K, W_V, W_O) in enumerate(later):
            qk_l, ov_l = W_Q @ W_K.T, W_V @ W_O
            A, B = {"Q": (ov_e, qk_l), "K": (qk_l, ov_e if no_transpose else ov_e.T),
                    "V": (ov_l, ov_e) if v_reversed else (ov_e, ov_l)}[kind]
            out[e, l] = np.linalg.norm(A @ B) / ((np.linalg.norm(A) * np.linalg.norm(B)) if norm else 1.0)
    return out.T if transpose else out


def grid_k_no_transpose(earlier, later, kind):
    return _grid(earlier, later, kind, no_transpose=True)


def grid_q_k_swapped(earlier, later, kind):
    return _grid(earlier, later, kind, swap=True)


def grid_transposed(earlier, later, kind):
    return _grid(earlier, later, kind, transpose=True)


def grid_unnormalised(earlier, later, kind):
    return _grid(earlier, later, kind, norm=False)


def grid_v_reversed(earlier, later, kind):
    return _grid(earlier, later, kind, v_reversed=True)


# --------------------------------------------------------------------------- seen_token_guess


def _guess(tokens, predictable, with_bos=False, ahead=0, every=False, pooled=False):
    tokens, predictable = np.asarray(tokens), np.asarray(predictable)
    per_row, everything = [], []
    for row, marked in zip(tokens, predictable):
        logs = []
        for t in range(len(row)):
            seen = set(row[0 if with_bos else 1:t + 1 + ahead].tolist())
            if marked[t] or (every and t > 0):
                logs.append(np.log(max(len(seen), 1)))
        per_row.append(np.mean(logs))
        everything += logs
    return np.full(len(tokens), np.mean(everything)) if pooled else np.array(per_row)


def guess_counts_bos(tokens, predictable):
    return _guess(tokens, predictable, with_bos=True)


def guess_counts_the_target(tokens, predictable):
    """Counts the token at t + 1 among those seen: the guess peeks at its answer."""
    return _guess(tokens, predictable, ahead=1)


def guess_every_position(tokens, predictable):
    return _guess(tokens, predictable, every=True)


def guess_pooled_over_the_batch(tokens, predictable):
    return _guess(tokens, predictable, pooled=True)


# --------------------------------------------------------------------------- find_jump


def _jump(rows, first_blip=False, of_max=False, indices=False, start_before_end=False):
    scores = [r["induction_best"] for r in rows]
    target = 0.9 * (max(scores) if of_max else scores[-1])
    if first_blip:
        start = min(k for k, s in enumerate(scores) if s >= 0.1) - 1
    else:
        start = max(k for k, s in enumerate(scores) if s < 0.1)
    end = min(k for k, s in enumerate(scores) if k > start and s >= target)
    if start_before_end:
        start = end - 1
    return (start, end) if indices else (rows[start]["step"], rows[end]["step"])


def jump_first_blip(rows):
    return _jump(rows, first_blip=True)


def jump_share_of_max(rows):
    return _jump(rows, of_max=True)


def jump_indices(rows):
    return _jump(rows, indices=True)


def jump_one_step_before(rows):
    return _jump(rows, start_before_end=True)


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
    "ex-05-ablation-drops": [drops_sign, drops_transposed, drops_relative, drops_patterns_outside,
                             drops_mean_ablation],
    "ex-05-composition-grid": [grid_k_no_transpose, grid_q_k_swapped, grid_transposed, grid_unnormalised,
                               grid_v_reversed],
    "ex-05-seen-token-guess": [guess_counts_bos, guess_counts_the_target, guess_every_position,
                               guess_pooled_over_the_batch],
    "ex-05-find-jump": [jump_first_blip, jump_share_of_max, jump_indices, jump_one_step_before],
}
