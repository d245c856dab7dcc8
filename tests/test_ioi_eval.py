"""deviating.experiments.ioi_eval: the Wilson interval and the per-split scores of an indirect-object
model, on a small random GPT over a tokenizer that keeps names whole (no corpus, no shipped model)."""

from __future__ import annotations

import pytest
import torch

from deviating.data.ioi.names import name_tokenizer
from deviating.data.ioi.prompts import logit_diff, make_prompts
from deviating.data.ioi.windows import EVAL_SPLITS, IOI_EVAL_SEED, IoiSplit
from deviating.data.ioi.sentences import GIVINGS, HELDOUT_PARTS, IOI_TEMPLATES, LEAD_INS, N_TRAIN_TEMPLATES, TEMPLATE_PARTS
from deviating.experiments.ioi_eval import FRESH_SEED_OFFSET, heldout_breakdown, ioi_scores, main, wilson
from headlab.models.gpt import GPT, GPTConfig

NAMES = ["Mary", "John", "Alice", "Peter", "Susan", "George", "Kate", "Henry"]
TEXTS = ["When the man went to the store, he gave a book to his friend."] * 20


def test_wilson_matches_known_values_and_refuses_bad_counts():
    low, high = wilson(90, 100)  # Wilson (1927): 0.9 of 100 -> [0.826, 0.945]
    assert low == pytest.approx(0.8256, abs=1e-3) and high == pytest.approx(0.9448, abs=1e-3)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0 and wilson(10, 10)[0] < 1.0
    for k, n in ((11, 10), (-1, 10), (0, 0)):
        with pytest.raises(ValueError, match=f"k={k}"):
            wilson(k, n)


def test_scores_are_the_share_of_prompts_the_model_gets_right_per_split():
    torch.manual_seed(0)
    tok = name_tokenizer(TEXTS, NAMES, vocab_size=300)
    model = GPT(GPTConfig(d_vocab=tok.get_vocab_size(), n_ctx=64, d_model=16, n_layers=1, n_heads=2, d_mlp=32)).eval()
    split = IoiSplit(tuple(NAMES[:5]), tuple(NAMES[5:]), (0, 1, 2), (3, 4))
    got = ioi_scores(model, tok, split, n=24, batch=10)  # batches of 10 over 24 prompts: the last one is short
    assert list(got) == list(EVAL_SPLITS)
    names = {"train": split.train_names, "heldout": split.heldout_names}
    templates = {"train": split.train_templates, "heldout": split.heldout_templates}
    for i, (key, (who, which)) in enumerate(EVAL_SPLITS.items()):
        prompts = make_prompts(tok, names[who], templates[which], 24, IOI_EVAL_SEED + FRESH_SEED_OFFSET + i)
        with torch.no_grad():
            diff = logit_diff(model(prompts.tokens), prompts)
        assert got[key]["accuracy"] == int((diff > 0).sum()) / 24
        assert got[key]["logit_diff"] == pytest.approx(float(diff.mean()), abs=1e-5)
        assert got[key]["low"] <= got[key]["accuracy"] <= got[key]["high"] and got[key]["n"] == 24
    with pytest.raises(ValueError, match="even number"):
        ioi_scores(model, tok, split, n=7)


def test_the_command_refuses_a_folder_without_a_run(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "provenance.json" in capsys.readouterr().err


def test_each_template_is_its_parts():
    assert len(TEMPLATE_PARTS) == len(IOI_TEMPLATES)
    for text, ((before, joint), act, give) in zip(IOI_TEMPLATES, TEMPLATE_PARTS):
        head, clause = text.split("{S} ")
        assert head == f"{before}{{A}} and {{B}} {act}{joint}" and clause.split()[0] == give.split()[0]
    held = {k: set(xs[-HELDOUT_PARTS[k]:]) for k, xs in (("LEAD_INS", LEAD_INS), ("GIVINGS", GIVINGS))}
    for lead, _, give in TEMPLATE_PARTS[N_TRAIN_TEMPLATES:]:
        assert lead in held["LEAD_INS"] and give in held["GIVINGS"]
    for lead, _, give in TEMPLATE_PARTS[:N_TRAIN_TEMPLATES]:
        assert lead not in held["LEAD_INS"] and give not in held["GIVINGS"]


def test_the_breakdown_groups_the_held_out_prompts_of_the_scores():
    torch.manual_seed(1)
    tok = name_tokenizer(TEXTS, NAMES, vocab_size=300)
    model = GPT(GPTConfig(d_vocab=tok.get_vocab_size(), n_ctx=64, d_model=16, n_layers=1, n_heads=2, d_mlp=32)).eval()
    held = tuple(range(N_TRAIN_TEMPLATES, len(IOI_TEMPLATES), 23))
    split = IoiSplit(tuple(NAMES[:5]), tuple(NAMES[5:]), (0, 1, 2), held)
    got = heldout_breakdown(model, tok, split, n=40, batch=16)
    with torch.no_grad():
        overall = ioi_scores(model, tok, split, n=40)["heldout"]["accuracy"]
    assert set(got) == {"order", "lead_in", "activity", "giving"}
    assert {k: v["n"] for k, v in got["order"].items()} == {"ABBA": 20, "BABA": 20}
    assert set(got["lead_in"]) <= {lead.strip() for lead, _ in LEAD_INS[-HELDOUT_PARTS["LEAD_INS"]:]}
    for groups in got.values():  # every grouping covers the same prompts and agrees with the score
        assert sum(g["n"] for g in groups.values()) == 40
        assert sum(g["n"] * g["accuracy"] for g in groups.values()) / 40 == pytest.approx(overall, abs=1e-12)
    prompts = make_prompts(tok, split.heldout_names, held, 40, IOI_EVAL_SEED + FRESH_SEED_OFFSET)
    with torch.no_grad():
        right = (logit_diff(model(prompts.tokens), prompts) > 0).tolist()
    abba = [r for r, x in zip(right, prompts.sentences) if x.order == "ABBA"]
    assert got["order"]["ABBA"]["accuracy"] == sum(abba) / len(abba)
    with pytest.raises(ValueError, match="even number"):
        heldout_breakdown(model, tok, split, n=7)
