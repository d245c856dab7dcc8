"""A Hugging Face tokenizer for the synthetic language: one word, one id.

Built with the `tokenizers` library: a WordLevel model over `Language.vocab` and a
whitespace-split pre-tokenizer, wrapped in `transformers.PreTrainedTokenizerFast`. It adds
no special tokens by itself: packed windows (`pack`) already carry their ``<bos>``, so
position ``i`` of a window is position ``i`` of its ids. Ids: ``<pad>`` = 0, ``<bos>`` = 1,
``<eos>`` = 2, ``<unk>`` = 3, then the words in `Language.vocab` order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from deviating.data.language.document import Document

if TYPE_CHECKING:  # imported lazily: transformers takes seconds to import
    from transformers import PreTrainedTokenizerFast


def tokenizer(lang) -> PreTrainedTokenizerFast:
    """The tokenizer of `lang` (a `Language`). Save it with ``tok.save_pretrained(folder)``,
    load it with ``PreTrainedTokenizerFast.from_pretrained(folder)``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(lang.vocab)}
    if len(vocab) != len(lang.vocab):
        raise ValueError("the language's vocabulary has duplicate words")
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>", model_max_length=1_000_000, clean_up_tokenization_spaces=False)


def encode(tok: PreTrainedTokenizerFast, docs: Sequence[Document]):
    """Token ids of equal-length documents (e.g. packed windows) as a LongTensor
    ``(batch, n_ctx)``; raises if a word is unknown or the lengths differ."""
    lengths = {len(d) for d in docs}
    if len(lengths) != 1:
        raise ValueError(f"encode needs documents of one length (pack them first), got lengths {sorted(lengths)}")
    batch = tok([d.text for d in docs], return_tensors="pt")
    ids = batch["input_ids"]
    if ids.shape[1] != lengths.pop():
        raise ValueError("the tokenizer split the text into a different number of tokens than the "
                         "documents have; was it built for another language?")
    if (ids == tok.unk_token_id).any():
        raise ValueError("a word is not in the tokenizer's vocabulary (<unk>); was it built for another language?")
    return ids
