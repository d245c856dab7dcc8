"""What ``benchmarks/sweep.py`` measures the sweep against: models built from configs, the
per-head loops a researcher would otherwise write, and the FLOP bound of batching.

* :func:`build_case`: a random-weight model of each architecture, built from a
  ``transformers`` config (no hub), or MiniLM offline, with its inputs.
* :func:`transformer_lens_loop`: TransformerLens's idiomatic ablation, one
  ``run_with_hooks`` per head that zeroes ``blocks.{l}.attn.hook_z`` (``headlab[bench]``).
* :func:`hf_loop`: a plain Hugging Face loop, one forward per head with a pre-hook on the
  attention output projection that zeroes the head's slice of its input.
* :func:`flop_bound`: how much of the loop's work a sweep can save at most, from the
  shapes: matrix-multiply FLOPs counted by ``torch.utils.flop_counter`` per stage of the
  model, plus the attention scores computed from the geometry.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from importlib.metadata import version
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

import headlab
from headlab.metrics import cosine_distance, mean_pool, next_token_loss

N_SEQ, SEQ_LEN, VOCAB = 16, 32, 2000


@dataclass
class Case:
    """One benchmark model: the wrapped model, its inputs, and how TransformerLens sees it."""

    key: str
    label: str
    hm: headlab.HeadModel
    batch: dict
    tl_model: Callable[[], torch.nn.Module] | None  # a fresh copy for TransformerLens to wrap
    tl_arch: str | None  # the architecture name TransformerLens's bridge knows it by
    tl_note: str = ""


def _random_ids(seed: int = 0) -> dict:
    ids = torch.randint(0, VOCAB, (N_SEQ, SEQ_LEN), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def build_case(key: str, sentences: list[str] | None = None) -> Case:
    """``gpt2``, ``bert``, ``llama``, ``neox`` (random weights, 6 layers x 12 heads, d_model 384, vocab 2,000;
    16 sequences x 32 random tokens) or ``minilm`` (the real model, on ``sentences``)."""
    from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig,
                              GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM)

    torch.manual_seed(0)
    if key == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_head=12, n_embd=384, vocab_size=VOCAB, n_positions=64,
                                           bos_token_id=0, eos_token_id=0)).eval()
        return Case(key, "GPT-2 arch. (6 x 12, d 384)", headlab.HeadModel(model, name="gpt2-arch"), _random_ids(),
                    lambda: copy.deepcopy(model), "GPT2LMHeadModel")
    if key == "llama":
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4,
                                             hidden_size=384, intermediate_size=1024, vocab_size=VOCAB,
                                             max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                                             pad_token_id=0)).eval()
        return Case(key, "Llama/GQA arch. (6 x 12, 4 kv)", headlab.HeadModel(model, name="llama-gqa-arch"),
                    _random_ids(), lambda: copy.deepcopy(model), "LlamaForCausalLM")
    if key == "neox":
        model = GPTNeoXForCausalLM(GPTNeoXConfig(num_hidden_layers=6, num_attention_heads=12, hidden_size=384,
                                                 intermediate_size=1536, vocab_size=VOCAB, max_position_embeddings=64,
                                                 bos_token_id=0, eos_token_id=0)).eval()
        return Case(key, "GPT-NeoX arch. (6 x 12, d 384)", headlab.HeadModel(model, name="neox-arch"),
                    _random_ids(), None, None, "compared with a plain HF loop (TransformerLens not run here)")
    if key == "bert":
        # TransformerLens's bridge knows BertForMaskedLM, not a bare BertModel: it wraps the
        # masked-LM model (and so also runs its head); headlab sweeps the same encoder inside it.
        mlm = BertForMaskedLM(BertConfig(num_hidden_layers=6, num_attention_heads=12, hidden_size=384,
                                         intermediate_size=1536, vocab_size=VOCAB,
                                         max_position_embeddings=64)).eval()
        return Case(key, "BERT arch. (6 x 12, d 384)", headlab.HeadModel(mlm.bert, name="bert-arch"),
                    _random_ids(), lambda: copy.deepcopy(mlm), "BertForMaskedLM",
                    "TransformerLens wraps BertForMaskedLM only, so its loop also runs the MLM head")
    if key == "minilm":
        hm = headlab.load("minilm")
        return Case(key, "MiniLM (all-MiniLM-L6-v2)", hm, hm.tokenize(sentences), None, None,
                    "TransformerLens's bridge does not support a bare BertModel (MiniLM): plain HF loop")
    raise ValueError(f"unknown case {key!r}: choose from gpt2, bert, llama, neox, minilm")


def transformer_lens_version() -> str | None:
    """The installed TransformerLens version, or ``None`` (install ``headlab[bench]``)."""
    try:
        import transformer_lens  # noqa: F401  (optional: headlab[bench])
        return version("transformer-lens")
    except ImportError:
        return None


def transformer_lens_bridge(case: Case):
    """TransformerLens's ``TransformerBridge`` around a copy of the case's model (the bridge
    rewrites the modules it wraps, so it must not get the model headlab holds)."""
    from transformer_lens.model_bridge.sources import build_bridge_from_module

    model = case.tl_model().eval()
    return build_bridge_from_module(model, case.tl_arch, hf_config=model.config)


def _encoder_metric(hidden: torch.Tensor, mask: torch.Tensor, clean: torch.Tensor | None) -> torch.Tensor:
    pooled = mean_pool(hidden, mask)
    return pooled if clean is None else cosine_distance(pooled, clean)


def transformer_lens_loop(bridge, case: Case) -> torch.Tensor:
    """Effects ``(n_heads_total, n_inputs)`` by TransformerLens's idiom: one ``run_with_hooks``
    per head, zeroing ``blocks.{l}.attn.hook_z[:, :, h]``; the next-token loss per input
    (``return_type="loss", loss_per_token=True``), or for an encoder ``1 - cos`` of the
    mean-pooled last block output (read at ``blocks.{L-1}.hook_out``) to the clean one."""
    ids, mask = case.batch["input_ids"], case.batch["attention_mask"]
    hm = case.hm
    last = f"blocks.{hm.n_layers - 1}.hook_out"

    def run(hooks):
        if hm.causal:
            return bridge.run_with_hooks(ids, return_type="loss", loss_per_token=True, fwd_hooks=hooks).mean(dim=1)
        saved = {}

        def save(x, hook):
            saved["x"] = x
        bridge.run_with_hooks(ids, attention_mask=mask, fwd_hooks=hooks + [(last, save)])
        return saved["x"]

    with torch.no_grad():
        clean = run([])
        if not hm.causal:
            clean, hidden = _encoder_metric(clean, mask, None), clean
            base = _encoder_metric(hidden, mask, clean)
        rows = []
        for layer in range(hm.n_layers):
            for head in range(hm.n_heads):
                def zero(z, hook, head=head):
                    z[:, :, head] = 0.0  # z: (batch, pos, head, d_head)
                    return z
                out = run([(f"blocks.{layer}.attn.hook_z", zero)])
                rows.append(out - clean if hm.causal else _encoder_metric(out, mask, clean) - base)
    return torch.stack(rows)


def hf_loop(case: Case) -> torch.Tensor:
    """Effects ``(n_heads_total, n_inputs)`` by a plain Hugging Face loop: one forward per head,
    a forward pre-hook on the attention output projection zeroing the head's input columns."""
    hm, batch = case.hm, case.batch
    ids, mask = batch["input_ids"], batch["attention_mask"]

    def run():
        out = hm.arch.run(hm.model, ids, mask)
        return next_token_loss(out, ids, mask) if hm.causal else out

    with torch.no_grad():
        clean = run()
        if not hm.causal:
            pooled = _encoder_metric(clean, mask, None)
            base = _encoder_metric(clean, mask, pooled)
        rows = []
        for layer in range(hm.n_layers):
            for head in range(hm.n_heads):
                cols = slice(head * hm.d_head, (head + 1) * hm.d_head)

                def zero(module, args, cols=cols):
                    z = args[0].clone()
                    z[..., cols] = 0.0
                    return (z,)
                handle = hm.out_proj(layer).register_forward_pre_hook(zero)
                try:
                    out = run()
                finally:
                    handle.remove()
                rows.append(out - clean if hm.causal else _encoder_metric(out, mask, pooled) - base)
    return torch.stack(rows)


