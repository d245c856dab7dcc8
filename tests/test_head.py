"""The one head type: written forms, JSON form, and what is refused."""

import pytest

from headlab.heads.head import Head, format_head, format_heads, parse_head


@pytest.mark.parametrize("form", [(5, 1), [5, 1], "5.1", " 5 . 1 ", {"layer": 5, "head": 1}, Head(5, 1)])
def test_every_written_form_reads_as_the_same_head(form):
    h = parse_head(form)
    assert h == Head(5, 1) == (5, 1) and str(h) == "5.1" and h.to_json() == [5, 1]


def test_formatting():
    assert format_head((0, 11)) == "0.11"
    assert format_heads([(1, 2), "3.4"]) == "1.2, 3.4" and format_heads([]) == "none"


@pytest.mark.parametrize("bad, error, named", [
    ((1.9, 2.7), TypeError, "1.9"), ((-1, 0), ValueError, "-1"), ((True, 0), TypeError, "True"),
    (("1", 2), TypeError, "'1'"), ("5-1", ValueError, "5-1"), ((1, 2, 3), TypeError, "(1, 2, 3)"),
    ({"layer": 1}, ValueError, "layer"), (None, TypeError, "None"),
])
def test_bad_heads_are_refused_naming_the_value(bad, error, named):
    with pytest.raises(error, match=__import__("re").escape(named)):
        parse_head(bad)
