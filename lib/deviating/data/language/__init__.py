"""The book's synthetic language: a small English-like grammar that emits its own ground truth.

Real models let us *find* specialist heads; a model trained on text whose structure we know
lets us *check* them. Every generated token comes with annotations: the subject of each
verb, the antecedent of each pronoun, punctuation, sentence boundaries, the earlier copy of
a repeated sentence, the construction, number and gender (see `Document`).

    >>> lang = Language()                       # seed_vocab=0, default probabilities
    >>> docs = lang.sample(100, seed=0)          # deterministic in (seed_vocab, config, seed)
    >>> windows = pack(docs, n_ctx=64)           # <bos> + 63 tokens each, annotations re-based
    >>> tok = tokenizer(lang)                    # a transformers PreTrainedTokenizerFast
    >>> ids = encode(tok, windows)               # (batch, n_ctx) LongTensor, one id per word
    >>> items = agreement_items(windows)         # positions index `ids` directly

Grammar (LANGUAGE_VERSION 1)
----------------------------
Text is lowercase words and the punctuation tokens "." and ",", separated by spaces. Each
probability is written ``name = default``; ``name`` is a field of `LanguageConfig` and can
be overridden, e.g. ``Language(p_copy=0.2)``. "Uniform" choices are uniform over the list.

    DOCUMENT    -> SENTENCE_0 SENTENCE_1 ... SENTENCE_{n-1}
                   n ~ Uniform{min_sentences = 3, ..., max_sentences = 7}
                   the document first draws a cast of cast_size = 4 noun lemmas (Zipf)
    SENTENCE_k  -> COPY                         with p_copy = 0.12, for k >= 1
                 | [FRONT ","] CLAUSE "."       otherwise; FRONT present with p_front = 0.15
    COPY        -> a verbatim repeat of an earlier freshly generated sentence of the same
                   document that contains no pronoun, chosen uniformly (so the gap is random)
    FRONT       -> ADV                          with p_front_adverb = 0.5
                 | PREP_F NP[any]
    CLAUSE      -> one construction; weights normalised over the six (over the first four
                   for SENTENCE_0, which has no earlier sentence for a pronoun to refer to):
      simple     w_simple = 0.2      NP_s VP
      pp         w_pp = 0.16         NP_s PREP NP[other] VP
      subj_rel   w_subj_rel = 0.14   NP_s "that" REL_VP VP
      obj_rel    w_obj_rel = 0.14    NP_s "that" NP_o[other] V_tr(agrees with NP_o, or past) VP
      pron_subj  w_pron_subj = 0.2   PRON_SUBJ VP
      pron_obj   w_pron_obj = 0.16   NP_s[other than the antecedent] V_tr PRON_OBJ
    REL_VP      -> V_tr NP[other]               with p_subj_rel_transitive = 0.7
                 | V_intr | COP ADJ             0.15 each
                   (present tense, agreeing with NP_s, with p_rel_present = 0.5, else past)
    VP          -> V_intr                       with p_vp_intrans = 0.35
                 | V_tr NP_OBJ                  with p_vp_trans = 0.4
                 | COP ADJ                      otherwise (0.25)
                   (always present tense, agreeing with the clause's subject)
    NP_OBJ      -> NP[any] [PREP NP[any]]       the PP with p_obj_pp = 0.2
    NP[number]  -> DET ADJ^k NOUN               k = 1 with p_one_adj = 0.3, k = 2 with
                                                p_two_adj = 0.1 (distinct), else k = 0
    DET         -> "the"                        with p_det_the = 0.65
                 | "a"/"an" (sg) | "some" (pl)  with p_det_indefinite = 0.25 ("an" before a vowel letter)
                 | "this" (sg) | "these" (pl)   otherwise (0.1)
    NOUN        -> a lemma of the cast (uniform) with p_cast = 0.3, else a Zipf draw; its
                   singular or plural form as the NP's number requires
    PRON_SUBJ   -> he | she | it | they         the form fixed by the antecedent (below)
    PRON_OBJ    -> him | her | it | them
    COP         -> is | are  (present)   was | were  (past; they agree too)
    PREP        -> Uniform{near behind beside with under from above of to inside}
    PREP_F      -> Uniform{in after before near behind}
    ADV         -> Uniform{yesterday today later then suddenly meanwhile soon now}

Numbers: NP_s and NP[any] are plural with p_plural = 0.5. NP[other] has the other number
than its reference (the subject NP_s, or for pron_obj the antecedent) with
p_mismatch = 0.6, else the same number: so in "pp" and "obj_rel" a noun of the other
number stands between subject and verb in a fraction p_mismatch of sentences.

Open classes and Zipf: nouns (236 lemmas), adjectives (80), intransitive verbs (32),
transitive verbs (40). Within a class the lemma of rank r is drawn with probability
``r**-zipf_alpha / sum_s s**-zipf_alpha``, zipf_alpha = 1.2; `seed_vocab` decides which
lemma gets which rank. A word is rare when its expected frequency (`Language.frequency`)
is below rare_threshold = 0.0001. There are no selectional restrictions: any noun can do
anything ("the kettle admires the dukes"); meaning is not part of this language.

Gender: nouns are masculine (king, uncle), feminine (queen, aunt), or neuter (objects and
places); nouns for people and animals whose gender English leaves open (teacher, cat) get
m or f from `seed_vocab`. The gender is lexical, so "kings" is masculine plural.

Pronoun rule: every pronoun refers to the subject of the previous sentence (if that
subject is itself a pronoun, to that pronoun's antecedent; so the antecedent is always a
noun). Its form is determined by the antecedent: plural -> they/them; singular m -> he/him,
f -> she/her, n -> it. Pronouns never occur in the first sentence of a document, and
sentences with pronouns are never copied.

Ground truth: a verb's `subject` is the head noun of its subject (for the verb of a
subject relative clause, the noun the clause modifies; in pron_subj, the pronoun). Main
verbs are present tense and agree; relative-clause verbs agree when present tense.
"""

from deviating.data.language.document import BOS, EOS, PAD, Document, pack
from headlab.english import EnglishSentence, align_words, load_english  # the English set lives in headlab
from deviating.data.language.grammar import (
    CONSTRUCTIONS, LANGUAGE_VERSION, PRONOUN_CONSTRUCTIONS, Language, LanguageConfig,
)
from deviating.data.language.items import (
    AgreementItem, CopyItem, PronounItem, RareItem, agreement_items, copy_items, pronoun_items,
    rare_items,
)
from deviating.data.language.tokenize import encode, tokenizer
from deviating.data.language.relations import (
    SUBJECT_OR_ANTECEDENT, copy_relation_set, nearest_at_or_before, predictive_relation_set,
    subject_or_antecedent_set, synthetic_relation_set, synthetic_token_frequency,
)
from deviating.data.language.corpus import SyntheticCorpus, corpus_for, synthetic_language

__all__ = [
    "BOS", "EOS", "PAD", "CONSTRUCTIONS", "LANGUAGE_VERSION", "PRONOUN_CONSTRUCTIONS",
    "AgreementItem", "CopyItem", "Document", "EnglishSentence", "Language", "LanguageConfig",
    "PronounItem", "RareItem", "agreement_items", "align_words", "copy_items", "encode",
    "load_english", "pack", "pronoun_items", "rare_items", "tokenizer",
    # for headlab's detectors and atlas
    "SUBJECT_OR_ANTECEDENT", "SyntheticCorpus", "copy_relation_set", "corpus_for", "nearest_at_or_before",
    "predictive_relation_set", "subject_or_antecedent_set", "synthetic_language", "synthetic_relation_set",
    "synthetic_token_frequency",
]
