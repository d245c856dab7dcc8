"""Catching a reader's function that calls the library's own answer instead of computing it."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator, Sequence

__all__ = ["CallGuard", "forbidden_message"]


class CallGuard:
    """Notes the first call, during the reader's function, into a module it must not use.

    ``sys.setprofile`` sees every Python-level call in this thread, however the reader
    reached the function (an import in the stub, an alias, a setup-cell name). Importing a
    forbidden module is no call: its module and class bodies, and the functions it calls while
    it loads, are not counted.
    """

    def __init__(self, forbid: Sequence[str]):
        self.forbid = tuple(forbid)
        self.hit: str | None = None

    def __call__(self, frame, event, arg):  # noqa: ANN001, ARG002 (sys.setprofile's signature)
        # Only functions count: a module or class body (not CO_OPTIMIZED) runs when a module is imported
        if event != "call" or self.hit is not None or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            return
        module = frame.f_globals.get("__name__", "") or ""
        if any(module == f or module.startswith(f + ".") for f in self.forbid) and not _importing(frame):
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


def _importing(frame) -> bool:  # noqa: ANN001
    """Whether ``frame`` runs as part of an import (a function a module calls while it loads)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def forbidden_message(name: str, hit: str) -> str:
    """The message of a check whose reader's function ``name`` called ``hit``, a forbidden function."""
    return (f"{name} calls {hit}, the book's own implementation of what this exercise asks for: "
            "write the computation yourself in the stub (numpy/torch are fine; this part of headlab is not).")
