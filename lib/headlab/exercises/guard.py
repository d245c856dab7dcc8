"""Catching a reader's function that calls the library's own answer instead of computing it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence

__all__ = ["CallGuard", "forbidden_message"]


class CallGuard:
    """Notes the first call, during the reader's function, into a module it must not use.

    ``sys.setprofile`` sees every Python-level call in this thread, however the reader
    reached the function (an import in the stub, an alias, a setup-cell name).
    """

    def __init__(self, forbid: Sequence[str]):
        self.forbid = tuple(forbid)
        self.hit: str | None = None

    def __call__(self, frame, event, arg):  # noqa: ANN001, ARG002 (sys.setprofile's signature)
        if event == "call" and self.hit is None and frame.f_code.co_name != "<module>":  # imports are fine
            module = frame.f_globals.get("__name__", "") or ""
            if any(module == f or module.startswith(f + ".") for f in self.forbid):
                self.hit = f"{module}.{frame.f_code.co_name}"

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        if not self.forbid:
            yield
            return
        previous = sys.getprofile()
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(previous)


def forbidden_message(name: str, hit: str) -> str:
    """The message of a check whose reader's function ``name`` called ``hit``, a forbidden function."""
    return (f"{name} calls {hit}, the book's own implementation of what this exercise asks for: "
            "write the computation yourself in the stub (numpy/torch are fine; this part of headlab is not).")
