#!/usr/bin/env python3
"""Write the glossary's "Introduced in" pointers from the chapters: ``python scripts/glossary_pointers.py [--check]``.

Each entry of ``chapters/glossary.md`` (a ``(gl-name)=`` target and its ``###`` heading) says where
the book first uses the term: the first link ``[...](gl-name)`` in the chapters' prose, read in the
order of ``_toc.yml``, with the section (the last ``##`` or ``###`` heading above it). The pointer is
written here, never by hand, so it cannot go stale when a chapter moves a paragraph; ``--check``
exits non-zero when the glossary differs from what this would write (``tests/test_glossary.py``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from book_toc import toc_files  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "chapters" / "glossary.md"
POINTER = re.compile(r"\*Introduced in\*\s+\{doc\}`[^`]*`(?:,\s+\"[^\"]*\")?\.?|\*Not yet used in a chapter\.\*",
                     re.S)
ENTRY = re.compile(r"^\((gl-[\w-]+)\)=\s*$", re.M)
LINK = re.compile(r"\]\((gl-[\w-]+)\)")
HEADING = re.compile(r"^#{2,3}\s+(.+?)\s*$")


def chapter_pages() -> list[str]:
    """The docnames of the chapters (``chapters/NN_x/...``) in the order of _toc.yml."""
    return [f for f in toc_files() if re.match(r"chapters/\d\d_", f)]


def first_uses() -> dict[str, tuple[str, str]]:
    """gl-name -> (docname, section title) of its first link in the chapters."""
    found: dict[str, tuple[str, str]] = {}
    for docname in chapter_pages():
        path = ROOT / f"{docname}.ipynb"
        if not path.is_file():
            continue
        section = ""
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for line in "".join(cell["source"]).splitlines():
                if m := HEADING.match(line):
                    section = re.sub(r"[*_`]", "", m.group(1))
                for name in LINK.findall(line):
                    found.setdefault(name, (docname, section))
    return found


def pointer(docname: str, section: str) -> str:
    number = int(re.match(r"chapters/(\d\d)", docname).group(1))
    where = f"*Introduced in* {{doc}}`chapter {number} </{docname}>`"
    return f"{where}, \"{section}\"." if section else f"{where}."


def rewritten(text: str, uses: dict[str, tuple[str, str]]) -> str:
    """The glossary with every entry's pointer replaced (or added at the end of its definition)."""
    parts = ENTRY.split(text)  # [preamble, name, body, name, body, ...]
    out = [parts[0]]
    for name, body in zip(parts[1::2], parts[2::2]):
        new = pointer(*uses[name]) if name in uses else "*Not yet used in a chapter.*"
        if POINTER.search(body):
            body = POINTER.sub(lambda _: new, body, count=1)
        else:
            # the end of this entry's definition: the next target or the next section heading
            end = re.search(r"\n\n(?=\(|#)", body)
            head, tail = (body[:end.start()], body[end.start():]) if end else (body, "")
            body = head.rstrip("\n") + " " + new + (tail if tail else "\n\n")
        out += [f"({name})=", body]
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the glossary is stale")
    args = parser.parse_args(argv)
    text = GLOSSARY.read_text(encoding="utf-8")
    new = rewritten(text, first_uses())
    if args.check:
        if new != text:
            print("glossary_pointers: chapters/glossary.md is stale: run python scripts/glossary_pointers.py",
                  file=sys.stderr)
            return 1
        return 0
    GLOSSARY.write_text(new, encoding="utf-8")
    unused = new.count("*Not yet used in a chapter.*")
    print(f"glossary_pointers: wrote the pointers of {len(ENTRY.findall(new))} entries ({unused} not yet used)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
