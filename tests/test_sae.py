"""Sparse autoencoders (deviating.analysis.sae.model) and the head-vs-feature comparisons (deviating.analysis.sae.compare).

The SAE is tested on data built from a known sparse dictionary: every input is a
sum of k of 32 ground-truth directions, so a working SAE must find those
directions. The comparisons are tested on inputs whose answers are known by
construction.
"""

from __future__ import annotations

import math

import pytest
import torch

from headlab.heads.model import HeadModel
from headlab.models.gpt import GPT, GPTConfig
from deviating.analysis.sae.model import (
    SAEConfig, SparseAutoencoder, evaluate_sae, fraction_loss_recovered, load_sae, loss_recovered,
    save_sae, spliced, topk_relu,
)
from deviating.training.sae import resample_dead, train_sae
from deviating.analysis.sae.compare import (
    auroc, auroc_table, feature_write_norms, head_ownership, head_write_norms, label_purity, match_features,
    POS_CLASSES, POS_NAMES, polysemantic_heads, token_labels, units_for_mass, write_explained_by_top,
)

D_IN, N_TRUE, K_TRUE = 16, 32, 2


@pytest.fixture(scope="module")
def dictionary_data():
    """(directions (32, 16), inputs (6000, 16)): each input = sum of 2 random directions
    with coefficients uniform in [0.5, 1.5]."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    directions = torch.randn(N_TRUE, D_IN, generator=g)
    directions /= directions.norm(dim=1, keepdim=True)
    n = 6000
    which = torch.rand(n, N_TRUE, generator=g).argsort(1)[:, :K_TRUE]  # (n, k) distinct directions
    coef = torch.zeros(n, N_TRUE).scatter(1, which, 0.5 + torch.rand(n, K_TRUE, generator=g))
    return directions, coef @ directions


@pytest.fixture(scope="module")
def trained_topk(dictionary_data):
    _, x = dictionary_data
    return train_sae(x, SAEConfig(D_IN, 64, "topk", k=K_TRUE), seed=0, steps=700, batch_size=256, lr=3e-3,
                     resample_every=150, progress=False)


# ------------------------------------------------------------------------------ the autoencoder


def test_topk_sae_recovers_the_dictionary(dictionary_data, trained_topk):
    directions, x = dictionary_data
    sae, log = trained_topk
    best = match_features(directions, sae.W_dec.detach())  # (32,) best cosine of each true direction
    assert (best > 0.9).float().mean() >= 0.9, f"recovered only {(best > 0.9).sum()} of {N_TRUE}"
    stats = evaluate_sae(sae, x)
    assert stats["explained_variance"] > 0.9
    # top-k: never more than k active, and here (all top-k pre-activations positive) almost always exactly k
    f = sae.encode(x)
    assert int((f > 0).sum(1).max()) <= K_TRUE
    assert stats["l0"] > K_TRUE - 0.05
    # 64 features for 32 true directions: the unneeded ones die and are resampled
    assert log.n_resampled > 0 and log.resampled[0]["step"] == 150


def test_l1_sae_recovers_the_dictionary(dictionary_data):
    directions, x = dictionary_data
    sae, _ = train_sae(x, SAEConfig(D_IN, 64, "l1", k=None, l1_coeff=0.3), seed=0, steps=700,
                       batch_size=256, lr=3e-3, resample_every=0, progress=False)
    best = match_features(directions, sae.W_dec.detach())
    assert (best > 0.9).float().mean() >= 0.9
    assert evaluate_sae(sae, x)["l0"] < 4 * K_TRUE  # sparse, though L1 does not fix the count


def test_decoder_rows_stay_unit_norm(trained_topk):
    sae, _ = trained_topk
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(sae.n_features), atol=1e-5)


def test_topk_relu_keeps_exactly_k():
    pre = torch.tensor([[0.5, 3.0, 1.0, 2.0, 0.1], [-1.0, -2.0, 0.3, -0.5, -4.0]])
    out = topk_relu(pre, 2)
    assert torch.equal(out[0], torch.tensor([0.0, 3.0, 0.0, 2.0, 0.0]))  # all positive: exactly k
    assert torch.equal(out[1], torch.tensor([0.0, 0.0, 0.3, 0.0, 0.0]))  # one positive among the top 2
    with pytest.raises(ValueError, match="k must lie in"):
        topk_relu(pre, 6)


def test_training_is_deterministic_given_the_seed(dictionary_data):
    _, x = dictionary_data
    config = SAEConfig(D_IN, 24, "topk", k=2)
    a, log_a = train_sae(x, config, seed=3, steps=40, batch_size=128, resample_every=20, progress=False)
    b, log_b = train_sae(x, config, seed=3, steps=40, batch_size=128, resample_every=20, progress=False)
    c, _ = train_sae(x, config, seed=4, steps=40, batch_size=128, resample_every=20, progress=False)
    for name, p in a.state_dict().items():
        assert torch.equal(p, b.state_dict()[name]), name
    assert log_a.curve == log_b.curve and log_a.resampled == log_b.resampled
    assert not torch.equal(a.W_dec, c.W_dec)


# Recorded with train_sae as it was before it moved onto the one training loop (its own loop in
# deviating.analysis.sae.model, commit 10ebb64), on the data above: moving it changed no number.
BEFORE_THE_LOOP = {
    "topk": {"curve": [(20, 0.51811, 0.51811, 2.0), (40, 0.43746, 0.43746, 2.0), (60, 0.37241, 0.37241, 2.0)],
             "resampled": [(10, 0), (20, 0), (30, 0), (40, 3)], "dead_at_end": 6,
             "W_dec": 308.88401753332437, "W_enc": 282.9863320769364},
    "l1": {"curve": [(20, 1.80558, 0.76892, 20.47266), (40, 0.85281, 0.32683, 14.0209), (60, 0.73293, 0.35738, 11.28906)],
           "resampled": [(15, 0), (30, 0)], "dead_at_end": 0,
           "W_dec": 156.25312522187596, "W_enc": 125.38558153843042},
}


@pytest.mark.parametrize("kind", ["topk", "l1"])
def test_training_on_the_loop_gives_the_numbers_recorded_before_it(dictionary_data, kind):
    """Same seed, same batches, same resampling, same losses: top-k with resampling at work, L1 with its
    penalty as the loop's extra loss term (tolerances: float noise between machines only)."""
    _, x = dictionary_data
    if kind == "topk":
        sae, log = train_sae(x, SAEConfig(D_IN, 96, "topk", k=2), seed=2, steps=60, resample_every=10,
                             batch_size=128, lr=3e-3, log_every=20, progress=False)
    else:
        sae, log = train_sae(x, SAEConfig(D_IN, 48, "l1", k=None, l1_coeff=0.3), seed=2, steps=60,
                             resample_every=15, batch_size=256, lr=3e-3, log_every=20, progress=False)
    before = BEFORE_THE_LOOP[kind]
    assert [(r["step"], r["n"]) for r in log.resampled] == before["resampled"]
    assert log.dead_at_end == before["dead_at_end"]
    got = [(r["step"], r["loss"], r["fvu"], r["l0"]) for r in log.curve]
    assert [r[0] for r in got] == [r[0] for r in before["curve"]]
    assert [v for r in got for v in r[1:]] == pytest.approx([v for r in before["curve"] for v in r[1:]], abs=2e-4)
    assert float(sae.W_dec.abs().sum()) == pytest.approx(before["W_dec"], rel=1e-4)
    assert float(sae.W_enc.abs().sum()) == pytest.approx(before["W_enc"], rel=1e-4)
    if kind == "l1":  # the L1 term is in the loss: loss = fvu + l1_coeff * mean L1 norm > fvu
        assert all(r["loss"] > r["fvu"] for r in log.curve)


