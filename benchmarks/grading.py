"""Grading time, the isolated grader against the grader before it (issue 40: "grading 30 submissions
takes no more than 1.5x what it takes now").

Both graders run in this one process's run, on the same machine, one after the other and then
again in the other order, each on 30 submissions of one chapter built from *its own* tree: half the
book's solutions, half the blank student edition. The baseline is the tree of ``--base`` (by
default ``1bbb379^``, the last commit before the workers moved into bubblewrap and the checks drew
secret cases), unpacked with ``git archive`` into a temporary folder. Each run's gradebook is read
back, so a run that graded wrongly (a solution below full marks, a blank above zero) fails the
benchmark instead of timing it.

    python benchmarks/grading.py                          # chapter 1, 30 submissions
    python benchmarks/grading.py --n 10 --chapter chapters/03_positional_heads/03_positional_heads.ipynb

Prints the wall time of each run and the ratio new / base (the median of the runs of each), per
submission and per exercise graded: a chapter that gained exercises since the base takes longer for
that reason alone, so the per-exercise ratio is the one that compares the graders.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MAKE_SUBMISSIONS = """
import copy, sys
from pathlib import Path
import nbformat
from deviating.exercises.student import student_notebook
chapter, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
book = nbformat.read(chapter, as_version=4)
for cell in book.cells:
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
blank = nbformat.from_dict(student_notebook(book))
for i in range(n):
    nbformat.write(book if i % 2 == 0 else blank, out / f"student{i:02d}.ipynb")
"""


def _env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree / "lib"), "OMP_NUM_THREADS": "1"}


def _submissions(tree: Path, chapter: str, n: int, folder: Path) -> list[Path]:
    folder.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", MAKE_SUBMISSIONS, str(tree / chapter), str(folder), str(n)],
                   env=_env(tree), cwd=tree, check=True)
    return sorted(folder.glob("*.ipynb"))


def _grade(tree: Path, chapter: str, subs: list[Path], gradebook: Path, new: bool) -> tuple[float, int]:
    cmd = [sys.executable, "-m", "deviating", "grade", *map(str, subs), "--reference", str(tree / chapter),
           "--csv", str(gradebook)]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=_env(tree), cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"grading failed ({'new' if new else 'base'} tree, exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    reader = csv.DictReader(gradebook.open())
    rows = list(reader)
    n_exercises = len([c for c in reader.fieldnames if c.startswith("ex-")])
    if len(rows) != len(subs):
        raise SystemExit(f"the gradebook has {len(rows)} rows for {len(subs)} submissions: {gradebook}")
    for row in rows:
        got, full = float(row["total"]), float(row["max"])
        even = int(Path(row["submission"]).stem[-2:]) % 2 == 0
        if (even and got != full) or (not even and got != 0):
            raise SystemExit(f"{'new' if new else 'base'} grader gave {got}/{full} to {row['submission']}, "
                             f"expected {'full marks (solutions)' if even else '0 (blank)'}")
    return seconds, n_exercises


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="1bbb379^", help="the commit of the baseline grader")
    parser.add_argument("--chapter", default="chapters/01_one_operation/01_one_operation.ipynb")
    parser.add_argument("--n", type=int, default=30, help="submissions per run (half solutions, half blank)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each grader, alternating")
    args = parser.parse_args()
    if args.n < 2 or args.repeats < 1:
        parser.error(f"--n must be at least 2 and --repeats at least 1, got {args.n} and {args.repeats}")
    with tempfile.TemporaryDirectory(prefix="gradebench-") as tmp:
        tmp = Path(tmp)
        base = tmp / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        trees = {"base": base, "new": ROOT}
        subs = {name: _submissions(tree, args.chapter, args.n, tmp / f"subs-{name}") for name, tree in trees.items()}
        times: dict[str, list[float]] = {"base": [], "new": []}
        exercises: dict[str, int] = {}
        for r in range(args.repeats):
            for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
                s, exercises[name] = _grade(trees[name], args.chapter, subs[name], tmp / f"{name}-{r}.csv",
                                            name == "new")
                times[name].append(s)
                print(f"run {r + 1}, {name:4}: {args.n} submissions of {Path(args.chapter).stem} "
                      f"({exercises[name]} exercises each) graded in {s:6.1f} s", flush=True)
        base, new = statistics.median(times["base"]), statistics.median(times["new"])
        per = (new / exercises["new"]) / (base / exercises["base"])
        print(f"median: base {base:.1f} s ({exercises['base']} exercises a submission), new {new:.1f} s "
              f"({exercises['new']}); new / base = {new / base:.2f} a submission, {per:.2f} an exercise graded "
              "(the issue's bound: 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
