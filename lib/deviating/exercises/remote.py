"""The grader's side of a grading worker: a student's function called in another process, its values back as data.

:class:`RemoteFunction` stands, in the grader's process, for the function a stub defines. The
book's checks call it like the student's function; each call sends the arguments to a worker
(:mod:`deviating.exercises.worker`: a fresh Python holding the chapter's setup and that one
stub), waits at most ``timeout`` seconds, and decodes the answer with
:func:`deviating.exercises.values.decode` (plain data only). A stub that still raises
``NotImplementedError`` raises it here too; any other failure of the student's code becomes a
:class:`WorkerFailed` whose message says what happened and never quotes the student's output.

Limits (:class:`Limits`), set on the worker with ``resource.setrlimit`` before it starts (Linux):
its address space (``memory_mb``: past it the worker gets ``MemoryError``), its CPU time
(``cpu_s``: past it the kernel stops it with SIGXCPU), the size of a file it writes
(``file_mb``: SIGXFSZ), open files, no core dumps; processes and threads are refused by the
worker's audit hook and capped with RLIMIT_NPROC (a fork bomb ends at the first fork). A call
past ``timeout`` kills the worker; the next call starts a fresh one, at most ``restarts`` times.

Isolation: given a :class:`deviating.exercises.sandbox.Sandbox`, the worker runs inside bubblewrap
(its own user, PID and network namespaces, a filesystem view without the checks, the chapters or
the library's answer to the exercise: see that module). Ending a worker kills the first process of
its PID namespace and waits for the sandbox to exit, which the kernel allows only once every
process of the namespace is gone: a ``setsid`` child cannot outlive its worker. Without a sandbox
(``--unsafe-no-isolation``) the worker runs as a plain process in its own session, and only that
session is killed.
"""

from __future__ import annotations

import functools
import io
import json
import os
import pickle
import resource
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deviating.exercises import ForbiddenCall
from deviating.exercises.guard import forbidden_message
from deviating.exercises.sandbox import FOLDER, Sandbox
from deviating.exercises.values import MAX_BYTES, decode
from deviating.exercises.worker import write_frame

__all__ = ["Limits", "WorkerFailed", "StubProblem", "RemoteFunction"]


@dataclass(frozen=True)
class Limits:
    """What one grading worker may use; see the module docstring."""

    timeout: float = 60.0  # seconds of wall time per call (and for the setup: ``startup``)
    startup: float = 120.0
    memory_mb: int = 4096
    cpu_s: int = 600
    file_mb: int = 64
    tasks: int = 64  # processes and threads above those this user already runs
    restarts: int = 1

    def __post_init__(self) -> None:
        for name in ("timeout", "startup", "memory_mb", "cpu_s", "file_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")


class WorkerFailed(RuntimeError):
    """A call of the student's function did not return a value the grader takes (the reason says why)."""


