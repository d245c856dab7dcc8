"""Running a submission for grading: its own kernel, a time limit per cell, no network.

:func:`execute_sandboxed` runs a notebook's code cells, one at a time, in a fresh kernel that
:func:`kernel_spec` describes (this Python, the Hugging Face libraries offline, the book's
claims never written). The first cell a grader adds calls :func:`block_network`.

Time limits. A cell that runs past its limit is interrupted (``KeyboardInterrupt`` in the
kernel) and recorded as timed out; the notebook goes on with the next cell. A cell that
ignores the interrupt (a bare ``except:`` inside a loop) or kills its kernel cannot be
stopped that way: the kernel is shut down, a fresh one started, and the notebook run again
from the top *without that cell* (at most ``max_restarts`` times). So a run always ends, after
at most ``(1 + max_restarts) x (cells x timeout)`` seconds, whatever the submission does.

The client is nbclient's, driven cell by cell through its public API, with an *asynchronous*
kernel manager: with a blocking one (``jupyter_client.KernelManager``) nbclient's wait for a
cell's output blocks its event loop, so its own timeout never fires and a looping cell hangs
the grader for ever (how the first version of this grader hung).

The network block stops a submission (or a library it calls, such as a model download from a
hub) from reaching the network by accident: the call fails at once with :class:`NetworkBlocked`.
It is not a security boundary against a student who sets out to undo it from inside the
kernel; run the grader in a container without a network for that (``docker run --network none``).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["NetworkBlocked", "block_network", "kernel_spec", "SandboxRun", "execute_sandboxed",
           "TIMEOUT_ERROR", "TIMEOUT_KEY", "KERNEL_NAME"]

KERNEL_NAME = "headlab-grading"
TIMEOUT_ERROR = "CellTimeout"  # the ``ename`` of a cell that ran past its limit
TIMEOUT_KEY = "headlab_timeout"  # a cell's own limit in seconds, in its metadata (default: ``timeout``)


class NetworkBlocked(OSError):
    """A connection to the network was attempted while grading."""


def _is_local(host) -> bool:
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _refuse(what: str) -> None:
    raise NetworkBlocked(f"no network during grading: {what} was refused "
                         "(the submission must run offline, like the book's own models)")


def block_network() -> None:
    """Make every non-loopback connection and name lookup of this process fail with NetworkBlocked."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self, address):  # noqa: ANN001
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(f"a connection to {address[0]}")
        return real_connect(self, address)

    def connect_ex(self, address):  # noqa: ANN001
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(f"a connection to {address[0]}")
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):  # noqa: ANN001
        if not _is_local(host):
            _refuse(f"the name lookup of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.getaddrinfo = getaddrinfo


def kernel_spec(folder: str | Path) -> Path:
    """Write the grading kernel's spec under ``folder`` and return the kernels folder to search.

    The kernel is this Python's ipykernel with the Hugging Face libraries offline, a
    non-interactive matplotlib, one torch thread, and ``HEADLAB_WRITE_CLAIMS=0`` (a graded
    chapter never records verdicts into the installed package).
    """
    kernels = Path(folder) / "kernels"
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                     "--IPKernelApp.log_level=ERROR"],
            "display_name": "headlab grading (no network)", "language": "python",
            "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                    "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "HEADLAB_WRITE_CLAIMS": "0"}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return kernels


@dataclass
class SandboxRun:
    """What happened to a notebook run by :func:`execute_sandboxed`.

    ``timed_out``: indices of the cells that ran past the limit (and were interrupted, or
    skipped after a restart); ``skipped``: cells left out after they ignored the interrupt or
    killed the kernel; ``notes``: one sentence per such event, and why the run stopped if it
    did not reach the last cell.
    """

    timed_out: set[int] = field(default_factory=set)
    skipped: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    restarts: int = 0


class _Stuck(Exception):
    """The kernel did not come back from cell ``index`` (ignored the interrupt, or died)."""

    def __init__(self, index: int, why: str):
        super().__init__(why)
        self.index, self.why = index, why


