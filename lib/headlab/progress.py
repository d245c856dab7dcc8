"""Progress bars that read well wherever a chapter runs, the static website included.

:func:`tqdm` takes tqdm's arguments and returns ``tqdm.auto``'s bar, or a
:class:`TextProgress` (whole lines at the start, each quarter and the end) when the
environment variable ``HEADLAB_PROGRESS`` is ``text``, as the book build sets it.
"""

from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm as auto_tqdm
from tqdm.std import tqdm as _std_tqdm

__all__ = ["tqdm", "TextProgress", "text_mode", "ENV"]

ENV = "HEADLAB_PROGRESS"


def text_mode() -> bool:
    """True when progress is to be printed as lines of text (``HEADLAB_PROGRESS=text``)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "auto", "text"):
        raise ValueError(f"{ENV}={value!r}: use 'text' (lines of text) or 'auto' (tqdm.auto's choice)")
    return value == "text"


class TextProgress(_std_tqdm):
    """A tqdm bar printed as whole lines, with no carriage returns and no widget.

    A line is printed when the bar starts, each time it passes another ``1 / stages`` of
    its total, and when it closes: the percentage, the count, the times and the postfix,
    no bar. A line longer than ``width`` characters continues on an indented second line
    (a page's column is about 78 characters of code wide).
    """

    def __init__(self, *args, stages: int = 4, width: int = 78, **kwargs):
        self._stages, self._shown, self._lines, self._width = stages, None, 0, width
        kwargs.setdefault("file", sys.stdout)
        kwargs.setdefault("bar_format", "{desc}: {percentage:3.0f}% {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}, {rate_fmt}{postfix}]")
        kwargs["dynamic_ncols"] = False
        super().__init__(*args, **kwargs)

    def _wrap(self, line: str) -> str:
        out = []
        while len(line) > self._width:
            cut = line.rfind(", ", 0, self._width)
            if cut <= 0:
                break
            out.append(line[:cut + 1])
            line = "    " + line[cut + 2:]
        return "\n".join([*out, line])

    def display(self, msg=None, pos=None):  # noqa: ARG002 (tqdm's signature)
        stage = int(self._stages * self.n / self.total) if self.total else (0 if self.n == 0 else -1)
        if stage == self._shown and stage != -1:
            return True
        self._shown = stage
        # one line per call; tqdm ends the last one itself when the bar closes
        self.fp.write(("\n" if self._lines else "") + self._wrap(msg if msg is not None else self.__str__()))
        self.fp.flush()
        self._lines += 1
        return True


def tqdm(*args, **kwargs):
    """A progress bar: ``tqdm.auto.tqdm(*args, **kwargs)``, or a :class:`TextProgress` with the
    same arguments when ``HEADLAB_PROGRESS=text``."""
    if text_mode():
        return TextProgress(*args, **kwargs)
    return auto_tqdm(*args, **kwargs)
