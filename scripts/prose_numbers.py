"""Find numbers typed into a chapter's prose that no output of the chapter produced.

Every number and head id in a chapter's Markdown must come from the computation: an
output the notebook printed or displayed (text, Markdown, HTML), a value glued with
myst-nb's ``glue``, or a literal the notebook's own code sets (a hyperparameter, a
threshold: a definition, not a result). What is left is an offender: a number typed by
hand, which goes stale when the code changes.

Usage (chapter authors)::

    .venv/bin/python scripts/prose_numbers.py chapters/03_positional_heads/03_positional_heads.ipynb

prints each offender as ``file:cell N: 0.26 in "... (0.26 for head 2.3) ..."``.

What is not checked (the allow-list, kept short and generic):

* code (inline and fenced), math (``$...$``, ``$$...$$``), link targets, HTML tags and
  comments, MyST roles, labels and directive options;
* numbers that are part of a name: ``GPT-2``, ``attn-only-2l``, ``W_Q``, ``C4``, ``ex-03``;
* the numbering of headings and list items (``## 1-2. Ablation deltas``, ``1. First``);
* years (1900-2100) and the number after a structural word: chapter, section, exercise,
  claim, figure, table, layer, step(s), Python;
* an integer directly before a structural noun: ``12 heads``, ``2 layers``, ``3 seeds``,
  ``64 dimensions`` (the model's or the experiment's definition, not a result).

A prose number matches an output number when it is that number rounded to the prose's
decimals (``0.744`` matches ``0.74419``, ``0.26`` does not match ``0.278``), a percentage of
it (``84%`` matches ``0.8412``), or the same head in another notation (``3.6`` matches
``(3, 6)``). Signs are ignored: prose says "a drop of 0.02" for an output of ``-0.02``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from html import unescape
from pathlib import Path

__all__ = ["Offender", "Printed", "prose_numbers", "output_numbers", "code_literals", "scan_notebook", "scan_cells"]

# A number token in prose: optional sign, digits with optional thousands separators and
# decimals, optional exponent, optional percent. Not glued to a word, a dot, a slash or a hyphen.
_NUMBER = re.compile(
    r"(?<![\w./\\\-−])([-−]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?([eE][-−+]?\d+)?(\s?%)?(?![\w]|\.\d|-[^\W\d])")
# Any number in output text (lenient: inside words too, e.g. "L5H11" gives 5 and 11).
_ANY_NUMBER = re.compile(r"[-−]?\d+(?:\.\d+)?(?:[eE][-−+]?\d+)?")
_HEAD_TUPLE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")

_BEFORE = re.compile(r"(?:chapters?|§|sections?|exercises?|claims?|figures?|fig\.|tables?|layers?|steps?|"
                     r"python|version|v)\s*(?:\d+\s*(?:–|and|to|,)\s*)*$", re.IGNORECASE)
_AFTER = re.compile(r"^\s*(?:heads?|layers?|seeds?|dimensions?|dims?|blocks?|steps?|epochs?)\b", re.IGNORECASE)
# the start of a percentage range, "96 – 100%", is a percentage too
_RANGE_TO_PERCENT = re.compile(r"^\s*–\s*\d+(?:\.\d+)?\s?%")


@dataclass(frozen=True)
class Offender:
    """A number in a Markdown cell that no output produced.

    Attributes:
        path: the notebook.
        cell: index of the Markdown cell in the notebook's cell list.
        number: the number as typed.
        context: the surrounding text.
    """

    path: str
    cell: int
    number: str
    context: str

    def __str__(self) -> str:
        return f"{self.path}:cell {self.cell}: {self.number} in \"{self.context}\""


def _strip_markdown(text: str) -> str:
    """The prose of a Markdown cell with code, math, links targets, markup and numbering removed."""
    t = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    t = re.sub(r"(```+|~~~+|:::+).*?\1", " ", t, flags=re.S)  # fenced code and colon fences' heads
    t = re.sub(r"^\s*```.*$", " ", t, flags=re.M)  # an unclosed fence line
    t = re.sub(r"\$\$.*?\$\$", " ", t, flags=re.S)
    t = re.sub(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", " ", t)
    t = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]", " ", t, flags=re.S)
    t = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", t)  # MyST roles: {glue:text}`name`, {doc}`path`
    t = re.sub(r"`[^`]*`", " ", t)
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)  # keep link text, drop the target
    t = re.sub(r"https?://\S+", " ", t)
    t = re.sub(r"<[^>]+>", " ", t)
    t = re.sub(r"^\s*\([\w-]+\)=\s*$", " ", t, flags=re.M)  # MyST labels
    t = re.sub(r"^\s*:[\w-]+:.*$", " ", t, flags=re.M)  # directive options
    t = re.sub(r"^(\s*#+\s*)[\d.,–\- ]+(?=\s)", r"\1", t, flags=re.M)  # heading numbering
    t = re.sub(r"^(\s*)\d+[.)](?=\s)", r"\1", t, flags=re.M)  # ordered list markers
    t = re.sub(r"(?<![\w.\-])(\d+(?:\.\d+)?)\s?[-–]\s?(?=\d)", r"\1 – ", t)  # ranges 0.40-0.44: both ends
    return t


def _decimals(frac: str | None) -> int:
    return len(frac) - 1 if frac else 0


def prose_numbers(text: str) -> list[tuple[str, float, int, bool, str]]:
    """Numbers in Markdown prose that need a source, as ``(typed, value, decimals, percent, context)``.

    Allow-listed numbers (see the module docstring) are left out.
    """
    t = _strip_markdown(text)
    found = []
    for m in _NUMBER.finditer(t):
        sign, whole, frac, exp, pct = m.groups()
        typed = m.group(0).strip()
        if exp:
            value = float(f"{whole.replace(',', '')}{frac or ''}{exp.replace('−', '-')}")
        else:
            value = float(f"{whole.replace(',', '')}{frac or ''}")
        before, after = t[max(0, m.start() - 20):m.start()], t[m.end():m.end() + 20]
        if not pct and _RANGE_TO_PERCENT.match(after):
            pct = "%"
        is_int = not frac and not exp and not pct
        if is_int and 1900 <= value <= 2100 and len(whole) == 4:
            continue
        if _BEFORE.search(before) and not frac and not pct:
            continue
        if is_int and _AFTER.match(after):
            continue
        context = " ".join(t[max(0, m.start() - 40):m.end() + 40].split())
        found.append((typed, value, _decimals(frac), bool(pct), context))
    return found


def _cell_output_texts(cell: dict) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            texts.append("".join(out.get("text", "")))
        for mime in ("text/plain", "text/markdown", "text/html", "text/latex"):
            data = out.get("data", {}).get(mime)
            if data is not None:
                s = "".join(data) if isinstance(data, list) else str(data)
                texts.append(unescape(re.sub(r"<[^>]+>", " ", s)) if mime == "text/html" else s)
    return texts


def _normal(token: str) -> str:
    """A number token without sign, thousands separators, underscores or percent sign."""
    return token.replace("−", "-").replace(",", "").replace("_", "").replace("%", "").strip().lstrip("-+")


def code_literals(nb: dict) -> set[str]:
    """The numeric literals of the notebook's code (normalised strings): what the code defines."""
    found: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell.get("source", ""))
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            found.update(_normal(t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
                         if t.type == tokenize.NUMBER)
        except (tokenize.TokenError, IndentationError, SyntaxError):
            found.update(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", src))
    return found


@dataclass
class Printed:
    """The numbers some outputs show: normalised strings, and (value, decimals printed) pairs."""

    strings: set[str]
    values: set[tuple[float, int]]


def output_numbers(texts: list[str]) -> Printed:
    """Every number in output texts, plus head ids written ``L.H`` for each ``(L, H)`` pair."""
    printed = Printed(set(), set())
    for text in texts:
        for tok in _ANY_NUMBER.findall(text):
            norm = _normal(tok)
            printed.strings.add(norm)
            mantissa = norm.lower().split("e")[0]
            decimals = 99 if "e" in norm.lower() else (len(mantissa.split(".")[1]) if "." in mantissa else 0)
            v = abs(float(norm))
            if v != float("inf"):
                printed.values.add((v, decimals))
        for layer, head in _HEAD_TUPLE.findall(text):
            printed.strings.add(f"{int(layer)}.{int(head)}")
    return printed


def _matches(typed: str, value: float, decimals: int, percent: bool, printed: Printed) -> bool:
    bare = _normal(typed)
    if not percent and bare in printed.strings:
        return True
    half = 0.5 * 10.0 ** -decimals + 1e-12
    if "e" in bare.lower():  # scientific: the same mantissa at the typed precision
        digits = len(bare.lower().split("e")[0].replace(".", "")) - 1
        return any(v and f"{v:.{digits}e}" == f"{value:.{digits}e}" for v, _ in printed.values)
    for v, dv in printed.values:
        if percent and dv >= decimals + 2 and abs(100 * v - value) <= half:
            return True  # 84% from 0.8412
        if percent and dv >= decimals and abs(v - value) <= half:
            return True  # 84% from 84.1
        if not percent and abs(v - value) <= 1e-12:
            return True  # 0.70 printed as 0.7
        if not percent and dv > decimals and abs(v - value) <= half:
            if decimals == 0 and v < 10:
                continue  # a small count is not "produced" by rounding a fraction
            return True  # 0.744 from 0.7442
    return False


_SECTION = re.compile(r"^#{1,2}\s", re.M)


def scan_cells(nb: dict, path: str = "<notebook>") -> list[Offender]:
    """Offenders in a notebook given as a dict (nbformat 4 JSON).

    A prose number must be shown by an output of its own section (a ``#`` or ``##``
    heading to the next) or be a literal of the notebook's code: a number restated far
    from where it was printed (a summary, an introduction) is typed by hand, and belongs
    in a ``glue`` reference.
    """
    cells = nb.get("cells", [])
    section, sections = 0, []
    for cell in cells:
        if cell.get("cell_type") == "markdown" and _SECTION.search("".join(cell.get("source", ""))):
            section += 1
        sections.append(section)
    texts: dict[int, list[str]] = {}
    for cell, sec in zip(cells, sections):
        if cell.get("cell_type") == "code":
            texts.setdefault(sec, []).extend(_cell_output_texts(cell))
    printed = {sec: output_numbers(t) for sec, t in texts.items()}
    literals = code_literals(nb)
    offenders = []
    for i, (cell, sec) in enumerate(zip(cells, sections)):
        if cell.get("cell_type") != "markdown":
            continue
        here = printed.get(sec, Printed(set(), set()))
        for typed, value, decimals, percent, context in prose_numbers("".join(cell.get("source", ""))):
            if not percent and _normal(typed) in literals:
                continue
            if not _matches(typed, value, decimals, percent, here):
                offenders.append(Offender(path, i, typed, context))
    return offenders


def scan_notebook(path: str | Path) -> list[Offender]:
    """Offenders in a notebook file."""
    p = Path(path)
    return scan_cells(json.loads(p.read_text(encoding="utf-8")), str(p))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", help="chapter notebooks (.ipynb)")
    args = parser.parse_args(argv)
    total = 0
    for nb in args.notebooks:
        found = scan_notebook(nb)
        total += len(found)
        for o in found:
            print(o)
        print(f"{nb}: {len(found)} number(s) typed into prose that no output produced", file=sys.stderr)
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())
