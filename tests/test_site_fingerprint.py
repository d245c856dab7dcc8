"""The site's source fingerprint (scripts/site_fingerprint.py): a test run reuses a built site only
while nothing it was built from has changed."""

from __future__ import annotations

import shutil

import site_fingerprint
from site_fingerprint import fingerprint, is_current, write


def _tree(tmp_path):
    root = tmp_path / "book"
    (root / "chapters" / "01").mkdir(parents=True)
    (root / "chapters" / "01" / "a.ipynb").write_text('{"cells": []}')
    (root / "lib" / "headlab").mkdir(parents=True)
    (root / "lib" / "headlab" / "x.py").write_text("X = 1\n")
    (root / "_toc.yml").write_text("root: intro\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("def test(): pass\n")
    site = root / "_build" / "html"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html></html>")
    return root, site


def test_a_site_is_current_until_a_source_changes(tmp_path):
    root, site = _tree(tmp_path)
    assert not is_current(site, root)  # never stamped
    write(site, root)
    assert is_current(site, root)
    (root / "tests" / "test_x.py").write_text("def test(): assert True\n")  # tests do not shape the site
    assert is_current(site, root)
    (root / "chapters" / "01" / "a.ipynb").write_text('{"cells": [1]}')  # a stored output changed
    assert not is_current(site, root)
    write(site, root)
    (root / "lib" / "headlab" / "y.py").write_text("")  # a new module
    assert not is_current(site, root)


def test_the_hash_follows_names_and_contents_not_the_folder(tmp_path):
    root, _ = _tree(tmp_path)
    other = tmp_path / "copy"
    shutil.copytree(root, other)
    assert fingerprint(root) == fingerprint(other)
    (other / "_toc.yml").rename(other / "_config.yml")  # same bytes under another name
    assert fingerprint(root) != fingerprint(other)


def test_a_half_written_site_is_not_current(tmp_path):
    root, site = _tree(tmp_path)
    write(site, root)
    (site / "index.html").unlink()
    assert not is_current(site, root)
    assert site_fingerprint.NAME.startswith(".")  # served sites hide it
