"""The claims ledger: every common claim about heads, where the book measures it, and the verdict.

A chapter measures a claim as a :class:`deviating.verdicts.ClaimRow` (the effect, its 95% interval,
n, the seeds, the null or baseline, the conditions tested) and the verdict follows from those
numbers by the one rule of :mod:`deviating.verdicts`; nobody types a verdict.

A chapter measures claims and ends with :func:`report`, which shows its verdict
table and, when the book is built (``scripts/build_book.py`` and
``scripts/execute_notebooks.py`` set ``HEADLAB_WRITE_CLAIMS=1``), writes the same rows
to ``<chapter>.json`` in :func:`claims_dir`: ``deviating/results/claims``, shipped with the
package, so the ledger page runs anywhere (Colab, an installed wheel). A reader's or a
student's run only shows the table: it never writes into the book's files. The ledger page
is generated from those files, never typed by hand, and a test checks that each file agrees
with the table its chapter shows.
"""

from __future__ import annotations

import html
import json
import math
import os
import warnings
from dataclasses import asdict, dataclass
import re
from pathlib import Path

from headlab.schema import check_schema, schema_of
from deviating.removed import removed_entry
from deviating.verdicts import KINDS, ClaimRow, Judgement, from_json, named_condition_failing, to_json, verdict

__all__ = ["CLAIMS", "VERDICTS", "Verdict", "report", "markdown_table", "load_all", "summary", "measured_text",
           "claims_dir", "book_root", "SCHEMA", "badge", "model_key", "disagreements", "reasoning_text",
           "number_text"]

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

VERDICTS = KINDS  # the rule's verdicts, refusals included (deviating.verdicts)



