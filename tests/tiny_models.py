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
