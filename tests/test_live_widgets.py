"""The live widgets (headlab.viz.live, and the book's deviating.figures.widgets built on it): their
Python side, and their JavaScript run by node.

* Python: the browser tokenizer equals the models' tokenizers; each widget's view is
  the view of headlab's PyTorch computation (HeadCountPatterns, LiveAblation) and
  follows its controls; bad input becomes a message in the widget naming the value.
* JavaScript: the pure functions of ``viz/js/core.js`` (softmax, entropy, the
  next-token loss, the mean of z for mean ablation, top-k, tokenization) are run by
  node on the same inputs as numpy / headlab, and every widget module parses as an
  ES module. The browser path as a whole (onnxruntime-web on the site) is tested in
  tests/test_site_widgets.py.

About 5 s. Without node the JavaScript tests skip (and fail when CI is set).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
import torch

import headlab
from conftest import in_ci
from headlab.metrics import next_token_loss
from deviating.figures.widgets import JS, HeadCountPatterns, heads_widget, temperature_widget
from headlab.viz.live import (JS_DIR, AblationWidget, ablation_widget, candidate_token, encode, packed,
                              parse_line, shipped_checkpoint, tokenizer_spec, unpack, widget_module)
from headlab.viz.widgets import LiveAblation

SENTENCE = "the loud hunter that the prince taught is small . he sleeps ."


@pytest.fixture(scope="module")
def aom():
    return headlab.load("attn-only-2l")


@pytest.fixture(scope="module")
def family():
    return {h: headlab.load(f"heads-{h}") for h in (1, 2, 4, 8)}


@pytest.fixture(scope="module")
def brown():
    return headlab.load("brown-attn-2l")


@pytest.fixture(scope="module")
def ioi():
    return headlab.load("ioi-gpt")


def ioi_prompts(hm, n: int = 2, seed: int = 3):
    """``n`` indirect-object prompts of held-out names (the chapters' generator) and their typed
    lines ``text | IO | S``."""
    from deviating.analysis.ioi import evaluation_prompts

    prompts, _ = evaluation_prompts(hm, n, seed)
    return prompts, [f"{x.text} | {x.io} | {x.s}" for x in prompts.sentences]


# typed lines, good and bad (the JavaScript must read each as Python does)
LINES = ["Then Mary and John went out. John gave a drink to | Mary | John", "to | Mary", "a b | Mary | ",
         "| Mary | John", "x | a | b | c", "no bar at all  ", "trailing spaces   |  Mary|John  ", "it's | 'a' | b"]
CANDIDATES = ["Mary", "John", "Elizabeth", '"Mary"', "Zorblax", "Mary-Ann", "the", '"."', '""', '" "']


# what a reader may type: accents, curly quotes, digits, contractions, runs of spaces, emoji, the special token
TYPED = ["Héllo wörld — “quotes” 1,234.5 can't we'll  double  spaces\ttab\n", "<|endoftext|>The jury",
         "ok<|endoftext|>x", "emoji 🙂 ok", "   lead", "trail   ", "The jury said it did find that"]


def brown_texts(brown):
    """Held-out Brown Corpus text (the sample shipped with the book) and :data:`TYPED`."""
    from deviating.data.brown_sample import held_out
    from deviating.training.recipes import RECIPES

    held = held_out(RECIPES["brown-attn-2l"].task)
    return [brown.tokenizer.decode(row[1:].tolist()) for row in held.windows[:48]] + TYPED


def aom_texts(aom):
    vocab = aom.tokenizer.convert_ids_to_tokens(list(range(64)))
    return [" ".join(vocab[i] for i in [3, 17, 5, 40, 22, 9, 3, 17, 5, 40]), " ".join(vocab[i] for i in [1, 2, 3, 1, 2])]


# ---------------------------------------------------------------------------- Python


def test_browser_tokenizer_equals_the_models_tokenizer(aom, family):
    for hm, texts in [(aom, aom_texts(aom)), (family[1], [SENTENCE, "some lions smile ."])]:
        spec = tokenizer_spec(hm.tokenizer)
        for text in texts:
            assert encode(text, spec) == hm.tokenizer(text)["input_ids"], text
    spec = tokenizer_spec(family[1].tokenizer, add_bos=True, n_ctx=32)
    bos = family[1].tokenizer.bos_token_id
    assert encode(SENTENCE, spec)[0] == bos and encode("<bos> " + SENTENCE, spec) == encode(SENTENCE, spec)
    with pytest.raises(ValueError, match=r"not in the vocabulary: 'xylophones', 'zz'; use words"):
        encode("the xylophones zz sleep zz .", spec)
    with pytest.raises(ValueError, match="more than the model's n_ctx = 32"):
        encode(" ".join(["the"] * 40), spec)
    with pytest.raises(ValueError, match="non-empty"):
        encode("  ", spec)


def test_browser_bpe_equals_the_brown_tokenizer(brown):
    spec = tokenizer_spec(brown.tokenizer, n_ctx=128)
    assert spec["kind"] == "bpe" and spec["prefix"] == [0] and spec["special"] == {"<|endoftext|>": 0}
    texts = brown_texts(brown)
    assert sum(len(brown.tokenizer(t)["input_ids"]) for t in texts) > 48 * 120
    for text in texts:
        if len(brown.tokenizer(text)["input_ids"]) <= 128:
            assert encode(text, spec) == brown.tokenizer(text)["input_ids"], text
    with pytest.raises(ValueError, match="more than the model's n_ctx = 128"):
        encode("the " * 200, spec)
    # a merge table in another order is another tokenizer: the ranks matter, not only the pairs
    pairs = spec["merges"].split(" ")
    shuffled = {**spec, "merges": " ".join(pairs[2:] + pairs[:2]), "n_ctx": None}
    assert any(encode(t, shuffled) != encode(t, spec) for t in texts)


def test_heads_widget_view_is_headcountpatterns(family):
    w = heads_widget(family, [SENTENCE], n_heads=8, layer=1, notes={8: "validation loss 2.770"})
    core = HeadCountPatterns(family)
    expected = core.view(8, SENTENCE, 1)
    assert w.view["tokens"] == expected.tokens and w.view["d_head"] == 8
    np.testing.assert_allclose(unpack(w.view["pattern"]), expected.pattern.numpy(), atol=1e-6)
    assert set(w.onnx) == {"1", "2", "4", "8"} and w.onnx["8"].startswith("heads-8-")
    assert w.notes == {"8": "validation loss 2.770"} and w.d_heads == {"1": 64, "2": 32, "4": 16, "8": 8}
    w.n_heads, w.layer = 2, 0  # as the front-end sets them, with a kernel
    assert w.view["n_heads"] == 2 and len(w.view["pattern"]) == 2
    np.testing.assert_allclose(unpack(w.view["pattern"]), core.view(2, SENTENCE, 0).pattern.numpy(), atol=1e-6)
    w.text = "the xylophones sleep ."
    assert "'xylophones'" in w.view["error"] and w.view["n_heads"] == 2  # the last good view stays
    w.text = "some lions smile ."
    assert w.view["error"] is None and w.view["tokens"] == ["<bos>", "some", "lions", "smile", "."]
    with pytest.raises(ValueError, match="no model with 3 heads"):
        heads_widget(family, [SENTENCE], n_heads=3)


def test_ablation_widget_view_is_liveablation(aom):
    texts = aom_texts(aom)
    w = ablation_widget(aom, texts, preset=[(0, 0)], selected=(1, 3))
    assert w.onnx.startswith("attn-only-2l-") and w.tokenizer["prefix"] == [aom.tokenizer.bos_token_id]
    for heads, mode in [([(0, 0)], "zero"), ([(0, 0), (1, 2)], "mean"), ([], "mean")]:
        w.mode, w.ablated = mode, [list(h) for h in heads]
        view = LiveAblation(aom, texts).view(heads, mode, (1, 3))
        assert w.view["ablated"] == [list(h) for h in heads] and w.view["mode"] == mode
        np.testing.assert_allclose(w.view["metric"], view.metric.numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(w.view["clean"], view.clean.numpy(), rtol=0, atol=1e-6)
        assert [t for t, *_ in w.view["top"]] == [t for t, *_ in view.top]
        assert [t for t, *_ in w.view["top_ablated"]] == [t for t, *_ in view.top_ablated]
        np.testing.assert_allclose(unpack(w.view["pattern"]), view.pattern.numpy(), atol=1e-6)
    # the ablated ranking is the ablated model's own
    w.ablated = [[0, 0]]
    probs = [b for _, _, b in w.view["top_ablated"]]
    assert probs == sorted(probs, reverse=True)
    assert repr(w) == "AblationWidget(attn-only-2l: ablated 0.0, mean ablation)"
    w.texts = ["t1 t2 t3", "nonsense words"]
    assert "'nonsense', 'words'" in w.view["error"]
    w.texts = texts
    assert w.view["error"] is None
    w.ablated = [[5, 0]]
    assert "head 5.0 is out of range" in w.view["error"]


def test_ablation_widget_refuses_what_it_cannot_show(aom):
    with pytest.raises(ValueError, match="unknown ablation mode 'resample'"):
        ablation_widget(aom, aom_texts(aom), mode="resample")
    with pytest.raises(ValueError, match="out of range"):
        ablation_widget(aom, aom_texts(aom), preset=[(7, 0)])
    with pytest.raises(ValueError, match="not in the vocabulary: 'hello'"):
        ablation_widget(aom, ["hello t1 t2"])


def test_the_logit_difference_is_the_tasks_metric(ioi):
    """A line ``text | IO | S`` shows logit(IO) - logit(S) at the text's end: the indirect-object
    chapter's metric (deviating.analysis.ioi.logit_diffs on its own prompt batch), clean and with
    heads zero-ablated, in contrast= form and typed."""
    from deviating.analysis.ioi import logit_diffs

    prompts, lines = ioi_prompts(ioi)
    texts = [x.text for x in prompts.sentences]
    w = ablation_widget(ioi, [*texts, "The jury said that"], contrast=[(x.io, x.s) for x in prompts.sentences] + [None])
    assert w.texts == [*lines, "The jury said that"] and w.view["candidates"][2] == [] and w.view["contrast"][2] is None
    assert w.view["texts"] == [*texts, "The jury said that"]
    np.testing.assert_allclose(w.view["contrast_clean"][:2], logit_diffs(ioi, prompts).numpy(), rtol=0, atol=1e-5)
    for heads in ([(3, 0), (3, 3)], [(2, 2), (1, 1)]):
        w.ablated = [list(h) for h in heads]
        np.testing.assert_allclose(w.view["contrast"][:2], logit_diffs(ioi, prompts, heads).numpy(), rtol=0, atol=1e-5)
        assert all(abs(a - b) > 1e-3 for a, b in zip(w.view["contrast"][:2], w.view["contrast_clean"]))
    typed = ablation_widget(ioi, lines, preset=[(2, 2), (1, 1)])
    assert typed.view["contrast"] == w.view["contrast"][:2] and typed.view["candidates"] == [[x.io, x.s] for x in
                                                                                           prompts.sentences]
    # the candidate after a space, unless quoted; the browser's tokenizer and the model's agree
    spec = w.tokenizer
    assert candidate_token("Mary", ioi.tokenizer, spec) == candidate_token("Mary", ioi.tokenizer) == \
        ioi.tokenizer(" Mary", add_special_tokens=False)["input_ids"][0]
    assert candidate_token('"Mary"', ioi.tokenizer, spec) == ioi.tokenizer("Mary", add_special_tokens=False)["input_ids"][0]
    assert candidate_token('"Mary"', ioi.tokenizer, spec) != candidate_token("Mary", ioi.tokenizer, spec)


def test_a_bad_line_or_candidate_is_named(ioi, family):
    with pytest.raises(ValueError, match=r"^'to \| Mary': 1 candidates \['Mary'\], not 2; write the text, then two"):
        parse_line("to | Mary")
    with pytest.raises(ValueError, match=r"'\| Mary \| John': no text before '\|'"):
        parse_line("| Mary | John")
    with pytest.raises(ValueError, match=r"3 candidates \['a', 'b', 'c'\], not 2"):
        parse_line("x | a | b | c")
    assert parse_line("no bar  ") == ("no bar  ", []) and parse_line("to  |Mary |  John") == ("to", ["Mary", "John"])
    spec = tokenizer_spec(ioi.tokenizer)
    for s in (spec, None):  # the browser's tokenizer, and the model's own
        with pytest.raises(ValueError, match=r"candidate 'Mary-Ann' is 3 tokens for this model \(' Mary' \+ '-' \+ "
                                             r"'Ann'\), not one: .* choose a word the tokenizer keeps whole"):
            candidate_token("Mary-Ann", ioi.tokenizer, s)
    with pytest.raises(ValueError, match="not in the vocabulary: 'xylophones'"):
        candidate_token("xylophones", family[1].tokenizer, tokenizer_spec(family[1].tokenizer))
    _, lines = ioi_prompts(ioi)
    w = ablation_widget(ioi, lines)
    w.texts = [lines[0], "and gave a drink to | Mary"]  # as the reader types it
    assert w.view["error"].startswith("'and gave a drink to | Mary': 1 candidates ['Mary'], not 2")
    w.texts = [lines[0].rsplit("|", 2)[0] + "| Zorblax | Mary"]
    assert w.view["error"].startswith("candidate 'Zorblax' is ") and len(w.view["contrast"]) == 2  # the last good view
    w.texts = lines[:1]
    assert w.view["error"] is None and len(w.view["contrast"]) == 1
    with pytest.raises(ValueError, match="contrast: give one pair"):
        ablation_widget(ioi, ["a", "b"], contrast=[("Mary", "John")])
    with pytest.raises(ValueError, match="contrast: give one pair"):
        ablation_widget(ioi, ["a"], contrast=["Mary"])
    with pytest.raises(ValueError, match="candidate 'Zorblax' is 6 tokens"):
        ablation_widget(ioi, ["Then Mary gave a drink to"], contrast=[("Mary", "Zorblax")])


def test_only_shipped_weights_get_an_export(aom):
    assert shipped_checkpoint(aom) == "attn-only-2l"
    changed = headlab.load("attn-only-2l")
    with torch.no_grad():
        changed.model.blocks[0].attn.W_O.weight[0, 0] += 1.0
    assert shipped_checkpoint(changed) is None
    w = ablation_widget(changed, aom_texts(aom))
    assert w.onnx == "" and w.view["error"] is None  # works with a kernel; the site has no export for it


def test_temperature_widget_checks_its_input():
    w = temperature_widget(np.array([1.0, 2.0]), ["a", "b"], temperature=2.0)
    assert w.scores == [1.0, 2.0] and w.labels == ["a", "b"] and w.temperature == 2.0
    with pytest.raises(ValueError, match="one key per score: 2 scores, 1 keys"):
        temperature_widget([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="t_min <= temperature <= t_max"):
        temperature_widget([1.0], ["a"], temperature=9.0)


def test_saved_state_carries_what_the_static_page_needs(aom):
    """The state the kernel sends (and nbclient saves into the notebook, and the page embeds)
    carries the module, its id, the first view and what the browser computes with."""
    w = ablation_widget(aom, aom_texts(aom))
    state = w.get_state()
    for key in ("_esm", "_anywidget_id", "view", "tokenizer", "onnx"):
        assert key in state, key
    assert state["_anywidget_id"] == "headlab.viz.live.AblationWidget"
    assert isinstance(w, AblationWidget) and "export default" in w._esm and "export function encode" in w._esm


# ---------------------------------------------------------------------------- JavaScript (node)


def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        if in_ci():
            pytest.fail("node is needed for the widgets' JavaScript tests [CI is set]")
        pytest.skip("node is not installed")
    return exe


def run_js(tmp_path, body: str, data: dict):
    """Run ``body`` (an async function body with ``core`` and ``data`` in scope) in node."""
    script = tmp_path / "case.mjs"
    script.write_text(
        f"import * as core from {json.dumps((JS_DIR / 'core.js').as_uri())};\n"
        "const data = JSON.parse(await new Promise((ok) => { let s = ''; process.stdin.on('data', (c) => s += c);"
        " process.stdin.on('end', () => ok(s)); }));\n"
        f"const result = await (async () => {{ {body} }})();\nconsole.log(JSON.stringify(result));\n")
    proc = subprocess.run([node(), str(script)], input=json.dumps(data), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_js_numbers_equal_numpy_and_headlab(tmp_path, aom):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 6, 11, generator=g) * 3
    ids = torch.randint(0, 11, (2, 6), generator=g)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    z = torch.randn(3, 2, 6, 4, 5, generator=g)  # (layer, batch, pos, head, d_head)
    scores = [2.0, 1.0, 0.5, 0.1, -1.0, 3.0]
    out = run_js(tmp_path, """
        const loss = core.nextTokenLoss(Float32Array.from(data.logits), data.ids, data.mask, 2, 6, 11);
        return {unpacked: core.unpack(data.packed), nested: core.unpack([[1, 2]]),
                soft: core.softmax(data.scores, 0.3), ent: core.entropyNats(core.softmax(data.scores, 2.5)),
                loss, mean: Array.from(core.meanZ(Float32Array.from(data.z), data.mask, 3, 2, 6, 4, 5)),
                top: core.topK([0.1, 0.5, 0.2, 0.5, 0.05], 3),
                lsm: Array.from(core.logSoftmaxRow(Float32Array.from(data.logits), 7, 11))};
    """, {"logits": logits.flatten().tolist(), "ids": ids.flatten().tolist(), "mask": mask.flatten().tolist(),
          "z": z.flatten().tolist(), "scores": scores, "packed": packed(z[0, 1, :, :3])})
    np.testing.assert_array_equal(np.array(out["unpacked"], dtype=np.float32), z[0, 1, :, :3].numpy())
    np.testing.assert_array_equal(unpack(packed(z[0, 1, :, :3])), z[0, 1, :, :3].numpy())
    assert out["nested"] == [[1, 2]]
    s = np.array(scores)
    p = np.exp(s / 0.3 - (s / 0.3).max())
    np.testing.assert_allclose(out["soft"], p / p.sum(), rtol=1e-12)
    q = np.exp(s / 2.5) / np.exp(s / 2.5).sum()
    assert out["ent"] == pytest.approx(float(-(q * np.log(q)).sum()), abs=1e-12)
    np.testing.assert_allclose(out["loss"], next_token_loss(logits, ids, mask).numpy(), atol=1e-5)
    real = mask.bool()
    expected_mean = torch.stack([z[l][real].mean(0) for l in range(3)])  # as HeadModel.replacements("mean")
    np.testing.assert_allclose(out["mean"], expected_mean.flatten().numpy(), atol=1e-6)
    assert out["top"] == [1, 3, 2]
    np.testing.assert_allclose(out["lsm"], torch.log_softmax(logits.reshape(12, 11)[7], -1).numpy(), atol=1e-5)


def test_js_tokenizer_equals_python(tmp_path, aom, family):
    spec_a = tokenizer_spec(aom.tokenizer, n_ctx=64)
    spec_f = tokenizer_spec(family[1].tokenizer, add_bos=True, n_ctx=32)
    texts_a, texts_f = aom_texts(aom), [SENTENCE, "<bos> some lions smile .", "  the   lions smile . "]
    out = run_js(tmp_path, """
        const enc = (spec, t) => { try { return core.encode(t, spec).ids; } catch (e) {
            return (e instanceof core.VocabError ? "VocabError: " : "Error: ") + e.message; } };
        return {a: data.ta.map((t) => enc(data.a, t)), f: data.tf.map((t) => enc(data.f, t)),
                bad: enc(data.f, "the xylophones zz sleep zz ."), long: enc(data.f, data.long)};
    """, {"a": spec_a, "f": spec_f, "ta": texts_a, "tf": texts_f, "long": " ".join(["the"] * 40)})
    assert out["a"] == [encode(t, spec_a) for t in texts_a]
    assert out["f"] == [encode(t, spec_f) for t in texts_f]
    with pytest.raises(ValueError) as err:
        encode("the xylophones zz sleep zz .", spec_f)
    assert out["bad"] == "VocabError: " + str(err.value)
    assert out["long"].startswith("VocabError: the text has 41 tokens")


def test_js_bpe_equals_python(tmp_path, brown):
    spec = tokenizer_spec(brown.tokenizer, n_ctx=None)
    texts = brown_texts(brown)
    ids = [encode(t, spec) for t in texts]
    out = run_js(tmp_path, """
        return {ids: data.texts.map((t) => core.encode(t, data.spec).ids),
                words: data.ids.map((row) => row.map((i) => core.tokenText(core.vocabOf(data.spec)[i], data.spec)))};
    """, {"spec": spec, "texts": texts, "ids": ids[-len(TYPED):]})
    assert out["ids"] == ids
    # shown to the reader as text: each token decoded as the tokenizer decodes it alone
    for row, words in zip(ids[-len(TYPED):], out["words"]):
        assert words[1:] == [brown.tokenizer.decode([i]) for i in row[1:]]
        assert words[0] == "<|endoftext|>"


def test_js_typed_lines_equal_python(tmp_path, ioi, family):
    """core.js parseLine and candidateToken read what parse_line and candidate_token read, with the
    same messages, on the model of English with whole names and on a word-level vocabulary."""
    spec, words = tokenizer_spec(ioi.tokenizer, n_ctx=64), tokenizer_spec(family[1].tokenizer)
    word_candidates = ["lions", "xylophones", '"."']
    out = run_js(tmp_path, """
        const tryIt = (f) => { try { return f(); } catch (e) {
            return (e instanceof core.VocabError ? "ValueError: " : "Error: ") + e.message; } };
        return {lines: data.lines.map((l) => tryIt(() => { const p = core.parseLine(l); return [p.text, p.candidates]; })),
                ids: data.candidates.map((w) => tryIt(() => core.candidateToken(w, data.spec))),
                words: data.word_candidates.map((w) => tryIt(() => core.candidateToken(w, data.words))),
                diff: core.logitDiff([0, 1, 2, 3, 4, 7], 1, 3, 2, 0)};
    """, {"lines": LINES, "candidates": CANDIDATES, "word_candidates": word_candidates, "spec": spec, "words": words})

    def py(f, *args):
        try:
            result = f(*args)
        except ValueError as err:
            return f"ValueError: {err}"
        return list(result) if isinstance(result, tuple) else result

    assert out["lines"] == [py(parse_line, line) for line in LINES]
    assert out["ids"] == [py(candidate_token, w, ioi.tokenizer, spec) for w in CANDIDATES]
    assert out["words"] == [py(candidate_token, w, family[1].tokenizer, words) for w in word_candidates]
    assert sum(isinstance(x, int) for x in out["ids"]) == 6 and out["diff"] == 4  # 7 - 3: row 1 is [3, 4, 7]


@pytest.mark.parametrize("name", ["temperature", "heads", "ablation"])
def test_each_widget_module_parses(tmp_path, name):
    path = tmp_path / f"{name}.mjs"  # the module text is what the browser imports
    path.write_text(widget_module(name, JS_DIR if name == "ablation" else JS))
    proc = subprocess.run([node(), "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = run_js(tmp_path, f"const m = await import({json.dumps(path.as_uri())}); "
                 "return [typeof m.default.render, m.VERSION];", {})
    assert out == ["function", "1.0.0"]


def test_ablation_widget_names_a_bad_text_or_top_k(aom):
    with pytest.raises(TypeError, match="text 0 is int 3"):
        ablation_widget(aom, [3, 4])
    vocab = aom.model.config.d_vocab
    with pytest.raises(ValueError, match=rf"top_k=1000000 is more than the model's {vocab} tokens"):
        ablation_widget(aom, aom_texts(aom), top_k=10**6)