class StubProblem(Exception):
    """The stub gives no function to call: ``kind`` is missing, broken, library or setup; the message says why."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


_SIGNALS = {signal.SIGXCPU: "its CPU time limit", signal.SIGXFSZ: "its file size limit",
            signal.SIGKILL: "a kill (the memory limit, or the grader at the time limit)",
            signal.SIGSEGV: "a crash (segmentation fault)", signal.SIGABRT: "an abort"}


def _user_tasks() -> int:
    """How many processes and threads this user runs now (RLIMIT_NPROC counts them all)."""
    uid, n = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    n += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                continue
    return n


def _limit(limits: Limits, tasks: int):  # noqa: ANN202
    def apply() -> None:
        mb = 2**20
        for what, value in ((resource.RLIMIT_AS, limits.memory_mb * mb), (resource.RLIMIT_CPU, limits.cpu_s),
                            (resource.RLIMIT_FSIZE, limits.file_mb * mb), (resource.RLIMIT_CORE, 0),
                            (resource.RLIMIT_NOFILE, 256), (resource.RLIMIT_NPROC, tasks)):
            # CPU: SIGXCPU at the soft limit (the reason), SIGKILL a few seconds later if it is caught
            resource.setrlimit(what, (value, value + 5 if what == resource.RLIMIT_CPU else value))
        os.setsid()  # its own process group: killed whole at a time limit
    return apply


class _Pickler(pickle.Pickler):
    """The grader's pickler of a call's arguments: a HeadModel travels as its module, tokenizer and name
    (its adapters hold lambdas, which pickle cannot name); the worker builds it again."""

    def reducer_override(self, obj):  # noqa: ANN001, ANN201
        model = sys.modules.get("headlab.heads.model")
        if model is not None and type(obj) is model.HeadModel:
            return functools.partial(model.HeadModel, name=obj.name, provenance=obj.provenance), (obj.model, obj.tokenizer)
        return NotImplemented


def _dumps(obj: Any) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


class RemoteFunction:
    """The student's function ``name`` (from ``stub``, after ``setup``), run by a worker in ``folder``:
    inside ``sandbox`` when given (hiding the modules ``hide``), else as a plain process."""

    def __init__(self, name: str, setup: str, stub: str, folder: str | Path, limits: Limits = Limits(),
                 sandbox: Sandbox | None = None, hide: tuple[str, ...] = ()):
        self.__name__ = self.__qualname__ = name
        self.__module__ = "submission"
        self._setup, self._stub, self._folder, self._limits = setup, stub, str(folder), limits
        self._sandbox, self._hide = sandbox, tuple(hide)
        self._inside = FOLDER if sandbox is not None else self._folder  # the folder, as the worker sees it
        self._pidfd: int | None = None  # the sandbox's first process (its PID namespace's init)
        self._proc: subprocess.Popen | None = None
        self._fds: tuple[int, int] | None = None
        self._restarts = -1
        self.forbid: tuple = ()  # the modules a plain call must not use (set by call_reader)
        self.events: list[str] = []  # what happened to the worker (time limits, crashes), in order

    # ------------------------------------------------------------------ the worker
    def _env(self) -> dict:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH")}
        path = self._sandbox.pythonpath() if self._sandbox is not None else os.pathsep.join(p for p in sys.path if p)
        return {**keep, "HOME": self._inside, "MPLCONFIGDIR": self._inside, "TMPDIR": self._inside,
                "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HEADLAB_WRITE_CLAIMS": "0",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path}

    def _spawn(self, from_grader: int, to_grader: int) -> None:
        args = [str(from_grader), str(to_grader)]
        limits = _limit(self._limits, _user_tasks() + self._limits.tasks)
        common = dict(env=self._env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      preexec_fn=limits)
        if self._sandbox is None:
            self._proc = subprocess.Popen([sys.executable, "-m", "deviating.exercises.worker", *args], cwd=self._folder,
                                          pass_fds=(from_grader, to_grader), **common)
            return
        info_r, info_w = os.pipe()
        fds = [from_grader, to_grader, info_w]
        seccomp = None
        if self._sandbox.seccomp is not None:
            seccomp = os.memfd_create("seccomp")
            os.write(seccomp, self._sandbox.seccomp)
            os.lseek(seccomp, 0, os.SEEK_SET)
            fds.append(seccomp)
        try:
            cmd = self._sandbox.command(self._folder, ["-m", "gradingworker.worker", *args], self._hide, info_w, seccomp)
            self._proc = subprocess.Popen(cmd, cwd="/", pass_fds=tuple(fds), **common)
        finally:
            for fd in (info_w, seccomp):
                if fd is not None:
                    os.close(fd)
        try:
            info = b""
            while select.select([info_r], [], [], self._limits.startup)[0] and (chunk := os.read(info_r, 4096)):
                info += chunk
            self._pidfd = os.pidfd_open(int(json.loads(info)["child-pid"]))
        except (ValueError, KeyError, TypeError, OSError):
            self._pidfd = None  # the sandbox did not start (bwrap exited): the first read says so
        finally:
            os.close(info_r)

    def start(self) -> None:
        """Start a fresh worker and run the setup and the stub; raise StubProblem if no function comes of it."""
        self.close()
        self._restarts += 1
        from_grader, to_worker = os.pipe()
        from_worker, to_grader = os.pipe()
        try:
            self._spawn(from_grader, to_grader)
        finally:
            os.close(from_grader)
            os.close(to_grader)
        self._fds = (to_worker, from_worker)
        try:
            write_frame(to_worker, pickle.dumps({"folder": self._inside, "setup": self._setup, "stub": self._stub,
                                                 "function": self.__name__}))
        except OSError:
            pass  # the worker is gone already: the read below says how
        head, _ = self._receive(self._limits.startup, "the setup and the stub")
        if head.get("status") not in ("ready", "missing", "broken", "library", "setup"):
            self.close()
            raise WorkerFailed(f"sent an answer the grader cannot read (a status {str(head.get('status'))[:40]!r})")
        if head["status"] != "ready":
            self.close()
            raise StubProblem(str(head["status"])[:40], str(head.get("reason") or head.get("owner") or "")[:300])

    def close(self) -> None:
        """End the worker and everything it started; return once none of it runs (see the module docstring)."""
        if self._pidfd is not None:  # the namespace's init: its death ends every process of the namespace
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
        if self._pidfd is not None:  # bwrap exits after its init is reaped; wait for the init all the same
            select.select([self._pidfd], [], [], 30)
            os.close(self._pidfd)
            self._pidfd = None
        for fd in self._fds or ():
            try:
                os.close(fd)
            except OSError:
                pass
        self._proc, self._fds = None, None

    def _death(self) -> str:
        code = self._proc.wait() if self._proc is not None else None
        if code is not None and self._sandbox is not None and code > 128:  # bwrap's status for a signal
            code = 128 - code
        if code is not None and code < 0:
            return f"the worker was stopped by {_SIGNALS.get(-code, f'signal {-code}')}"
        return f"the worker process exited (status {code}: sys.exit or os._exit in the student's code?)"

    def _receive(self, timeout: float, what: str) -> tuple[dict, Any]:
        fd = self._fds[1]
        deadline = time.monotonic() + timeout
        data = b""
        need = 8
        while len(data) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                self.events.append(f"{what} ran past the time limit of {timeout:g} s")
                raise WorkerFailed(f"ran past the time limit of {timeout:g} s (an infinite loop?); "
                                   "the worker was stopped")
            chunk = os.read(fd, min(1 << 20, need - len(data)))
            if not chunk:
                why = self._death()
                self.close()
                self.events.append(f"during {what}, {why}")
                raise WorkerFailed(why)
            data += chunk
            if need == 8 and len(data) == 8:
                need = 8 + int.from_bytes(data, "big")
                if need - 8 > MAX_BYTES:
                    self.close()
                    raise WorkerFailed(f"returned {need - 8} bytes, more than the grader takes ({MAX_BYTES})")
        head_bytes, _, body = data[8:].partition(b"\n")
        try:
            head = json.loads(head_bytes)
            if type(head) is not dict or type(head.get("status", head.get("bad"))) is not str:
                raise ValueError(head_bytes[:40])
            return head, decode(body) if head.get("status") == "returned" else None
        except (ValueError, TypeError, RecursionError) as err:
            self.close()
            raise WorkerFailed(f"sent an answer the grader cannot read: {str(err)[:120]}") from None

    # ------------------------------------------------------------------ a call
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(args, kwargs, self.forbid)

    def remote_call(self, args: tuple, kwargs: dict, forbid: tuple) -> Any:
        """What :func:`deviating.exercises.call_reader` calls: :meth:`call`."""
        return self.call(args, kwargs, forbid)

    def call(self, args: tuple, kwargs: dict, forbid: tuple = ()) -> Any:
        """The student's function on ``args``: its value (plain data), or an exception saying why not."""
        if self._proc is None or self._proc.poll() is not None:
            if self._restarts >= self._limits.restarts:
                why = f" ({self.events[-1]})" if self.events else ""
                raise WorkerFailed(f"not run: the worker was stopped before{why} and has no restart left")
            self.start()
        try:
            write_frame(self._fds[0], _dumps({"args": args, "kwargs": kwargs, "forbid": list(forbid)}))
        except OSError:
            why = self._death()
            self.close()
            raise WorkerFailed(why) from None
        head, payload = self._receive(self._limits.timeout, "a call")
        status = head.get("status")
        if "bad" in head:
            raise WorkerFailed(f"returned {str(head['bad'])[:300]}")
        if status == "not implemented":
            raise NotImplementedError(self.__name__)
        if status == "forbidden" or (status == "raised" and head.get("hit")):
            raise ForbiddenCall(forbidden_message(self.__name__, str(head.get("hit"))[:200]))
        if status == "raised":
            raise WorkerFailed(f"raised {str(head.get('error'))[:300]}")
        if status == "hooks left":
            raise WorkerFailed(f"left {int(head.get('n', 0))} hook(s) on the model it was given: remove each hook "
                               "once its run is done (handle.remove(), in a finally block)")
        if status != "returned" or not (isinstance(payload, tuple) and len(payload) == 3):
            raise WorkerFailed("sent an answer the grader cannot read")
        value, after_args, after_kwargs = payload
        _copy_back(args, after_args)
        _copy_back(kwargs, after_kwargs)
        return value


def _copy_back(before: Any, after: Any) -> None:
    """Write the worker's in-place changes of the arguments into the grader's copies (same shapes only)."""
    import numpy as np

    if isinstance(before, dict) and isinstance(after, dict):
        for k, v in before.items():
            _copy_back(v, after.get(k))
    elif isinstance(before, (list, tuple)) and isinstance(after, list) and len(before) == len(after):
        for b, a in zip(before, after):
            _copy_back(b, a)
    elif isinstance(before, np.ndarray) and isinstance(after, np.ndarray) and before.shape == after.shape:
        if before.flags.writeable:
            before[...] = after
    elif type(before).__name__ == "Tensor" and type(after).__name__ == "Tensor" and before.shape == after.shape:
        import torch

        with torch.no_grad():
            before.copy_(after.to(before.dtype))
