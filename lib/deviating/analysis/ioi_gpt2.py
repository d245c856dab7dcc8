"""Chapter 5b's optional section: the chapter's own pipeline on GPT-2 small, where Wang et al.
(2022) found the indirect-object circuit, or on a tiny random stand-in where the hub is out of reach.

The section is an explicit opt-in: :func:`ioi_gpt2_model` loads GPT-2 small from the Hugging Face
hub only when the reader asks (``use_gpt2=True``) and the hub answers. Otherwise (the site, the
book's build machine, CI, a reader who did not ask) it returns :func:`stand_in_gpt2`: a GPT-2 of
two layers of two heads with random weights and its own small tokenizer, so that the same code
runs everywhere and is tested. The stand-in's numbers mean nothing, and its note says so.

The pipeline is the chapter's: prompts from the book's templates with names that are one token,
with their leading space, in *that* model's tokenizer (:func:`single_token_names`,
:func:`gpt2_prompts`; the generator writes the ground-truth positions as it does for
``ioi-gpt``), then the book's one definition of each role (:func:`~deviating.analysis.ioi_roles.find_roles`,
which measures each head's direct share of the metric on the way). :func:`gpt2_report` prints
each head's direct share and the roles found; for GPT-2 small it puts the heads Wang et al.
report beside them (:func:`wang_heads`, read from
:data:`~deviating.experiments.ioi_circuit.WANG2022_CLASSES`).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Sequence

import torch

from deviating.analysis.ioi import logit_diffs
from deviating.analysis.ioi_roles import ROLES, IoiRoles
from deviating.data.ioi.names import CANDIDATE_NAMES, name_token_ids, name_tokenizer
from deviating.data.ioi.prompts import IoiPrompts, corrupt_abc, make_prompts
from deviating.data.ioi.sentences import IOI_TEMPLATES, OBJECTS, ORDERS, PLACES, ioi_sentence
from deviating.experiments.ioi_circuit import WANG2022_CLASSES
from deviating.report.real_model import real_language_model
from headlab.heads.head import Head
from headlab.heads.loading import ModelUnavailable
from headlab.heads.model import HeadModel

__all__ = ["N_PROMPTS", "STAND_IN_NAMES", "IoiGpt2", "single_token_names", "stand_in_tokenizer",
           "stand_in_gpt2", "ioi_gpt2_model", "gpt2_prompts", "wang_heads", "roles_vs_wang", "gpt2_report",
           "describe"]

N_PROMPTS = 32  # prompts per run: path patching over GPT-2's 144 heads is the slow part
STAND_IN_NAMES: tuple[str, ...] = CANDIDATE_NAMES[:12]  # the names the stand-in's tokenizer keeps whole
_STAND_IN_NOTE = ("a tiny GPT-2 ({layers} layers of {heads} heads) with random weights, never trained, and "
                  "its own small tokenizer. Its numbers mean nothing: it is here so that the same code runs "
                  "where GPT-2 small cannot be loaded. In Colab, set the flag USE_GPT2 to True to run GPT-2 small.")

# One path patch on GPT-2 small's shape, 32 prompts, took 7.8 CPU-s on one thread of the book's machine, and
# find_roles runs one per earlier head for each name mover, three per earlier head for each S-inhibition head.
_ON_CPU = (". It runs on the CPU, where the role search (path patching from every earlier head) can take "
           "hours: in Colab, choose Runtime > Change runtime type > a GPU, and run the section again.")


@dataclass(frozen=True)
class IoiGpt2:
    """The model the section runs on: ``hm``, the ``names`` its tokenizer keeps whole (each with a
    leading space), ``is_gpt2`` (False: the random stand-in) and a ``note`` saying which it is."""

    hm: HeadModel
    names: tuple[str, ...]
    is_gpt2: bool
    note: str


def single_token_names(tokenizer, names: Sequence[str] | None = None, min_names: int = 3) -> tuple[str, ...]:
    """The first names that ``tokenizer`` reads as one token with their leading space (``" Mary"``).

    ``names=None``: every name of :data:`~deviating.data.ioi.names.CANDIDATE_NAMES` that is one
    token, the others left out (at least ``min_names`` must remain: the ABC prompts need three).
    Names given explicitly must all be one token: ``ValueError`` naming those that are not."""
    if names is not None:
        names = tuple(dict.fromkeys(names))
        if len(names) < min_names:
            raise ValueError(f"need at least {min_names} distinct names (the ABC prompts use three), got {list(names)}")
        name_token_ids(tokenizer, names)  # raises, naming every name split into several tokens
        return names
    kept = []
    for name in dict.fromkeys(CANDIDATE_NAMES):
        try:
            name_token_ids(tokenizer, [name])
        except ValueError:
            continue
        kept.append(name)
    if len(kept) < min_names:
        raise ValueError(f"only {len(kept)} of the candidate names are one token in this tokenizer ({kept}); "
                         f"need {min_names}: pass names that are")
    return tuple(kept)


def _stand_in_texts(names: Sequence[str], n: int = 200, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        io, s = rng.sample(list(names), 2)
        x = ioi_sentence(rng.randrange(len(IOI_TEMPLATES)), io, s, rng.choice(ORDERS), rng.choice(PLACES),
                         rng.choice(OBJECTS))
        out.append(f"{x.text} {io}.")
    return out


def stand_in_tokenizer(names: Sequence[str] = STAND_IN_NAMES, vocab_size: int = 512):
    """A small byte-level BPE (a ``PreTrainedTokenizerFast``, ``<|endoftext|>`` id 0) trained on
    generated indirect-object sentences, every name of ``names`` one token with and without its
    leading space (:func:`~deviating.data.ioi.names.name_tokenizer`)."""
    from transformers import PreTrainedTokenizerFast

    raw = name_tokenizer(_stand_in_texts(names), names, vocab_size=vocab_size)
    return PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def stand_in_gpt2(seed: int = 0, names: Sequence[str] = STAND_IN_NAMES) -> HeadModel:
    """A ``GPT2LMHeadModel`` of 2 layers of 2 heads (``n_embd=32``) with random weights (drawn with
    ``seed``, the global random state left as it was) and :func:`stand_in_tokenizer`.

    Its unembedding is not tied to the embedding, and its sign is chosen so that the mean logit
    difference on the section's prompts (:func:`gpt2_prompts` with their defaults) is above 0:
    the role definitions refuse a model that does not prefer the indirect object, and a random
    model is as likely to prefer the subject. The choice makes none of its numbers meaningful."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = stand_in_tokenizer(names)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=128, vocab_size=len(tokenizer),
                        bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(config).eval()
    hm = HeadModel(model, tokenizer, name="tiny random gpt2")
    clean, _ = gpt2_prompts(IoiGpt2(hm, tuple(names), False, ""))
    if float(logit_diffs(hm, clean).mean()) <= 0:
        with torch.no_grad():
            model.lm_head.weight.neg_()
    return hm


