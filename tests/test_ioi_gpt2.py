"""Chapter 5b's optional GPT-2 section (lib/deviating/analysis/ioi_gpt2.py), offline: its code on
the tiny random GPT-2 stand-in with its own tokenizer, the fall-back when the hub does not
answer, and the opt-in cell as the chapter and its Colab edition carry it.

GPT-2 small itself is never loaded here (no hub): where a test needs "GPT-2 answered", a loader
hands the stand-in over under GPT-2's name.
"""

from __future__ import annotations

import contextlib
import io
import time

import nbformat
import pytest
import torch

from conftest import ROOT
from deviating.analysis.ioi import logit_diffs
from deviating.analysis.ioi_gpt2 import (
    N_PROMPTS, STAND_IN_NAMES, IoiGpt2, gpt2_prompts, gpt2_report, ioi_gpt2_model, roles_vs_wang,
    single_token_names, stand_in_gpt2, wang_heads)
from deviating.analysis.ioi_roles import ROLES, find_roles
from deviating.data.ioi.prompts import eot_id
from deviating.report.real_model import WANG2022_GPT2_HEADS
from headlab.heads.loading import ModelUnavailable

CHAPTER = ROOT / "chapters" / "05_induction" / "05b_indirect_objects.ipynb"
FLAG = "USE_GPT2 = False"


@pytest.fixture(scope="module")
def stand_in() -> IoiGpt2:
    return ioi_gpt2_model(False)


@pytest.fixture(scope="module")
def prompts(stand_in):
    return gpt2_prompts(stand_in)


@pytest.fixture(scope="module")
def roles(stand_in, prompts):
    return find_roles(stand_in.hm, *prompts)


def test_the_stand_in_is_a_tiny_random_gpt2_that_says_its_numbers_mean_nothing(stand_in):
    hm = stand_in.hm
    assert not stand_in.is_gpt2 and hm.model.config.model_type == "gpt2"
    assert (hm.n_layers, hm.n_heads) == (2, 2)
    assert "mean nothing" in stand_in.note and "did not answer" not in stand_in.note
    assert stand_in.names == STAND_IN_NAMES
    # the global random state is left alone, and the same seed builds the same weights
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    again = stand_in_gpt2()
    assert torch.equal(torch.rand(3), before)
    assert torch.equal(again.model.lm_head.weight, hm.model.lm_head.weight)


def test_prompts_hold_each_name_as_one_token_at_its_ground_truth_position(stand_in, prompts):
    clean, abc = prompts
    tok = stand_in.hm.tokenizer
    rows = torch.arange(len(clean))
    assert len(clean) == N_PROMPTS and sorted(set(clean.orders)) == ["ABBA", "BABA"]
    assert (clean.tokens[:, 0] == eot_id(tok)).all() and eot_id(tok) == 0
    assert torch.equal(clean.tokens[rows, clean.pos["IO"]], clean.io_id)
    assert torch.equal(clean.tokens[rows, clean.pos["S1"]], clean.s_id)
    assert torch.equal(clean.tokens[rows, clean.pos["S2"]], clean.s_id)
    for i, x in enumerate(clean.sentences[:4]):
        assert tok.decode([int(clean.io_id[i])]) == " " + x.io and tok.decode([int(clean.s_id[i])]) == " " + x.s
        assert tok.decode(clean.tokens[i, 1:int(clean.pos["END"][i]) + 1].tolist()) == x.text
    # the ABC twins: same positions, three different names in the three slots
    slots = torch.stack([abc.tokens[rows, abc.pos[k]] for k in ("S1", "IO", "S2")], 1)
    assert all(len(set(r.tolist())) == 3 for r in slots)
    assert torch.equal(abc.pos["END"], clean.pos["END"])


def test_the_stand_in_prefers_the_io_on_the_sections_prompts_so_the_role_rules_run(stand_in, prompts):
    assert float(logit_diffs(stand_in.hm, prompts[0]).mean()) > 0


def test_roles_and_the_comparison_table_have_every_role(stand_in, roles):
    table = roles_vs_wang(roles)
    assert list(table) == list(ROLES) and all(len(row) == 3 for row in table.values())
    theirs, ours, both = table["induction"]
    assert theirs == "5.5, 5.8, 5.9, 6.9"
    assert ours == (", ".join(f"{l}.{h}" for l, h in roles.heads_with("induction")) or "-")
    assert set(roles.roles) == {(l, h) for l in range(2) for h in range(2)}


def test_the_report_compares_with_wang_only_when_gpt2_ran(stand_in, roles):
    text = gpt2_report(roles, stand_in)
    assert "What to look for in GPT-2 small" in text and "mean nothing" in text and "in both" not in text
    assert "9.6, 9.9, 10.0" in text  # the name movers, read from the book's one table
    as_gpt2 = gpt2_report(roles, IoiGpt2(stand_in.hm, stand_in.names, True, "gpt2"))
    assert "in both:" in as_gpt2 and "mean nothing" not in as_gpt2
    assert as_gpt2.count("Wang et al.:") == len(ROLES)


def test_wang_heads_are_read_from_the_books_table():
    for role, kind in (("induction", "induction"), ("duplicate token", "duplicate-token"),
                       ("previous token", "previous-token")):
        assert wang_heads(role) == list(WANG2022_GPT2_HEADS[kind])
    assert wang_heads("negative name mover") == [(10, 7), (11, 10)]
    with pytest.raises(ValueError, match="unknown role 'mover'"):
        wang_heads("mover")


