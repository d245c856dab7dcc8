"""Randomly initialised tiny models of every supported architecture (no hub needed)."""

from __future__ import annotations

import torch

from headlab.heads.model import HeadModel


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=61, n_positions=32,
                                      bos_token_id=0, eos_token_id=0))


def _bert():
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                                intermediate_size=64, vocab_size=61, max_position_embeddings=32),
                     add_pooling_layer=False)


def _neox():
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    return GPTNeoXForCausalLM(GPTNeoXConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                                            intermediate_size=64, vocab_size=61, max_position_embeddings=32,
                                            bos_token_id=0, eos_token_id=0))


def _llama_gqa():
    from transformers import LlamaConfig, LlamaForCausalLM
    # 4 query heads sharing 2 key/value heads: grouped-query attention
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        hidden_size=32, intermediate_size=64, vocab_size=61,
                                        max_position_embeddings=32, bos_token_id=0, eos_token_id=0,
                                        pad_token_id=0))


def _headlab():
    from headlab.models.gpt import GPT, GPTConfig
    return GPT(GPTConfig(d_vocab=61, n_ctx=32, d_model=32, n_layers=2, n_heads=4, d_mlp=64))


ADAPTER_FACTORIES = {"headlab": _headlab, "gpt2": _gpt2, "bert": _bert, "gpt_neox": _neox, "llama_gqa": _llama_gqa}


def make_model(name: str, seed: int = 0) -> HeadModel:
    torch.manual_seed(seed)
    model = ADAPTER_FACTORIES[name]()
    with torch.no_grad():  # non-trivial biases so that bias handling is exercised
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.02)
    return HeadModel(model.eval(), name=name)


def random_batch(hm: HeadModel, n: int = 3, seq: int = 7, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, hm.model.config.vocab_size, (n, seq), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def reference_patch(hm: HeadModel, base: dict, source: dict, layer: int, head: int, metric) -> torch.Tensor:
    """Activation patching by hand: a plain forward pre-hook on the layer's ``W_O`` writes the source
    run's slice of head ``head`` into the base run; returns ``metric(logits, base)``."""
    proj = hm.arch.out_proj(hm.blocks[layer])
    seen = []
    handle = proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    with torch.no_grad():
        hm.arch.run(hm.model, source["input_ids"], source["attention_mask"])
    handle.remove()
    cols = slice(head * hm.d_head, (head + 1) * hm.d_head)

    def write(module, args):
        z = args[0].clone()
        z[..., cols] = seen[0][..., cols]
        return (z,)

    handle = proj.register_forward_pre_hook(write)
    try:
        with torch.no_grad():
            logits = hm.arch.run(hm.model, base["input_ids"], base["attention_mask"])
    finally:
        handle.remove()
    return metric(logits, base)


def reference_attribution(hm: HeadModel, base: dict, source: dict, metric) -> torch.Tensor:
    """Attribution patching by hand, ``(n, n_layers, n_heads)``: ``metric(base) + (z_source - z_base) .
    d metric / d z`` at the base run, with plain hooks adding a zero leaf of autograd to each ``W_O`` input."""
    projs = [hm.arch.out_proj(b) for b in hm.blocks]
    source_z, base_z, leaves = [], [], []

    def leaf(module, args):  # d metric / d leaf = d metric / d z, along every path (later layers included)
        base_z.append(args[0].detach())
        leaves.append(torch.zeros_like(args[0], requires_grad=True))
        return (args[0] + leaves[-1],)

    handles = [p.register_forward_pre_hook(lambda m, args: source_z.append(args[0].detach())) for p in projs]
    with torch.no_grad():
        hm.arch.run(hm.model, source["input_ids"], source["attention_mask"])
    for h in handles:
        h.remove()
    handles = [p.register_forward_pre_hook(leaf) for p in projs]
    try:
        value = metric(hm.arch.run(hm.model, base["input_ids"], base["attention_mask"]), base)  # (n,)
    finally:
        for h in handles:
            h.remove()
    grads = torch.autograd.grad(value.sum(), leaves)
    n, pos = base["input_ids"].shape
    cells = [((s - z) * g).detach().reshape(n, pos, hm.n_heads, hm.d_head).sum((1, 3))
             for s, z, g in zip(source_z, base_z, grads)]
    return torch.stack(cells, 1) + value.detach()[:, None, None]