def stage_flops(hm: headlab.HeadModel, batch: dict) -> dict:
    """FLOPs of one clean forward, by stage: ``below`` (embeddings), per layer ``pre`` (up to the
    gate: norms, Q/K/V, attention) and ``post`` (``W_O`` and what follows in the block), and
    ``head`` (after the last block)."""
    n, pos = batch["input_ids"].shape
    attention = 4 * n * pos * pos * hm.n_heads * hm.d_head  # q k^T and pattern @ v, not seen by the counter
    marks: dict = {}
    counter = FlopCounterMode(display=False)

    def mark(key):
        def hook(*_):
            marks[key] = counter.get_total_flops()
        return hook

    handles = []
    for layer, block in enumerate(hm.blocks):
        handles += [block.register_forward_pre_hook(mark(("in", layer))),
                    hm.out_proj(layer).register_forward_pre_hook(mark(("gate", layer))),
                    block.register_forward_hook(mark(("out", layer)))]
    try:
        with torch.no_grad(), counter:
            hm.forward(batch)
    finally:
        for h in handles:
            h.remove()
    total = counter.get_total_flops() + attention * hm.n_layers
    L = hm.n_layers
    return {"below": marks[("in", 0)],
            "pre": [marks[("gate", l)] - marks[("in", l)] + attention for l in range(L)],
            "post": [marks[("out", l)] - marks[("gate", l)] for l in range(L)],
            "head": counter.get_total_flops() - marks[("out", L - 1)], "total": total}