def test_a_name_that_is_not_one_token_is_refused_by_name(stand_in):
    tok = stand_in.hm.tokenizer
    assert single_token_names(tok, STAND_IN_NAMES[:3]) == STAND_IN_NAMES[:3]
    with pytest.raises(ValueError, match="Bartholomew"):
        single_token_names(tok, [*STAND_IN_NAMES[:3], "Bartholomew"])
    with pytest.raises(ValueError, match="at least 3 distinct names"):
        single_token_names(tok, ["John", "John", "Mary"])
    found = single_token_names(tok)  # every candidate that is one token, the others left out
    assert set(STAND_IN_NAMES) <= set(found) and "Bartholomew" not in found


def test_gpt2_is_used_when_the_hub_answers_and_the_stand_in_when_it_does_not(stand_in):
    def answered(name, device="cpu"):
        assert name == "gpt2"
        return stand_in.hm

    def silent(name, device="cpu"):
        raise ModelUnavailable("no route to huggingface.co")

    got = ioi_gpt2_model(True, "cpu", loader=answered)
    assert got.is_gpt2 and got.hm is stand_in.hm and set(STAND_IN_NAMES) <= set(got.names)
    assert "choose Runtime > Change runtime type > a GPU" in got.note  # it sits on the CPU
    fell = ioi_gpt2_model(True, "cpu", loader=silent)
    assert not fell.is_gpt2 and "did not answer" in fell.note and "mean nothing" in fell.note
    with pytest.raises(TypeError, match="use_gpt2 must be True or False"):
        ioi_gpt2_model("yes")


def _opt_in_cell(nb) -> nbformat.NotebookNode:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and FLAG in c.source]
    return cell


def test_the_chapters_opt_in_cell_falls_back_without_the_hub(monkeypatch, tmp_path):
    """The cell as the chapter stores it, with the flag turned on, where the hub is out of reach
    (offline, an empty cache): it runs to the end on the stand-in, quickly, and says so."""
    cell = _opt_in_cell(nbformat.read(CHAPTER, as_version=4))
    tags = cell.metadata.get("tags", [])
    assert not {"skip-execution", "nbval-skip", "solution", "exercise-stub"} & set(tags)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    out, scope = io.StringIO(), {}
    start = time.monotonic()
    with contextlib.redirect_stdout(out):
        exec(compile(cell.source.replace(FLAG, "USE_GPT2 = True"), "opt-in cell", "exec"), scope)
    assert time.monotonic() - start < 30
    assert scope["USE_GPT2"] is True and not scope["gpt"].is_gpt2
    assert "did not answer" in out.getvalue() and "What to look for in GPT-2 small" in out.getvalue()


def test_the_colab_edition_keeps_the_opt_in_cell_runnable():
    from colab_edition import book_links, colab_notebook

    original = nbformat.read(CHAPTER, as_version=4)
    edition = colab_notebook(original, book_links(CHAPTER, "0" * 40))
    cell = _opt_in_cell(nbformat.from_dict(edition))
    assert cell.source == _opt_in_cell(original).source
    assert "cellView" not in cell.metadata and not cell.metadata.get("jupyter", {}).get("source_hidden")


def test_the_stored_output_is_the_stand_ins_and_says_so():
    """The site shows the stored output under prose that calls it the stand-in's: it must be."""
    cell = _opt_in_cell(nbformat.read(CHAPTER, as_version=4))
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "The stand-in:" in text and "mean nothing" in text and "in both:" not in text


def test_prompts_start_with_the_tokenizers_own_end_of_text_as_in_gpt2(stand_in):
    """GPT-2's <|endoftext|> is its last id (50256), not 0, and its offsets keep a name's leading
    space: the stand-in's tokenizer rebuilt that way gives the same prompts, with its own EOT first."""
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from deviating.data.ioi.prompts import make_prompts

    spec = json.loads(stand_in.hm.tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    last = max(vocab, key=vocab.get)
    vocab["<|endoftext|>"], vocab[last] = vocab[last], vocab["<|endoftext|>"]
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    spec["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                              "use_regex": True}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token="<|endoftext|>")
    eot = eot_id(tok)
    assert eot == len(vocab) - 1 != 0
    clean = make_prompts(tok, STAND_IN_NAMES, range(8), 8, 0)
    rows = torch.arange(len(clean))
    assert (clean.tokens[:, 0] == eot).all() and not (clean.tokens[:, 1:] == 0).any()
    assert torch.equal(clean.tokens[rows, clean.pos["IO"]], clean.io_id)
    assert torch.equal(clean.tokens[rows, clean.pos["S2"]], clean.s_id)
    assert tok.decode([int(clean.io_id[0])]) == " " + clean.sentences[0].io


def test_path_patching_and_the_backup_test_run_on_a_hugging_face_gpt2(stand_in, prompts):
    """The steps find_roles reaches only when it finds name movers (none in a random model), run
    directly on the stand-in: GPT-2's attention, right-padded prompts, its own unembedding."""
    from deviating.analysis.ioi import path_patch_senders
    from deviating.analysis.ioi_circuit import backup_test

    got = path_patch_senders(stand_in.hm, *prompts, (1, 0))
    assert got.shape == (3, 2, 2) and torch.isfinite(got).all()
    assert (got[:, 1] == 0).all() and (got[:, 0] != 0).all()  # only layer 0 can send to layer 1
    result = backup_test(stand_in.hm, prompts[0], [(1, 1)])
    assert set(result.change) == {(0, 0), (0, 1), (1, 0)}
