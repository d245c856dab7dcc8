"""The chapters' prose within its budgets (issue 26): counts, not timings, so a test may assert them.

The counting rules are :mod:`prose_budget`'s (``scripts/prose_budget.py``; run it for the table).
The counter itself is tested on small texts first, so that a budget cannot pass by miscounting.
"""

from __future__ import annotations

import pytest

from prose_budget import (BUDGETS, LONG, book_pages, chapter_of, chapter_pages, count, idle_identifiers,
                          markdown_cells, numbered_chapters, outside_exercises, prose_cells, plain_count, prose_blocks, typed_role_heads)

CHAPTERS = numbered_chapters()


def test_the_counter_reads_prose_as_a_reader_does():
    text = ("# A title\n\nOne short sentence. Another one, with a [link](gl-x) and `code`!\n\n"
            "```python\nx = 1  # code is not prose\n```\n\n| a | b |\n|---|---|\n| 1 | {glue:text}`n` |\n\n"
            "$$\na = b\n$$\n\n<!-- a comment -->\n- a list item\n\n"
            "```{admonition} A box\n:class: tip\nProse inside {glue:text}`m:.2f` counts.\n```\n")
    c = count([text])
    # sentences: the title, two in the paragraph, the list item, the box's title line is an option-free
    # argument (not prose), its body one sentence
    assert c.sentences == 5
    assert c.words == 2 + 3 + 7 + 3 + 4
    assert c.numbers == 1  # the glued value in the box, not the one in the table
    assert "x = 1" not in " ".join(prose_blocks(text)) and "a comment" not in " ".join(prose_blocks(text))


def test_the_exercises_text_is_outside_the_budget():
    cells = ["Prose before.", "```{exercise-start} Do it ★☆☆\n:label: ex-01-x\n```\n\nA long task text.",
             "```{exercise-end}\n```", "```{solution-start} ex-01-x\n:class: dropdown\n```",
             "```{solution-end}\n```", "Prose after.",
             "```{exercise-start} Two cells ★☆☆\n:label: ex-01-y\n```", "More task text.", "```{exercise-end}\n```"]
    assert outside_exercises(cells) == ["Prose before.", "Prose after."]
    assert count(outside_exercises(cells)).words == 4 < count(cells).words


def test_the_counter_finds_a_long_sentence():
    long = " ".join(["word"] * (LONG + 1)) + "."
    assert count([long]).long == 1 and count(["Short. " * 3]).long == 0


def test_the_book_fits_its_word_budget():
    words = {p.stem: count(prose_cells(p)).words for p in CHAPTERS}
    assert len({chapter_of(p) for p in CHAPTERS}) == 9, f"expected the nine numbered chapters, found {sorted(words)}"
    assert sum(words.values()) <= BUDGETS["book_words"], (
        f"the nine chapters hold {sum(words.values())} words of prose (budget {BUDGETS['book_words']}): {words}")


def test_the_book_has_few_long_sentences():
    examples = {p.stem: count(markdown_cells(p)).long_examples for p in CHAPTERS}
    total = sum(len(v) for v in examples.values())
    shown = [f"{k}: {s}" for k, v in examples.items() for s in v][:10]
    assert total <= BUDGETS["book_long_sentences"], (
        f"{total} sentences over {LONG} words (at most {BUDGETS['book_long_sentences']}); split them:\n"
        + "\n".join(shown))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_each_chapter_fits_its_budget(notebook):
    """Per page: a chapter over budget is split into pages (chapter 7 has two), each within it."""
    c = count(prose_cells(notebook))
    problems = []
    if c.words > BUDGETS["chapter_words"]:
        problems.append(f"{c.words} words (at most {BUDGETS['chapter_words']})")
    if c.mean_sentence > BUDGETS["mean_sentence"]:
        problems.append(f"a mean sentence of {c.mean_sentence:.1f} words (at most {BUDGETS['mean_sentence']})")
    if c.numbers > BUDGETS["chapter_numbers"]:
        problems.append(f"{c.numbers} computed numbers in the prose (at most {BUDGETS['chapter_numbers']}): "
                        "put them in a table or a figure")
    assert not problems, f"{notebook.stem}: " + "; ".join(problems)