def flop_bound(hm: headlab.HeadModel, batch: dict, firsts: list[int], chunks: list[list[int]] | None = None
               ) -> dict:
    """The loop's FLOPs over the sweep's, for groups whose lowest layers are ``firsts``.

    The loop runs ``len(firsts) + 1`` full forwards (one per group and the clean one). ``block``:
    the best a sweep can do that reuses whole clean blocks below a group's lowest layer (the
    bound the issue quotes); ``gate``: the best when the lowest ablated layer's attention is also
    shared, running once per layer (what :func:`headlab.analysis.sweep.sweep` does); ``plan``:
    what the sweep's chunks (indices into ``firsts``) compute, attention once per chunk.
    """
    f = stage_flops(hm, batch)
    block = [p + q for p, q in zip(f["pre"], f["post"])]
    above = [sum(block[l + 1:]) for l in range(hm.n_layers)]
    loop = (len(firsts) + 1) * f["total"]
    reuse_block = f["total"] + sum(block[l] + above[l] + f["head"] for l in firsts)
    after_gate = sum(f["post"][l] + above[l] + f["head"] for l in firsts)
    out = {"block": loop / reuse_block, "gate": loop / (f["total"] + after_gate + sum(f["pre"][l] for l in set(firsts)))}
    if chunks is not None:
        out["plan"] = loop / (f["total"] + after_gate + sum(f["pre"][min(firsts[i] for i in c)] for c in chunks))
    return out


def timed(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict]:
    """Each function run ``repeats`` times, interleaved (a, b, c, a, b, c, ...) so that a change in the
    machine's load hits all alike: the median wall time and the median process CPU time of each."""
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall[key].append(time.perf_counter() - w)
            cpu[key].append(time.process_time() - c)
    return {k: {"wall": statistics.median(wall[k]), "cpu": statistics.median(cpu[k]),
                "wall_all": wall[k], "cpu_all": cpu[k]} for k in fns}