def _error_output(ename: str, evalue: str) -> dict:
    import nbformat

    return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _run_once(nb, workdir: Path, kernels: Path, timeout: int, startup_timeout: int, probe_timeout: int,
              run: SandboxRun) -> None:
    """One fresh kernel, every code cell not in ``run.skipped`` in order; raises _Stuck."""
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    replies: dict[int, dict] = {}

    def on_executed(cell, cell_index, execute_reply):  # noqa: ANN001, ARG001
        replies[cell_index] = execute_reply.get("content", {})

    km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    limit = f"the cell ran past its time limit ({timeout} s) and was interrupted"

    def limit_of(cell) -> int:  # noqa: ANN001
        return int(cell.metadata.get(TIMEOUT_KEY, timeout))

    client = NotebookClient(nb, km=km, timeout_func=limit_of, startup_timeout=startup_timeout, allow_errors=True,
                            interrupt_on_timeout=True, shutdown_kernel="immediate", record_timing=False,
                            error_on_timeout={"ename": TIMEOUT_ERROR, "evalue": limit, "traceback": []},
                            on_cell_executed=on_executed)
    probe_index = len(nb.cells)
    with client.setup_kernel(cwd=str(workdir), cleanup_kc=True):
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if i in run.skipped:
                cell.outputs = [_error_output(TIMEOUT_ERROR, "not run: it ignored the interrupt at the time limit "
                                                             "or killed its kernel on an earlier try")]
                continue
            try:
                client.execute_cell(cell, i)
            except DeadKernelError:
                raise _Stuck(i, "its kernel died (the cell crashed the Python process)") from None
            if replies.get(i, {}).get("ename") != TIMEOUT_ERROR:
                continue
            run.timed_out.add(i)
            cell.outputs.append(_error_output(TIMEOUT_ERROR, limit))
            # Did the interrupt stop it? A trivial cell answers at once if the kernel is free again.
            # (nbclient stores the executed cell at its index: the probe sits past the last cell, briefly)
            nb.cells.append(nbformat.v4.new_code_cell("pass", metadata={TIMEOUT_KEY: probe_timeout}))
            try:
                client.execute_cell(nb.cells[probe_index], probe_index)
            except DeadKernelError:
                raise _Stuck(i, "its kernel died after the interrupt") from None
            finally:
                nb.cells.pop()
            if replies.get(probe_index, {}).get("ename") == TIMEOUT_ERROR:
                raise _Stuck(i, f"it ran past its time limit ({limit_of(cell)} s) and ignored the interrupt")


def execute_sandboxed(nb, workdir: str | Path, *, timeout: int = 60, startup_timeout: int = 60,
                      probe_timeout: int = 10, max_restarts: int = 2) -> SandboxRun:
    """Execute the code cells of ``nb`` (a ``nbformat`` notebook, changed in place: outputs) in a
    fresh grading kernel whose working directory is ``workdir``; see the module docstring.

    Each cell may run ``timeout`` seconds, or what its metadata sets under ``TIMEOUT_KEY`` (the
    grader gives its first cell, which imports headlab and torch, the ``startup_timeout``).

    Never raises because of what the notebook does: a failed kernel start or a run that had to
    stop is described in the returned :class:`SandboxRun`'s ``notes``.
    """
    if timeout < 1 or probe_timeout < 1:
        raise ValueError(f"timeouts must be at least 1 s, got timeout={timeout}, probe_timeout={probe_timeout}")
    run = SandboxRun()
    with tempfile.TemporaryDirectory(prefix="headlab-kernel-") as folder:
        kernels = kernel_spec(folder)
        for attempt in range(max_restarts + 1):
            for cell in nb.cells:
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = [], None
            try:
                _run_once(nb, Path(workdir), kernels, timeout, startup_timeout, probe_timeout, run)
                return run
            except _Stuck as stuck:
                run.timed_out.add(stuck.index)
                run.skipped.add(stuck.index)
                if attempt < max_restarts:
                    run.restarts += 1
                    run.notes.append(f"cell {stuck.index}: {stuck.why}; the notebook was run again in a new "
                                     "kernel without it")
                else:
                    run.notes.append(f"cell {stuck.index}: {stuck.why}; no restart left ({max_restarts} used): "
                                     "the cells after it did not run")
                    nb.cells[stuck.index].outputs = [_error_output(TIMEOUT_ERROR, stuck.why)]
            except Exception as err:  # noqa: BLE001 (a kernel that cannot start: say so, grade nothing)
                run.notes.append(f"the notebook stopped: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
                                 if str(err) else f"the notebook stopped: {type(err).__name__}")
                return run
    return run
