"""The README's library example runs as written (it is the first code a researcher copies)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "README.md should show a Python example of the library"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    # the example's comments state these shapes; keep them true
    assert tuple(namespace["cache"].pattern(2).shape[:2]) == (2, 12)
    assert tuple(namespace["result"].by_head().shape) == (6, 12, 2)