def test_resampling_revives_dead_features(dictionary_data):
    _, x = dictionary_data
    sae, _ = train_sae(x, SAEConfig(D_IN, 48, "l1", l1_coeff=0.1), seed=0, steps=150, batch_size=256,
                       lr=3e-3, resample_every=0, progress=False)
    with torch.no_grad():
        sae.b_enc[:20] = -1e4  # features 0..19 can never fire
    assert evaluate_sae(sae, x)["dead"] >= 20
    dead = torch.zeros(48, dtype=torch.bool)
    dead[:20] = True
    assert resample_dead(sae, dead, x, torch.Generator().manual_seed(0)) == 20
    fire_rate = torch.tensor(evaluate_sae(sae, x)["fire_rate"])
    assert (fire_rate[:20] > 0).all(), "every resampled feature should fire on some input"
    assert torch.allclose(sae.W_dec[:20].norm(dim=1), torch.ones(20), atol=1e-5)
    assert resample_dead(sae, torch.zeros(48, dtype=torch.bool), x, torch.Generator()) == 0


# ------------------------------------------------------------------------------ bad input


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="larger than n_features"):
        SAEConfig(8, 4, "topk", k=5)
    with pytest.raises(ValueError, match="sparsity must be one of"):
        SAEConfig(8, 4, "relu")
    with pytest.raises(ValueError, match="d_in must be a positive int"):
        SAEConfig(0, 4)
    with pytest.raises(ValueError, match="l1_coeff > 0"):
        SAEConfig(8, 4, "l1", l1_coeff=0.0)