@dataclass(frozen=True)
class Verdict:
    """A row whose verdict was typed by hand (headlab 0.1). Deprecated: build a
    :class:`deviating.verdicts.ClaimRow` from measured numbers, and the rule gives the verdict.

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


def number_text(x: float) -> str:
    """A number as the ledger prints it: three significant digits, infinities as ∞ and −∞."""
    if not math.isfinite(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.3g}"


def measured_text(row: ClaimRow) -> str:
    """The headline number of a measured row, with its interval, its unit and n, the null and the band:
    ``accuracy lead: 0.122 [0.031, 0.21], 185 sentences; null 0 (nearest-mention baseline), no-effect band
    ±0.01 (accuracy)``; a headline over seeds reads ``3 seeds (0, 1, 2)``, and one whose seeds gave
    the same number says so (one measurement, no spread to make an interval of)."""
    h = row.headline
    seeds = row.seeds
    if h.seed is None and len(seeds) > 1 and h.n == len(seeds) and h.low == h.high:
        per = f"the same on each of {h.n} seeds ({', '.join(map(str, seeds))}): one measurement"
    elif h.seed is None and len(seeds) > 1 and h.n == len(seeds):
        per = f"{h.n} seeds ({', '.join(map(str, seeds))})"
    else:
        per = f"{h.n} {row.items}" + (f", seed {seeds[0]}" if len(seeds) == 1 else
                                      f", seeds {', '.join(map(str, seeds))}" if seeds else "")
    try:
        unit = row.unit_for(h.condition if h.condition in row.units else row.conditions[0])
        lo, hi = row.band_for(row.conditions[0])
        band = f", no-effect band ±{(hi - lo) / 2:g} ({unit})"
    except ValueError:
        band = ""
    interval = "" if h.low == h.high else f" [{number_text(h.low)}, {number_text(h.high)}]"
    return (f"{row.quantity}: {number_text(h.effect)}{interval}, {per}; "
            f"null {row.null:g} ({row.null_label}){band}")


def _as_entry(row: ClaimRow | Verdict) -> dict:
    """The JSON form of one row: a measured row with its numbers and the rule's verdict, or a
    hand-typed (0.1) row marked ``typed``."""
    if isinstance(row, ClaimRow):
        if row.claim not in CLAIMS:
            raise ValueError(f"unknown claim {row.claim!r}: the ledger knows {', '.join(CLAIMS)}")
        return {"kind": "measured", **to_json(row)}
    if isinstance(row, Verdict):
        return {"kind": "typed", **asdict(row)}
    if isinstance(row, dict):  # a stored row (as a claims file holds it): validated by summary()
        entry = row if "kind" in row else {"kind": "typed", **row}
        summary(entry)
        return entry
    raise TypeError(f"a ledger row is a deviating.verdicts.ClaimRow (or a 0.1 Verdict), got {type(row).__name__}")


def summary(entry: dict) -> dict:
    """One stored row (as :func:`load_all` returns it) in the columns the ledger shows:
    ``claim``, ``chapter``, ``models``, ``measured``, ``verdict``, ``note``, ``typed`` (True when
    the verdict was typed by hand rather than given by the rule), and for measured rows the
    ``row`` (:class:`~deviating.verdicts.ClaimRow`) and ``reason``."""
    if entry.get("kind", "typed") == "typed":
        return {"claim": entry["claim"], "chapter": entry.get("chapter"), "models": entry["models"],
                "measured": entry["measured"], "verdict": entry["verdict"], "note": entry.get("note", ""),
                "typed": True}
    row = from_json({k: v for k, v in entry.items() if k not in ("kind", "chapter")})
    judgement = verdict(row)
    note = reasoning_text(judgement) + (f"; {row.note}" if row.note else "")
    return {"claim": row.claim, "chapter": entry.get("chapter"), "models": row.model, "measured": measured_text(row),
            "verdict": judgement.kind, "note": note, "typed": False, "row": row, "reason": judgement.reason,
            "judgement": judgement}


def reasoning_text(judgement: Judgement) -> str:
    """Why a row got its verdict, in one line: the primary endpoint or named condition that decided
    it, if one did; conditions held out of judged (after Holm's correction) and those that hold;
    those significant but inside the band, held on each seed only, or reported beside the row.
    For a refused row, the refusal."""
    if judgement.kind == "cannot be judged":
        return judgement.reason
    text = f"{judgement.held} of {judgement.tested} conditions hold (Holm)"
    if named_condition_failing(judgement):
        text = f"{judgement.reason.split('; holds in ', 1)[0]}; {text}"
    if judgement.holds_under and judgement.held < judgement.tested:
        text += f": {', '.join(judgement.holds_under)}"
    if judgement.small_under:
        text += f"; significant but inside the band: {', '.join(judgement.small_under)}"
    if judgement.each_under:
        text += f"; on each seed only: {', '.join(judgement.each_under)}"
    beside = [c["condition"] for c in judgement.conditions if c.get("status") == "beside"]
    if beside:
        text += f"; {len(beside)} beside the row, not counted"
    return text


def claims_dir() -> Path:
    """Where the chapters' verdicts live: ``$HEADLAB_CLAIMS_DIR`` if set, else ``results/claims``
    inside the installed package (in a checkout, ``lib/deviating/results/claims``)."""
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


def markdown_table(rows: list[ClaimRow | Verdict | dict]) -> str:
    """The rows as the Markdown table :func:`report` shows: the claim, the verdict (the rule's, or
    marked "typed" for a 0.1 row), the measured number with its interval, n, seeds and null, and the model."""
    lines = ["| claim | verdict | measured | models |", "|---|---|---|---|"]
    for entry in map(_as_entry, rows):
        s = summary(entry)
        note = f" — {s['note']}" if s["note"] else ""
        typed = " (typed)" if s["typed"] else ""
        lines.append(f"| **{s['claim']}** {CLAIMS[s['claim']]} | *{s['verdict']}*{typed}{note} | {s['measured']} "
                     f"| {s['models']} |")
    return "\n".join(lines)


def report(chapter: str, rows: list[ClaimRow | Verdict], write: bool | None = None) -> None:
    """Show the chapter's verdict table and, when the book is built, record it for the ledger.

    ``write=None`` writes only when ``HEADLAB_WRITE_CLAIMS`` is set (the book build sets it), so a
    reader's run never changes the book's files. Returns nothing, so that a notebook cell ending
    in this call shows the table once.
    """
    if not rows:
        raise ValueError("a claims report needs at least one row")
    for r in rows:
        gone = isinstance(r, ClaimRow) and removed_entry(r.claim, chapter, r.quantity)
        if gone:
            raise ValueError(f"{chapter}: the {r.claim} row {r.quantity!r} was removed from the ledger "
                             f"(deviating.removed.REMOVED): {gone['why']} Show the number without reporting it.")
    entries = [_as_entry(r) for r in rows]
    if any(e["kind"] == "typed" for e in entries):
        warnings.warn(f"{chapter}: a verdict typed by hand (deviating.ledger.Verdict); build a "
                      "deviating.verdicts.ClaimRow from the measured numbers instead", DeprecationWarning, stacklevel=2)
    text = markdown_table(rows)
    if write is None:
        write = os.environ.get(WRITE_ENV, "").strip().lower() not in ("", "0", "false", "no")
    if write:
        folder = claims_dir()
        folder.mkdir(exist_ok=True)
        payload = {"schema": SCHEMA, "chapter": chapter, "rows": entries}
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
            row = row if "kind" in row else {"kind": "typed", **row}  # headlab.claims/1 rows were all typed
            summary(row)  # validates: a typed row's fields, or a measured row's numbers and verdict
            out[row["claim"]].append({"chapter": data["chapter"], **row})
    return out


# ---------------------------------------------------------------------------- badges (the page: deviating.ledger_page)

BADGE_CLASS = {"holds": "verdict-holds", "holds with conditions": "verdict-conditions",
               "held in each network trained": "verdict-each", "significant but inside the band": "verdict-small",
               "inconclusive": "verdict-inconclusive",
               "does not hold here": "verdict-fails", "cannot be judged": "verdict-refused"}


def badge(verdict: str, typed: bool = False) -> str:
    """A verdict as an HTML badge, coloured by kind *and* spelled out (the site's ``_static/book.css``
    styles the ``verdict-*`` classes), e.g. ``<span class="verdict verdict-holds">holds</span>``."""
    if verdict not in BADGE_CLASS:
        raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
    label = verdict + (" (typed by hand)" if typed else "")
    return f'<span class="verdict {BADGE_CLASS[verdict]}">{html.escape(label)}</span>'


# The models the book measures, most specific first: what a row's free-text "model" is about.
_MODEL_NAMES = ("organism-small", "ioi-gpt", "attn-only-1l", "attn-only-2l", "tiny-attn-2l", "two-relations", "heads-",
                "brown-attn-2l", "brown-gpt", "organism", "minilm", "gpt-2", "gpt2", "pythia", "bert", "llama")


def model_key(model: str) -> str:
    """The model a row's ``model`` text names (``"MiniLM, English set, held out"`` → ``"minilm"``),
    so that rows on the same model can be compared across chapters; ``"other"`` if none is named."""
    text = model.lower()
    hits = [(text.find(name), -len(name), name) for name in _MODEL_NAMES if name in text]
    if not hits:
        return "other"
    name = min(hits)[2]
    return {"gpt2": "gpt-2", "heads-": "heads-n"}.get(name, name)


def _quantity(s: dict) -> str:
    return s["row"].quantity if s.get("row") is not None else ""


def disagreements(ledger: dict[str, list[dict]]) -> list[dict]:
    """Claims judged differently on the same model: one entry per (claim, model) with more than one
    verdict, listing each row's chapter, model text and verdict. ``stated`` is True when the rows
    describe the model or data, or the quantity measured, differently (the condition that differs is
    written in them), False when identical descriptions carry different verdicts — a contradiction to
    fix."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for claim, rows in ledger.items():
        for entry in rows:
            s = summary(entry)
            groups.setdefault((claim, model_key(s["models"])), []).append(s)
    out = []
    for (claim, key), rows in groups.items():
        if len({r["verdict"] for r in rows}) > 1:
            by_text: dict[tuple[str, str], set[str]] = {}
            for r in rows:
                by_text.setdefault((r["models"], _quantity(r)), set()).add(r["verdict"])
            out.append({"claim": claim, "model": key, "stated": all(len(v) == 1 for v in by_text.values()),
                        "rows": [{"chapter": r["chapter"], "models": r["models"], "quantity": _quantity(r),
                                  "verdict": r["verdict"]} for r in rows]})
    return out
