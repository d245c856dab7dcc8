"""The claims ledger: every claim of the seeds, where the book measures it, and the verdict.

A chapter measures claims and ends with :func:`report`, which shows its verdict
table and, when the book is built (``scripts/build_book.py`` and
``scripts/execute_notebooks.py`` set ``HEADLAB_WRITE_CLAIMS=1``), writes the same rows
to ``<chapter>.json`` in :func:`claims_dir`: ``headlab/results/claims``, shipped with the
package, so the ledger page runs anywhere (Colab, an installed wheel). A reader's or a
student's run only shows the table: it never writes into the book's files. The ledger page
is generated from those files, never typed by hand, and a test checks that each file agrees
with the table its chapter shows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import os

from headlab.schema import check_schema, schema_of

__all__ = ["CLAIMS", "VERDICTS", "Verdict", "report", "markdown_table", "load_all", "claims_dir", "book_root",
           "SCHEMA"]

SCHEMA = schema_of("claims")  # <claims dir>/<chapter>.json: {"schema", "chapter", "rows"}
WRITE_ENV = "HEADLAB_WRITE_CLAIMS"  # set by the book build: report() writes the chapter's rows
DIR_ENV = "HEADLAB_CLAIMS_DIR"  # another folder for the rows (tests)

CLAIMS: dict[str, str] = {
    "C1": "One projection must serve every relation (a single head is a bottleneck)",
    "C2": "Splitting into heads keeps the cost near O(n² d)",
    "C3": "Positional heads exist (previous token, first token, fixed offsets)",
    "C4": "Syntactic heads are content-based, not position-based",
    "C5": "Induction needs two layers",
    "C6": "Punctuation heads are reused by other heads",
    "C7": "Orphan heads can matter",
    "C8": "Head importance is long-tailed",
    "C9": "Average-case ranking misses the tail",
    "C10": "Pruning by average importance passes average benchmarks and fails the tail",
    "C11": "Single-head ablation underestimates removing a pair",
    "C12": "Averaging heads or distilling the mean pattern is worse than per-head",
    "C13": "A trigger can hijack a strong head, unseen by mean attention",
    "C14": "Specialist heads are stable across seeds",
    "C15": "Most heads are polysemantic; sparse autoencoders find more features than heads",
    "C16": "Narrow heads (small d_head) underperform",
    "C17": "A head's rank (≤ d_head) limits what a single head can do",
    "C18": "Pattern summaries (e.g. entropy) mislead compared with ablation deltas",
    "C19": "Many heads can be pruned with little loss",
    "C20": "Heads matter differently per task type",
}

VERDICTS = ("holds", "holds with conditions", "does not hold here")


@dataclass(frozen=True)
class Verdict:
    """One measured row of the ledger.

    Attributes:
        claim: ``"C1"`` ... ``"C20"``.
        models: which models the measurement ran on.
        measured: the number(s), as the chapter computed them (a short string).
        verdict: one of :data:`VERDICTS`.
        note: the condition or the reason, in one sentence.
    """

    claim: str
    models: str
    measured: str
    verdict: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}: the ledger knows {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")


def claims_dir() -> Path:
    """Where the chapters' verdicts live: ``$HEADLAB_CLAIMS_DIR`` if set, else ``results/claims``
    inside the installed package (in a checkout, ``lib/headlab/results/claims``)."""
    override = os.environ.get(DIR_ENV)
    return Path(override) if override else Path(__file__).resolve().parent / "results" / "claims"


def book_root(start: str | Path | None = None) -> Path | None:
    """The book's repository containing ``start`` (default: the working directory), or ``None``
    outside a checkout (Colab, an installed package)."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_toc.yml").is_file() and (folder / "chapters").is_dir():
            return folder
    return None


def markdown_table(rows: list[Verdict]) -> str:
    """The verdict rows as the Markdown table :func:`report` shows."""
    lines = ["| claim | models | measured | verdict |", "|---|---|---|---|"]
    for r in rows:
        note = f" — {r.note}" if r.note else ""
        lines.append(f"| **{r.claim}** {CLAIMS[r.claim]} | {r.models} | {r.measured} | *{r.verdict}*{note} |")
    return "\n".join(lines)


def report(chapter: str, rows: list[Verdict], write: bool | None = None) -> None:
    """Show the chapter's verdict table and, when the book is built, record it for the ledger.

    ``write=None`` writes only when ``HEADLAB_WRITE_CLAIMS`` is set (the book build sets it), so a
    reader's run never changes the book's files. Returns nothing, so that a notebook cell ending
    in this call shows the table once.
    """
    if not rows:
        raise ValueError("a claims report needs at least one row")
    text = markdown_table(rows)
    if write is None:
        write = os.environ.get(WRITE_ENV, "").strip().lower() not in ("", "0", "false", "no")
    if write:
        folder = claims_dir()
        folder.mkdir(exist_ok=True)
        payload = {"schema": SCHEMA, "chapter": chapter, "rows": [asdict(r) for r in rows]}
        (folder / f"{chapter}.json").write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n",
                                                encoding="utf-8")
    try:
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover
        print(text)
    else:
        display(Markdown(text))


def load_all(folder: str | Path | None = None) -> dict[str, list[dict]]:
    """Every recorded row, by claim id (``C1`` ... ``C20``), each with its chapter.

    Raises:
        FileNotFoundError: no claims folder.
        headlab.schema.SchemaError: a file that is not a claims file, or from a newer headlab.
    """
    folder = Path(folder) if folder is not None else claims_dir()
    if not folder.is_dir():
        raise FileNotFoundError(f"no claims folder {folder}: build the book (scripts/build_book.py) to record "
                                "the chapters' verdicts, or set HEADLAB_CLAIMS_DIR")
    out: dict[str, list[dict]] = {c: [] for c in CLAIMS}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        check_schema(data, "claims", str(path))
        for row in data["rows"]:
            Verdict(**row)  # validates
            out[row["claim"]].append({"chapter": data["chapter"], **row})
    return out
