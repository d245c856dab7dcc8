"""The glossary's "Introduced in" pointers are generated from the chapters (scripts/glossary_pointers.py)."""

from __future__ import annotations

from glossary_pointers import GLOSSARY, first_uses, rewritten


def test_the_glossary_points_where_the_chapters_first_use_each_term():
    text = GLOSSARY.read_text(encoding="utf-8")
    assert rewritten(text, first_uses()) == text, (
        "chapters/glossary.md's 'Introduced in' pointers are stale: run `python scripts/glossary_pointers.py`")


def test_pointers_are_replaced_added_and_marked_unused():
    text = ("# Glossary\n\n(gl-a)=\n### A\n\nA thing. *Introduced in* {doc}`chapter 3 </chapters/03_x/03_x>`, "
            "\"Old\".\n\n(gl-b)=\n### B\n\nAnother thing.\n\n(gl-c)=\n### C\n\nA third.\n")
    uses = {"gl-a": ("chapters/05_y/05_y", "New section"), "gl-b": ("chapters/00_z/z", "")}
    got = rewritten(text, uses)
    assert "A thing. *Introduced in* {doc}`chapter 5 </chapters/05_y/05_y>`, \"New section\".\n" in got
    assert "Another thing. *Introduced in* {doc}`chapter 0 </chapters/00_z/z>`.\n" in got
    assert "A third. *Not yet used in a chapter.*\n" in got
    assert rewritten(got, uses) == got  # running twice changes nothing
