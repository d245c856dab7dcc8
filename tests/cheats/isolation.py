"""The grading tests' access to the operating system's sandbox (bubblewrap).

:func:`sandbox_or_skip` gives the grader's sandbox, or skips the test where ``bwrap`` is missing
or cannot start a sandbox, and fails it instead when the environment variable CI is set (as the
site test treats its browser): a green CI must have graded inside the sandbox. ``.ci/run``
installs bubblewrap with apt.
"""

from __future__ import annotations

import pytest

from conftest import in_ci

from deviating.exercises.sandbox import IsolationUnavailable, Sandbox


def sandbox_or_skip(seccomp: bool = True) -> Sandbox:
    try:
        return Sandbox(seccomp=seccomp)
    except IsolationUnavailable as err:
        reason = f"grading in isolation needs bubblewrap: {err}"
        if in_ci():
            pytest.fail(reason + " [CI is set, so this is a failure, not a skip]")
        pytest.skip(reason)