# ------------------------------------------------------------- the same budgets by the plain rule

PAGES = book_pages()


def test_the_plain_count_reads_fences_away_and_runs_on_at_headings_and_tables():
    cells = ["# A title\n\nOne short sentence. Another one!",
             "```python\nx = 1  # never counted\n```\n:::{note}\nNor this.\n:::\n| a | b |\n|---|---|\n| 1 | 2 |"]
    c = plain_count(cells)
    # "# A title One short sentence." (6 tokens) / "Another one!" (2) / the table's rows (5 + 1 + 5),
    # which run on with no full stop; the fenced blocks vanish
    assert (c.words, c.sentences) == (6 + 2 + 11, 3)
    assert plain_count([" ".join(["w"] * LONG) + "."]).long == 0
    assert plain_count(["| x |\n" * 14]).long == 1  # a table of 42 tokens is one long run-on


def test_the_chapters_fit_the_word_budget_by_the_plain_count():
    pages = chapter_pages()
    words = {p.stem: plain_count(prose_cells(p)).words for p in pages}
    assert len({chapter_of(p) for p in pages}) == 9, sorted(words)
    assert sum(words.values()) <= BUDGETS["book_words"], (
        f"chapters 1-9 hold {sum(words.values())} words by the plain count (budget {BUDGETS['book_words']}): {words}")


def test_the_whole_book_has_few_long_sentences_by_the_plain_count():
    examples = [f"{p.stem}: {s}" for p in PAGES for s in plain_count(markdown_cells(p)).long_examples]
    assert len(examples) <= BUDGETS["book_long_sentences"], (
        f"{len(examples)} runs of over {LONG} words between full stops in the book (at most "
        f"{BUDGETS['book_long_sentences']}); end a list item or a heading's first sentence sooner, or put a "
        "table in a captioned {table} directive:\n" + "\n".join(examples[:15]))


@pytest.mark.parametrize("notebook", PAGES, ids=lambda p: p.stem)
def test_each_page_fits_its_budget_by_the_plain_count(notebook):
    c = plain_count(prose_cells(notebook))
    assert c.words <= BUDGETS["chapter_words"], f"{notebook.stem}: {c.words} words"
    assert c.mean_sentence <= BUDGETS["mean_sentence"], (
        f"{notebook.stem}: a mean sentence of {c.mean_sentence:.1f} words by the plain count "
        f"(at most {BUDGETS['mean_sentence']})")


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_a_head_named_with_a_role_is_glued_not_typed(notebook):
    """One name per head (issue 26, item 4): where the prose names a head with its role, the id comes
    from the role's labels (headlab.roles) through glue, so the text cannot drift from the definition."""
    typed = typed_role_heads(markdown_cells(notebook))
    assert not typed, (f"{notebook.stem}: {len(typed)} sentences type a head id beside a role; glue it from "
                       "the role's labels instead:\n" + "\n".join(typed[:5]))


def test_the_role_scan_finds_a_typed_head_and_passes_a_glued_one():
    assert typed_role_heads(["The previous-token head 0.0 attends back."])
    assert typed_role_heads(["The induction head is `1.3`."])
    assert not typed_role_heads(["The previous-token head {glue:text}`prev_head` attends back."])
    assert not typed_role_heads(["Its lift is 0.39, below the threshold of a previous-token head."])


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_a_library_identifier_in_prose_is_one_to_call(notebook):
    idle = idle_identifiers(markdown_cells(notebook))
    assert not idle, (f"{notebook.stem}: {len(idle)} sentences name a library identifier without telling the "
                      "reader to call it; say what to call, or describe it in words:\n" + "\n".join(idle[:5]))


def test_the_identifier_scan_tells_a_call_from_a_name():
    assert idle_identifiers(["The result is `headlab.analysis.sweep.sweep`'s."])
    assert not idle_identifiers(["Call `headlab.analysis.sweep.sweep(hm, texts)` to ablate every head."])
