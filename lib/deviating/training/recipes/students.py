"""Chapter 7's distillation student (:func:`deviating.training.distill.distill`, run by
:func:`deviating.experiments.students.distill_students`).

``distill-student`` is trained with and without attention transfer from ``organism-small-s0``:
half the width of the small organism (``d_model`` 64, ``d_mlp`` 256), the same 2 layers x 4
heads, so that every student head has a teacher head; half its steps. Not a shipped organism:
its runs live in ``deviating/results/`` with their provenance.
"""

from __future__ import annotations

from deviating.training.recipe import Recipe
from deviating.training.recipes.organisms import language_recipe

__all__ = ["STUDENTS"]

STUDENTS: dict[str, Recipe] = {r.name: r for r in [
    language_recipe("distill-student", "a 2-layer x 4-head GPT of half the small organism's width, the "
                    "student of chapter 7's attention-transfer distillation", steps=1500,
                    d_model=64, n_layers=2, n_heads=4, d_mlp=256),
]}