def ioi_gpt2_model(use_gpt2: bool, device: str = "auto", *, loader=None) -> IoiGpt2:
    """GPT-2 small when ``use_gpt2`` and the hub answers (on ``device``, default a GPU if there is
    one), with the candidate names its tokenizer keeps whole; otherwise :func:`stand_in_gpt2` on the
    CPU, with a note that says why. ``loader`` (default :func:`headlab.load`) is what tests replace."""
    if not isinstance(use_gpt2, bool):
        raise TypeError(f"use_gpt2 must be True or False, got {use_gpt2!r}")
    why = ""
    if use_gpt2:
        try:
            lm = real_language_model(device, gpt2=True, loader=loader)
        except ModelUnavailable:
            why = "GPT-2 small could not be loaded: the Hugging Face hub did not answer. "
        else:
            slow = _ON_CPU if torch.device(lm.hm.device).type == "cpu" else ""
            return IoiGpt2(lm.hm, single_token_names(lm.hm.tokenizer), True, lm.note + slow)
    hm = stand_in_gpt2()
    note = why + "The stand-in: " + _STAND_IN_NOTE.format(layers=hm.n_layers, heads=hm.n_heads)
    return IoiGpt2(hm, STAND_IN_NAMES, False, note)


def gpt2_prompts(model: IoiGpt2, n: int = N_PROMPTS, seed: int = 0) -> tuple[IoiPrompts, IoiPrompts]:
    """``(clean, abc)``: ``n`` prompts from every template of
    :data:`~deviating.data.ioi.sentences.IOI_TEMPLATES` with ``model.names`` (drawn with ``seed``),
    and their ABC twins (drawn with ``seed + 1``), tokenized by ``model.hm``'s tokenizer."""
    tok = model.hm.tokenizer
    clean = make_prompts(tok, model.names, range(len(IOI_TEMPLATES)), n, seed)
    return clean, corrupt_abc(tok, clean, model.names, seed + 1)