def test_bad_inputs_are_rejected():
    sae = SparseAutoencoder(SAEConfig(8, 16, "topk", k=2))
    with pytest.raises(ValueError, match="d_in=8"):
        sae.encode(torch.zeros(3, 7))
    bad = torch.zeros(3, 8)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        sae.encode(bad)
    with pytest.raises(TypeError, match="floating-point"):
        sae.encode(torch.zeros(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(n_tokens, d_in\)"):
        train_sae(torch.zeros(2, 3, 8), SAEConfig(8, 16, k=2), progress=False)
    with pytest.raises(ValueError, match="NaN"):
        train_sae(bad, SAEConfig(8, 16, k=2), progress=False)
    with pytest.raises(ValueError, match="config.d_in=8"):
        train_sae(torch.zeros(10, 9), SAEConfig(8, 16, k=2), progress=False)


# ------------------------------------------------------------------------------ loss recovered


def test_fraction_loss_recovered_formula():
    assert fraction_loss_recovered(2.0, 2.0, 5.0) == 1.0
    assert fraction_loss_recovered(2.0, 5.0, 5.0) == 0.0
    assert fraction_loss_recovered(2.0, 3.5, 5.0) == 0.5
    assert fraction_loss_recovered(2.0, 6.5, 5.0) == -0.5
    with pytest.raises(ValueError, match="not above the clean loss"):
        fraction_loss_recovered(2.0, 2.5, 2.0)
    with pytest.raises(ValueError, match="finite"):
        fraction_loss_recovered(2.0, math.nan, 5.0)


def _copy_batch(n: int, seed: int) -> torch.Tensor:
    """(n, 16) token ids: 8 random tokens, then the same 8 again."""
    first = torch.randint(0, 61, (n, 8), generator=torch.Generator().manual_seed(seed))
    return torch.cat([first, first], dim=1)


@pytest.fixture(scope="module")
def tiny_hm() -> HeadModel:
    """A tiny GPT trained for 80 steps to copy the second half of `_copy_batch` sequences,
    so that its attention layers matter (ablating one raises the loss)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(d_vocab=61, n_ctx=16, d_model=32, n_layers=2, n_heads=4, d_mlp=64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(80):
        loss = model.loss(_copy_batch(32, step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return HeadModel(model.eval(), name="tiny")


def _identity_sae(d_in: int) -> SparseAutoencoder:
    """Features +e_j and -e_j: relu(x) - relu(-x) = x, an exact reconstruction."""
    sae = SparseAutoencoder(SAEConfig(d_in, 2 * d_in, "l1", l1_coeff=1.0))
    eye = torch.eye(d_in)
    with torch.no_grad():
        sae.W_dec.copy_(torch.cat([eye, -eye]))
        sae.W_enc.copy_(torch.cat([eye, -eye]).T)
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


def test_loss_recovered_is_one_for_identity_and_zero_for_the_floor(tiny_hm):
    hm = tiny_hm
    ids = _copy_batch(8, seed=1000)
    d_in = hm.n_heads * hm.d_head
    perfect = loss_recovered(hm, _identity_sae(d_in), layer=1, input_ids=ids)
    assert perfect["floor"] > perfect["clean"]
    assert perfect["fraction"] == pytest.approx(1.0, abs=1e-5)
    silent = _identity_sae(d_in)
    with torch.no_grad():
        silent.b_enc.fill_(-1e3)  # no feature fires and b_dec = 0: the reconstruction is 0
    assert loss_recovered(hm, silent, layer=1, input_ids=ids)["fraction"] == pytest.approx(0.0, abs=1e-6)
    mean_floor = loss_recovered(hm, _identity_sae(d_in), layer=1, input_ids=ids, floor="mean")
    assert mean_floor["fraction"] == pytest.approx(1.0, abs=1e-5) and mean_floor["floor_kind"] == "mean"
    with pytest.raises(ValueError, match="floor must be"):
        loss_recovered(hm, silent, layer=1, input_ids=ids, floor="resample")


def test_spliced_sae_changes_the_forward_and_cleans_up(tiny_hm):
    hm = tiny_hm
    ids = _copy_batch(2, seed=5)
    d_in = hm.n_heads * hm.d_head
    with torch.no_grad():
        clean = hm(ids)
        with spliced(hm, _identity_sae(d_in), 0):
            assert torch.allclose(hm(ids), clean, atol=1e-5)  # an exact reconstruction changes nothing
        silent = _identity_sae(d_in)
        silent.b_enc.fill_(-1e3)
        with spliced(hm, silent, 0):
            replaced = hm(ids)
        with hm.ablate([(0, h) for h in range(hm.n_heads)]):
            ablated = hm(ids)
        assert torch.allclose(replaced, ablated, atol=1e-6) and not torch.allclose(replaced, clean)
        assert torch.allclose(hm(ids), clean)  # the splice is gone after the block
    with pytest.raises(ValueError, match="out of range"):
        with spliced(hm, silent, 5):
            pass
    with pytest.raises(ValueError, match="another model"):
        with spliced(hm, _identity_sae(d_in + 1), 0):
            pass


def test_save_and_load_round_trip(tmp_path, trained_topk):
    sae, _ = trained_topk
    record = save_sae(sae, tmp_path / "sae", {"command": "test"})
    loaded, meta = load_sae(tmp_path / "sae")
    assert meta["sha256"] == record["sha256"] and loaded.config == sae.config
    x = torch.randn(5, D_IN)
    assert torch.equal(loaded(x)[0], sae(x)[0])
    (tmp_path / "sae.safetensors").write_bytes(b"corrupt")
    with pytest.raises(Exception, match="does not match its recorded sha256"):
        load_sae(tmp_path / "sae")


# ------------------------------------------------------------------------------ heads vs features


def test_units_for_mass_known_answers():
    c = torch.tensor([[5.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    assert units_for_mass(c, 0.5).tolist() == [1, 0, 2]
    assert units_for_mass(c, 0.8).tolist() == [2, 0, 4]
    assert units_for_mass(c, 0.9).tolist() == [3, 0, 4]
    with pytest.raises(ValueError, match="non-negative"):
        units_for_mass(-c, 0.5)


def test_match_features_finds_permuted_copies():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(10, 32, generator=g)
    b = 3.0 * a[torch.randperm(10, generator=g)]  # same directions, shuffled and rescaled
    assert torch.allclose(match_features(a, b), torch.ones(10), atol=1e-5)
    ortho = torch.eye(8)
    assert torch.allclose(match_features(ortho[:4], ortho[4:]), torch.zeros(4))


def test_auroc_known_answers():
    positive = torch.tensor([True, True, False, False])
    scores = torch.tensor([[3.0, 0.0, 1.0, 1.0], [2.0, 1.0, 1.0, 0.0], [1.0, 2.0, 1.0, 0.0],
                           [0.0, 3.0, 1.0, 0.0]])
    # unit 0 separates perfectly, unit 1 is reversed, unit 2 is all ties,
    # unit 3: of the 4 (positive, negative) pairs, 2 are won and 2 tied -> (2 + 2 * 0.5) / 4
    assert auroc(scores, positive).tolist() == [1.0, 0.0, 0.5, 0.75]
    domain = torch.tensor([True, False, True, False])
    assert auroc(scores, positive, domain).tolist() == [1.0, 0.0, 0.5, 1.0]
    with pytest.raises(ValueError, match="positive and negative"):
        auroc(scores, torch.ones(4, dtype=torch.bool))


def test_auroc_equals_the_pairwise_definition_with_ties():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (40, 6), generator=g).float()  # many ties
    scores[:, 5] = 0.0  # a unit that never fires
    positive = torch.rand(40, generator=g) < 0.3
    diff = scores[positive][:, None, :] - scores[~positive][None, :, :]  # (n_pos, n_neg, units)
    pairwise = ((diff > 0).double() + 0.5 * (diff == 0).double()).mean(dim=(0, 1))
    assert torch.allclose(auroc(scores, positive).double(), pairwise, atol=1e-6)
    table = auroc_table(scores, {"a": (positive, None), "b": (~positive, None)})
    assert torch.allclose(table["a"] + table["b"], torch.ones(6))  # swapping the classes mirrors the AUROC


def test_write_explained_by_top_units(tiny_hm):
    hm = tiny_hm
    _, cache = hm.run_with_cache(_copy_batch(4, seed=7), names=("z",))
    z = cache.z(1).reshape(-1, hm.n_heads * hm.d_head)
    d_in = z.shape[1]
    out = write_explained_by_top(hm, 1, _identity_sae(d_in), z, [0, 1, 2, hm.n_heads, 2 * d_in])
    heads = out["heads"]
    assert heads[0] == pytest.approx(0.0, abs=1e-6)  # every head at its mean: the mean write
    assert heads[3] == pytest.approx(1.0, abs=1e-6)  # every head kept
    assert heads[0] <= heads[1] <= heads[2] <= heads[3] + 1e-9
    assert out["features"][-1] == pytest.approx(1.0, abs=1e-5)  # the identity SAE, all features kept


def test_ownership_purity_and_polysemantic_heads():
    # 2 heads of d_head 2; features 0-2 live in head 0, feature 3 in head 1, feature 4 is split
    W_dec = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0.6, 0.8, 0, 0], [0, 0, 1.0, 0], [0.6, 0, 0.8, 0]])
    own = head_ownership(W_dec, 2)
    assert torch.allclose(own, torch.tensor([[1.0, 0], [1, 0], [1, 0], [0, 1], [0.36, 0.64]]))
    classes = torch.tensor([0, 0, 1, 1, 2])  # five tokens of classes noun, noun, verb, verb, punct
    acts = torch.tensor([[1.0, 0, 1, 0, 0], [2, 0, 0, 0, 0], [0, 1, 1, 5, 0], [0, 3, 0, 0, 0], [0, 0, 1, 0, 0]])
    purity = label_purity(acts, classes, 3)
    assert torch.allclose(purity[0], torch.tensor([1.0, 0, 0])) and torch.allclose(purity[1], torch.tensor([0.0, 1, 0]))
    assert torch.allclose(purity[2], torch.tensor([1 / 3, 1 / 3, 1 / 3])) and purity[4].isnan().all()
    rows = polysemantic_heads(own, purity, ["noun", "verb", "punct"])
    assert rows[0] == {"head": 0, "features": 3, "labelled": 2, "classes": {"noun": 1, "verb": 1},
                       "kind": "polysemantic"}
    assert rows[1]["kind"] == "monosemantic" and rows[1]["features"] == 2 and rows[1]["classes"] == {"verb": 1}
    assert polysemantic_heads(own, purity, ["noun", "verb", "punct"], own=0.7)[1]["features"] == 1


def test_write_norms_match_the_head_results(tiny_hm):
    hm = tiny_hm
    ids = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(3))
    _, cache = hm.run_with_cache(ids, names=("z",))
    z = cache.z(1)  # (batch, pos, head, d_head)
    expected = cache.result(1).norm(dim=-1)  # (batch, pos, head)
    assert torch.allclose(head_write_norms(hm, 1, z.reshape(2, 16, -1)), expected, atol=1e-5)
    sae = _identity_sae(hm.n_heads * hm.d_head)
    w = hm.W_O(1).reshape(-1, hm.d_model)
    assert torch.allclose(feature_write_norms(hm, 1, sae), torch.cat([w, w]).norm(dim=1), atol=1e-6)


def test_token_labels_follow_the_annotations():
    from deviating.data.language import Language, pack

    lang = Language(0)
    windows = pack(lang.sample(30, seed=0), 32, drop_last=True)
    labels = token_labels(windows, lang)
    flat = [(w, i) for w in windows for i in range(32)]
    for name, (positive, domain) in labels.items():
        assert positive.shape == domain.shape == (len(flat),)
        assert not (positive & ~domain).any(), name
    verbs = labels["verb, subject in view"][0]
    assert verbs.any() and all(flat[j][0].pos_tag[flat[j][1]] == "VERB" for j in verbs.nonzero().flatten())
    before = labels["before an agreeing verb"][0]
    for j in before.nonzero().flatten().tolist():
        w, i = flat[j]
        assert w.pos_tag[i + 1] == "VERB" and w.subject[i + 1] >= 0
    plural, pending = labels["plural subject pending"]
    assert torch.equal(pending, before) and 0 < plural.sum() < before.sum()
    pos = torch.stack([labels[POS_NAMES[t]][0] for t in POS_CLASSES])
    assert (pos.sum(0) == 1).all(), "every token has exactly one part of speech"


# --------------------------------------------------------------------------- C15's ledger row


def test_c15_is_judged_against_the_dimensions_the_sae_reads_not_the_heads():
    from deviating.analysis.sae.claims import c15_row
    from deviating.verdicts import verdict

    seeds = (0, 1, 2)
    few = {"cos > 0.9": [(24, 500), (23, 490), (24, 498)]}  # three times as many as 8 heads, far under 128
    row = c15_row("toy", 128, 8, few, seeds)
    assert row.null == 128.0 and "128 dimensions" in row.null_label
    assert verdict(row).kind == "does not hold here"
    many = {"cos > 0.9": [(300, 500), (310, 505), (296, 498)]}
    assert verdict(c15_row("toy", 128, 8, many, seeds)).kind == "holds"
    with pytest.raises(ValueError, match="2 counts for 3 SAE seeds"):
        c15_row("toy", 128, 8, {"cos > 0.9": [(24, 500), (23, 490)]}, seeds)
    with pytest.raises(ValueError, match="not n_heads = 8 heads"):
        c15_row("toy", 100, 8, few, seeds)
