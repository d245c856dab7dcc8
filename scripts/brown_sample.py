"""Write the held-out Brown sample that ships with the book (deviating.data.brown_sample).

    python scripts/brown_sample.py            # brown-attn-2l's evaluation data, 128 windows

It needs the cached corpus (python -m deviating fetch-brown) and trains the recipe's tokenizer
(about 20 s).
"""

from __future__ import annotations

import argparse

from deviating.data.brown_sample import sample_path, save_eval
from deviating.training.recipes import RECIPES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="brown-attn-2l", help="a Brown recipe (its task's tokenizer and context)")
    args = parser.parse_args()
    if args.recipe not in RECIPES or RECIPES[args.recipe].task.kind != "brown_windows":
        brown = sorted(n for n, r in RECIPES.items() if r.task.kind == "brown_windows")
        parser.error(f"--recipe {args.recipe!r} is not a Brown recipe; choose from {', '.join(brown)}")
    recipe = RECIPES[args.recipe]
    path = save_eval(recipe.task.eval_data(recipe.eval_size), sample_path(recipe.task, recipe.eval_size))
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