def wang_heads(role: str) -> list[Head]:
    """The heads of GPT-2 small that Wang et al. (2022) place in the class matching the book's
    ``role`` (:data:`~deviating.experiments.ioi_circuit.WANG2022_CLASSES`), as ``(layer, head)``."""
    if role not in WANG2022_CLASSES:
        raise ValueError(f"unknown role {role!r}: choose from {', '.join(WANG2022_CLASSES)}")
    return [(int(l), int(h)) for l, h in re.findall(r"(\d+)\.(\d+)", WANG2022_CLASSES[role])]


def _names(heads) -> str:
    return ", ".join(f"{l}.{h}" for l, h in sorted(heads)) or "-"


def roles_vs_wang(found: IoiRoles) -> dict[str, tuple[str, str, str]]:
    """``{role: (Wang et al.'s heads, the heads found, the heads in both)}`` for every role of
    :data:`~deviating.analysis.ioi_roles.ROLES`, heads written ``"L.H, L.H"`` (``"-"``: none). Only
    meaningful for GPT-2 small: Wang et al.'s heads are GPT-2 small's."""
    out = {}
    for role in ROLES:
        theirs, ours = set(wang_heads(role)), set(found.heads_with(role))
        out[role] = (_names(theirs), _names(ours), _names(theirs & ours))
    return out


def gpt2_report(found: IoiRoles, model: IoiGpt2, top: int = 3) -> str:
    """What the section prints: the ``top`` largest and smallest direct shares (units of D; at
    most half the heads each), then
    for GPT-2 small the roles found beside Wang et al.'s heads (:func:`roles_vs_wang`), for the
    stand-in Wang et al.'s heads as what to look for in GPT-2 small and the stand-in's roles apart."""
    dla = sorted(found.evidence.items(), key=lambda kv: -kv[1].dla)
    share = lambda kv: f"{kv[0][0]}.{kv[0][1]} {kv[1].dla:+.2f}"
    k = min(top, len(dla) // 2)  # the two lists never share a head
    lines = [f"{model.hm.name}: mean logit diff D = {found.logit_diff:.2f} on its prompts",
             "largest direct shares (units of D): " + ", ".join(map(share, dla[:k])),
             "smallest: " + ", ".join(map(share, dla[::-1][:k])), ""]
    if model.is_gpt2:
        lines.append("Roles: the heads Wang et al. (2022) report, found here, in both")
        for role, (theirs, ours, both) in roles_vs_wang(found).items():
            lines += [f"{role:20}Wang et al.: {theirs}", f"{'':20}found here:  {ours}",
                      f"{'':20}in both:     {both}"]
        return "\n".join(lines)
    lines.append("What to look for in GPT-2 small (Wang et al. 2022):")
    lines += [f"  {role:20}{_names(wang_heads(role))}" for role in ROLES]
    lines.append("The stand-in's roles (they mean nothing):")
    lines += [f"  {role:20}{heads}" for role, heads in found.table().items()]
    return "\n".join(lines)


def describe(model: IoiGpt2, width: int = 76) -> str:
    """``model.note`` wrapped to ``width`` columns."""
    return textwrap.fill(model.note, width)
