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


def test_a_pointer_added_to_the_last_entry_of_a_section_stays_in_it():
    """A new pointer goes at the end of the definition, never after the next section's heading
    (the glossary once read "## Beyond heads *Introduced in* ...")."""
    text = "(gl-a)=\n### A\n\nA thing.\n\n## Next section\n\n(gl-b)=\n### B\n\nAnother.\n"
    got = rewritten(text, {"gl-a": ("chapters/01_x/01_x", "S"), "gl-b": ("chapters/02_y/02_y", "")})
    assert "A thing. *Introduced in* {doc}`chapter 1 </chapters/01_x/01_x>`, \"S\".\n\n## Next section\n" in got
    assert "## Next section\n\n(gl-b)=" in got
