"""The training task of the indirect-object model: Brown Corpus windows mixed with generated passages.

:class:`IoiWindows` is a :class:`~deviating.data.brown_windows.BrownWindows` whose tokenizer keeps
the first names whole (:func:`~deviating.data.ioi.names.name_tokenizer`: the same 1,024-id BPE
as ``brown-gpt``'s, plus the names) and in which a share ``generated_fraction`` of the training
windows comes from generated passages (:func:`~deviating.data.ioi.sentences.passage`): a share
``ioi_fraction`` of their sentences are indirect-object sentences of the *training* names and
templates in both orders; the others are other uses of names, taken from a cast of ``cast_size``
names per passage drawn from *all* names (held-out ones included), so that names recur and
copying a name is trained for every name. A share ``frame_share`` of the indirect-object
sentences is written in Brown frames instead of templates (words of the Brown training texts, never
a word of a held-out part: :func:`~deviating.data.ioi.sentences.brown_frame_sentence`). The other
windows are Brown windows as ``brown-gpt`` reads them (with the same repeat curriculum).

The evaluation adds to ``brown-gpt``'s (validation loss on held-out Brown windows, induction
scores) the indirect-object metric on four splits of prompts (:data:`EVAL_SPLITS`): held-out
names **and** templates (``ioi_accuracy``: the share of prompts with ``logit(IO) - logit(S) > 0``,
and ``ioi_logit_diff``, its mean), training names and templates (``_seen``), held-out names with
training templates (``_new_names``), and training names with held-out templates (``_new_templates``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from deviating.data import brown
from deviating.data.brown_windows import EOT_ID, BrownWindows, add_repeats, window_starts
from deviating.data.ioi.names import EXTRA_NAMES, brown_first_names, name_tokenizer, split_names
from deviating.data.ioi.prompts import IoiPrompts, logit_diff, make_prompts
from deviating.data.ioi.sentences import IOI_TEMPLATES, N_TRAIN_TEMPLATES, brown_frame_words, passage
from headlab.models.gpt import GPT

__all__ = ["GENERATION_SEED", "IOI_EVAL_SEED", "EVAL_SPLITS", "IoiSplit", "IoiWindows", "ioi_split"]

GENERATION_SEED = 2022  # the pool of generated passages is the same for every training seed
IOI_EVAL_SEED = 4321  # the evaluation prompts likewise
# evaluation split -> (whose names, which templates); the metric's suffix is "" for heldout, else "_" + split
EVAL_SPLITS = {"heldout": ("heldout", "heldout"), "seen": ("train", "train"),
               "new_names": ("heldout", "train"), "new_templates": ("train", "heldout")}


@dataclass(frozen=True)
class IoiSplit:
    """Which names and templates the generated training text may use, and which are held out."""

    train_names: tuple[str, ...]
    heldout_names: tuple[str, ...]
    train_templates: tuple[int, ...]
    heldout_templates: tuple[int, ...]

    @classmethod
    def from_provenance(cls, provenance: dict) -> "IoiSplit":
        """The split recorded in an ``ioi-gpt`` checkpoint's provenance (``hm.provenance``), so that the
        evaluation prompts can be drawn without the Brown Corpus."""
        data = (provenance or {}).get("data", {})
        if data.get("kind") != "ioi_windows":
            raise ValueError("this provenance is not an indirect-object model's (data.kind is "
                             f"{data.get('kind')!r}, expected 'ioi_windows'): load an ioi-gpt checkpoint")
        return cls(tuple(data["train_names"]), tuple(data["heldout_names"]), tuple(data["train_templates"]),
                   tuple(data["heldout_templates"]))


def ioi_split(texts: list[brown.Text] | None = None, extra_names: int = 0) -> IoiSplit:
    """The book's split: names of :func:`~deviating.data.ioi.names.brown_first_names` split by
    :func:`~deviating.data.ioi.names.split_names`, then the first ``extra_names`` of
    :data:`~deviating.data.ioi.names.EXTRA_NAMES` added to the training names (the held-out
    names never change); the first :data:`N_TRAIN_TEMPLATES` templates for training, the rest
    held out."""
    _check_extra_names(extra_names)
    train, held = split_names(brown_first_names(texts))
    return IoiSplit(tuple(train) + EXTRA_NAMES[:extra_names], tuple(held), tuple(range(N_TRAIN_TEMPLATES)),
                    tuple(range(N_TRAIN_TEMPLATES, len(IOI_TEMPLATES))))


def _check_extra_names(k: object) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(EXTRA_NAMES):
        raise ValueError(f"extra_names must be an int from 0 to {len(EXTRA_NAMES)} (how many of "
                         f"EXTRA_NAMES join the training names), got {k!r}")


@dataclass
class IoiWindows(BrownWindows):
    """Brown windows and generated name passages (see the module docstring).

    Args:
        generated_fraction: the share of training windows cut from generated passages.
        ioi_fraction: the share of a passage's sentences that are indirect-object sentences.
        n_passages: how many passages the generated pool holds (drawn with :data:`GENERATION_SEED`).
        sentences_per_passage: sentences in a passage (enough to fill a window).
        cast_size: how many names recur in a passage's other sentences (drawn from *all* names,
            held-out ones included: see :func:`~deviating.data.ioi.sentences.passage`).
        frame_share: the share of indirect-object sentences written in a Brown frame (words of the
            training texts instead of the part lists: :func:`~deviating.data.ioi.sentences.brown_frame_sentence`).
        other_frame_share: the share of the other sentences written in a Brown frame that is not an
            indirect-object sentence (:func:`~deviating.data.ioi.sentences.brown_frame_other_sentence`).
        cast_heldout_share: if set, the chance that a member of a passage's cast is a held-out name
            (otherwise the cast is drawn uniformly from all names; see
            :func:`~deviating.data.ioi.sentences.passage`).
        extra_names: how many of :data:`~deviating.data.ioi.names.EXTRA_NAMES` (names never in the
            Brown Corpus) join the training names, in generated text only; the held-out names and
            templates do not change.
        total_vocab: the tokenizer's size, names and unused ids included (the model's ``d_vocab``).
    """

    total_vocab: int = 1664
    generated_fraction: float = 0.5
    ioi_fraction: float = 0.5
    n_passages: int = 6000
    sentences_per_passage: int = 12
    cast_size: int = 3
    frame_share: float = 0.0
    other_frame_share: float = 0.0
    cast_heldout_share: float | None = None
    extra_names: int = 0
    kind: str = "ioi_windows"
    version: str = "3"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("generated_fraction", "ioi_fraction", "frame_share", "other_frame_share"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
        v = self.cast_heldout_share
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1):
            raise ValueError(f"cast_heldout_share must be None or a number in [0, 1], got {v!r}")
        _check_extra_names(self.extra_names)

    @property
    def d_vocab(self) -> int:
        return self.total_vocab

    def prepared(self, texts: list[brown.Text] | None = None) -> dict[str, Any]:
        """As :meth:`BrownWindows.prepared`, with the name tokenizer, the ``split`` of names and
        templates, and the generated pool (``generated`` token ids per passage, ``gen_stream``,
        ``gen_starts``)."""
        if self._prepared is None:
            texts = texts if texts is not None else brown.load()
            parts = brown.split(texts)
            split = ioi_split(texts, self.extra_names)
            docs = {name: [" ".join(brown.detokenize([w for w, _ in s])[0] for s in t.sentences) for t in parts[name]]
                    for name in ("train", "validation")}
            tok = name_tokenizer(docs["train"], split.train_names + split.heldout_names, self.vocab_size,
                                 self.total_vocab)
            ids = {name: [torch.tensor(e.ids, dtype=torch.long) for e in tok.encode_batch(d)]
                   for name, d in docs.items()}
            rng = random.Random(GENERATION_SEED)
            every = split.train_names + split.heldout_names
            words = brown_frame_words(parts["train"]) if self.frame_share or self.other_frame_share else None
            gen = [passage(rng, split.train_names, split.train_templates, self.sentences_per_passage,
                           self.ioi_fraction, cast_names=every, cast_size=self.cast_size, frame_words=words,
                           frame_share=self.frame_share, other_frame_share=self.other_frame_share,
                           cast_heldout_share=self.cast_heldout_share)
                   for _ in range(self.n_passages)]
            gen_ids = [torch.tensor(e.ids, dtype=torch.long) for e in tok.encode_batch(gen)]
            self._prepared = {"tokenizer": tok, **ids, "stream": torch.cat(ids["train"]),
                              "starts": window_starts([len(x) for x in ids["train"]], self.n_ctx),
                              "split": split, "generated_texts": gen, "generated": gen_ids,
                              "gen_stream": torch.cat(gen_ids),
                              "gen_starts": window_starts([len(x) for x in gen_ids], self.n_ctx)}
        return self._prepared

    def sample(self, batch_size: int, generator: torch.Generator):
        """A training batch: Brown windows (with repeats, as ``brown-gpt``'s), of which each row is
        replaced, with probability ``generated_fraction``, by a window of a generated passage."""
        p = self.prepared()
        batch = add_repeats(self.windows(p["stream"], p["starts"], batch_size, generator), self.repeat_fraction,
                            self.min_span, self.max_span, generator)
        gen = self.windows(p["gen_stream"], p["gen_starts"], batch_size, generator)
        use = torch.rand(batch_size, generator=generator) < self.generated_fraction
        batch.tokens = torch.where(use[:, None], gen, batch.tokens)
        batch.repeated = batch.repeated & ~use
        return batch

    def ioi_eval(self, n: int = 256) -> dict[str, IoiPrompts]:
        """The evaluation prompts, ``n`` of each split (:data:`EVAL_SPLITS`), drawn with
        :data:`IOI_EVAL_SEED` (plus the split's index): ``heldout`` (held-out names and templates),
        ``seen`` (training names and templates, prompts drawn afresh), ``new_names`` (held-out names,
        training templates) and ``new_templates`` (training names, held-out templates)."""
        p = self.prepared()
        s = p["split"]
        names = {"train": s.train_names, "heldout": s.heldout_names}
        templates = {"train": s.train_templates, "heldout": s.heldout_templates}
        return {split: make_prompts(p["tokenizer"], names[who], templates[which], n, IOI_EVAL_SEED + i)
                for i, (split, (who, which)) in enumerate(EVAL_SPLITS.items())}

    def eval_data(self, n: int):
        return {"brown": super().eval_data(n), "ioi": self.ioi_eval(2 * n)}

    @torch.no_grad()
    def evaluate(self, model: GPT, data) -> dict[str, Any]:
        """``brown-gpt``'s metrics (:meth:`BrownWindows.evaluate`) and the indirect-object metric
        (module docstring)."""
        metrics = super().evaluate(model, data["brown"])
        for name, prompts in data["ioi"].items():
            diff = logit_diff(model(prompts.tokens.to(model.device)), prompts).float().cpu()
            suffix = "" if name == "heldout" else "_" + name
            metrics[f"ioi_accuracy{suffix}"] = float((diff > 0).float().mean())
            metrics[f"ioi_logit_diff{suffix}"] = float(diff.mean())
        return metrics

    def phase_change(self, metrics: dict[str, Any]) -> bool:
        """The task is learned at an evaluation when at least 90% of the held-out prompts (held-out
        names and templates) have ``logit(IO) - logit(S) > 0``."""
        return metrics["ioi_accuracy"] >= 0.9

    def describe(self) -> dict[str, Any]:
        """What the task is, as recorded in a checkpoint's provenance (the split of names and templates included)."""
        s = self.prepared()["split"]
        return {**super().describe(), "kind": self.kind, "version": self.version,
                "generated_fraction": self.generated_fraction, "ioi_fraction": self.ioi_fraction,
                "n_passages": self.n_passages, "total_vocab": self.total_vocab, "sentences_per_passage": self.sentences_per_passage,
                "cast_size": self.cast_size, "frame_share": self.frame_share,
                "other_frame_share": self.other_frame_share,
                **({"extra_names": self.extra_names} if self.extra_names else {}),
                **({} if self.cast_heldout_share is None else {"cast_heldout_share": self.cast_heldout_share}),
                "generation_seed": GENERATION_SEED, "ioi_eval_seed": IOI_EVAL_SEED,
                "train_names": list(s.train_names), "heldout_names": list(s.heldout_names),
                "train_templates": list(s.train_templates), "heldout_templates": list(s.heldout_templates)}
