"""The one registry of training recipes: :data:`RECIPES`, name -> :class:`~deviating.training.recipe.Recipe`.

Gathered from one module per family, none of which changes another's entries:

* :mod:`~deviating.training.recipes.organisms` (:data:`ORGANISMS`): the model organisms of
  chapters 3-9 (``organism``, ``organism-small-s0..2``, ``attn-only-1l``, ``attn-only-2l``,
  ``tiny-attn-2l``);
* :mod:`~deviating.training.recipes.chapters_1_2` (:data:`CHAPTERS_1_2`): ``two-relations-*`` and
  ``heads-*``;
* :mod:`~deviating.training.recipes.students` (:data:`STUDENTS`): chapter 7's ``distill-student``;
* :mod:`~deviating.training.recipes.width_depth` (:data:`WIDTH_DEPTH`): chapter 8's ``wd-*`` family;
* :mod:`~deviating.training.recipes.brown` (:data:`BROWN`): ``brown-attn-2l`` and its control, attention-only
  models on the Brown Corpus, and ``brown-gpt``, a small GPT on the same text;
* :mod:`~deviating.training.recipes.ioi` (:data:`IOI`): ``ioi-gpt``, a small GPT of English that keeps
  first names whole and resolves indirect objects (chapter 5's second part).

``python -m deviating train NAME`` trains any of them: every shipped checkpoint and every model of
the width/depth sweep.
"""

from __future__ import annotations

from deviating.training.recipe import Recipe
from deviating.training.recipes.brown import BROWN
from deviating.training.recipes.chapters_1_2 import CHAPTERS_1_2
from deviating.training.recipes.ioi import IOI
from deviating.training.recipes.organisms import ORGANISMS
from deviating.training.recipes.students import STUDENTS
from deviating.training.recipes.width_depth import WIDTH_DEPTH

__all__ = ["RECIPES", "ORGANISMS", "CHAPTERS_1_2", "STUDENTS", "WIDTH_DEPTH", "BROWN", "IOI", "get_recipe"]


def _gather(*families: dict[str, Recipe]) -> dict[str, Recipe]:
    out: dict[str, Recipe] = {}
    for family in families:
        for name, recipe in family.items():
            if name in out:
                raise RuntimeError(f"two recipe families define {name!r}: recipe names must be unique")
            out[name] = recipe
    return out


RECIPES: dict[str, Recipe] = _gather(ORGANISMS, CHAPTERS_1_2, STUDENTS, WIDTH_DEPTH, BROWN, IOI)


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; a ``ValueError`` naming every recipe if there is none."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    return RECIPES[name]
